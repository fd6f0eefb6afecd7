package localapi_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/boltinformer/boltinformer/internal/testobj"
	"github.com/boltinformer/boltinformer/localapi"
	"github.com/boltinformer/boltinformer/recovery/crashtest"
)

func startWatch(t testing.TB, rc *rest.RESTClient, ns string, opts metav1.ListOptions) watch.Interface {
	t.Helper()
	opts.Watch = true
	w, err := rc.Get().Namespace(ns).Resource("pods").VersionedParams(&opts, scheme.ParameterCodec).Watch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return w
}

// next returns the next n events of w (bounded by waitTimeout).
func next(t testing.TB, w watch.Interface, n int) []watch.Event {
	t.Helper()
	var out []watch.Event
	timeout := time.After(waitTimeout)
	for len(out) < n {
		select {
		case e, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch closed after %d of %d events: %v", len(out), n, describe(out))
			}
			out = append(out, e)
		case <-timeout:
			t.Fatalf("timed out after %d of %d events: %v", len(out), n, describe(out))
		}
	}
	return out
}

// describe is "TYPE key@rv" per event.
func describe(evs []watch.Event) []string {
	var out []string
	for _, e := range evs {
		if e.Type == watch.Error {
			out = append(out, "ERROR "+apierrors.FromObject(e.Object).Error())
			continue
		}
		m, err := meta.Accessor(e.Object)
		if err != nil {
			out = append(out, string(e.Type)+" ?")
			continue
		}
		key := m.GetName()
		if m.GetNamespace() != "" {
			key = m.GetNamespace() + "/" + key
		}
		out = append(out, fmt.Sprintf("%s %s@%s", e.Type, key, m.GetResourceVersion()))
	}
	return out
}

// historyAfter is the source's events after rv as describe prints them.
func historyAfter(src *crashtest.Source, rv string, keep func(crashtest.Event) bool) []string {
	var out []string
	for _, e := range src.History() {
		if e.RV <= rvInt(rv) {
			continue
		}
		if keep != nil && !keep(e) {
			continue
		}
		out = append(out, fmt.Sprintf("%s %s@%d", e.Type, e.Key, e.RV))
	}
	return out
}

func changePods(t testing.TB, src *crashtest.Source, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		p := testobj.Pod(i%40, 3, 2, "")
		switch i % 5 {
		case 3:
			if err := src.Delete(p.Namespace + "/" + p.Name); err == nil {
				continue
			}
		case 4:
			p.Labels["tier"] = "moved"
		}
		if _, err := src.Upsert(p); err != nil {
			t.Fatal(err)
		}
	}
}

// TestWatch: a watch from a list's resourceVersion gets exactly the
// source's later events, in order; one from the middle of the window
// resumes there; selectors turn edges into ADDED and DELETED.
func TestWatch(t *testing.T) {
	a := startAgent(t, "", newPodSource(40))
	_, _, rc := serveAgent(t, a, nil)
	l, err := listPods(t, rc, "", metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rv := l.ResourceVersion
	all := startWatch(t, rc, "", metav1.ListOptions{ResourceVersion: rv})
	ns1 := startWatch(t, rc, "ns-1", metav1.ListOptions{ResourceVersion: rv, LabelSelector: "tier!=moved"})
	changePods(t, a.src, 0, 60)
	a.caughtUp(t)
	want := historyAfter(a.src, rv, nil)
	if got := describe(next(t, all, len(want))); !slices.Equal(got, want) {
		t.Fatalf("watch from %s:\n%v\nwant\n%v", rv, got, want)
	}

	// The namespace watch with a selector: events of ns-1 only; a pod
	// that moves out of the selector is DELETED, one that comes back
	// ADDED.
	var wantNS []string
	state := map[string]bool{} // selected now
	for k, o := range l.Items {
		_ = k
		if o.Namespace == "ns-1" && o.Labels["tier"] != "moved" {
			state[o.Namespace+"/"+o.Name] = true
		}
	}
	for _, e := range a.src.History() {
		if !strings.HasPrefix(e.Key, "ns-1/") || e.RV <= rvInt(rv) {
			continue
		}
		sel := e.Type != watch.Deleted && e.Object.(*corev1.Pod).Labels["tier"] != "moved"
		typ := ""
		switch was := state[e.Key]; {
		case e.Type == watch.Deleted && was:
			typ = "DELETED"
		case sel && was:
			typ = "MODIFIED"
		case sel:
			typ = "ADDED"
		case was:
			typ = "DELETED"
		}
		state[e.Key] = sel
		if typ != "" {
			wantNS = append(wantNS, fmt.Sprintf("%s %s@%d", typ, e.Key, e.RV))
		}
	}
	if got := describe(next(t, ns1, len(wantNS))); !slices.Equal(got, wantNS) {
		t.Fatalf("watch of ns-1, tier!=moved:\n%v\nwant\n%v", got, wantNS)
	}

	// Resume from the middle of the window.
	h := a.src.History()
	mid := fmt.Sprint(h[len(h)-20].RV)
	w := startWatch(t, rc, "", metav1.ListOptions{ResourceVersion: mid})
	if got, want := describe(next(t, w, 19)), historyAfter(a.src, mid, nil); !slices.Equal(got, want) {
		t.Fatalf("watch from %s:\n%v\nwant\n%v", mid, got, want)
	}
}

func rvInt(rv string) int64 {
	var n int64
	fmt.Sscan(rv, &n)
	return n
}

// TestWatchWindow: a watch from before the window, or one that fell out of
// it, gets an ERROR event with 410 Expired; one from after the cache's
// resourceVersion gets "Too large resource version" once the wait is over.
func TestWatchWindow(t *testing.T) {
	a := startAgent(t, "", newPodSource(10))
	_, _, rc := serveAgent(t, a, &localapi.Options{WindowEvents: 8, WaitForResourceVersion: 50 * time.Millisecond})
	start := a.src.ResourceVersion()
	changePods(t, a.src, 0, 20)
	a.caughtUp(t)
	evs := next(t, startWatch(t, rc, "", metav1.ListOptions{ResourceVersion: start}), 1)
	if evs[0].Type != watch.Error || !apierrors.IsResourceExpired(apierrors.FromObject(evs[0].Object)) {
		t.Fatalf("watch from before the window: %v", describe(evs))
	}
	future := fmt.Sprint(rvInt(a.src.ResourceVersion()) + 100)
	evs = next(t, startWatch(t, rc, "", metav1.ListOptions{ResourceVersion: future}), 1)
	werr := apierrors.FromObject(evs[0].Object)
	if evs[0].Type != watch.Error || !apierrors.IsTimeout(werr) || !apierrors.HasStatusCause(werr, metav1.CauseTypeResourceVersionTooLarge) {
		t.Fatalf("watch from the future: %v", describe(evs))
	}
	// A LIST not older than the future waits, then says too large too,
	// with a Retry-After (client-go retries it for ten seconds: a raw
	// request here).
	resp, err := rc.Client.Get(rc.Get().Resource("pods").Param("resourceVersion", future).URL().String())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusGatewayTimeout || resp.Header.Get("Retry-After") != "1" || !strings.Contains(string(b), string(metav1.CauseTypeResourceVersionTooLarge)) {
		t.Fatalf("list not older than %s: %d %s", future, resp.StatusCode, b)
	}
	// A watch from the future that the cache reaches in time works.
	_, _, rc2 := serveAgent(t, a, &localapi.Options{WaitForResourceVersion: waitTimeout})
	soon := fmt.Sprint(rvInt(a.src.ResourceVersion()) + 1)
	done := make(chan watch.Interface)
	go func() { done <- startWatch(t, rc2, "", metav1.ListOptions{ResourceVersion: soon}) }()
	time.Sleep(20 * time.Millisecond)
	changePods(t, a.src, 100, 2)
	w := <-done
	if got, want := describe(next(t, w, 1)), historyAfter(a.src, soon, nil); !slices.Equal(got, want[:1]) {
		t.Fatalf("watch from %s: %v, want %v", soon, got, want[:1])
	}
}

// TestWatchSlowReader: a watch whose client does not read falls out of
// the window and ends with 410 Expired; the informer never waits for it.
func TestWatchSlowReader(t *testing.T) {
	a := startAgent(t, "", newPodSource(4))
	_, cfg, _ := serveAgent(t, a, &localapi.Options{WindowEvents: 16})
	req, _ := http.NewRequest(http.MethodGet, cfg.Host+"/api/v1/pods?watch=1&resourceVersion="+a.src.ResourceVersion(), nil)
	resp, err := httpClient(t, cfg).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	// Big objects, so that the socket buffers fill up long before the
	// events end: the server's writes block, the window moves on.
	for i := range 400 {
		p := testobj.Pod(i%4, 3, 2, "")
		p.Annotations["ballast"] = strings.Repeat("x", 64<<10)
		if _, err := a.src.Upsert(p); err != nil {
			t.Fatal(err)
		}
	}
	a.caughtUp(t) // the informer was not held up by the stuck watch
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	last := lines[len(lines)-1]
	if len(lines) >= 400 || !strings.Contains(last, `"type":"ERROR"`) || !strings.Contains(last, `"code":410`) {
		t.Fatalf("%d events, the last %.200s", len(lines), last)
	}
}

// TestWatchBookmarksAndInitialEvents: sendInitialEvents streams the
// current objects and the initial-events-end bookmark; the informer's
// bookmarks are passed on to watches that allow them.
func TestWatchBookmarksAndInitialEvents(t *testing.T) {
	a := startAgent(t, "", newPodSource(9))
	_, _, rc := serveAgent(t, a, &localapi.Options{BookmarkInterval: 20 * time.Millisecond})
	w := startWatch(t, rc, "ns-0", metav1.ListOptions{SendInitialEvents: ptr.To(true), AllowWatchBookmarks: true,
		ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, ResourceVersion: a.src.ResourceVersion()})
	evs := next(t, w, 4)
	got := describe(evs)
	want := []string{"ADDED ns-0/pod-000000@1", "ADDED ns-0/pod-000003@4", "ADDED ns-0/pod-000006@7", "BOOKMARK @9"}
	if !slices.Equal(got, want) {
		t.Fatalf("initial events %v, want %v", got, want)
	}
	if m, _ := meta.Accessor(evs[3].Object); m.GetAnnotations()[metav1.InitialEventsAnnotationKey] != "true" {
		t.Fatalf("initial-events-end bookmark without its annotation: %v", m.GetAnnotations())
	}
	// Changes, and periodic bookmarks at the cache's resourceVersion
	// once the watch has every event before it.
	for _, i := range []int{0, 1, 3} {
		p := testobj.Pod(i, 3, 2, "")
		p.Labels["x"] = "y"
		if _, err := a.src.Update(p); err != nil {
			t.Fatal(err)
		}
	}
	a.caughtUp(t)
	got = nil
	for len(got) < 3 || got[len(got)-1] != "BOOKMARK @12" {
		got = append(got, describe(next(t, w, 1))...)
		if n := len(got); n > 2 && got[n-1] == got[n-2] {
			got = got[:n-1] // the same bookmark again
		}
		if len(got) == 1 && got[0] == "BOOKMARK @9" {
			got = nil // a periodic bookmark before the changes arrived
		}
	}
	if want := []string{"MODIFIED ns-0/pod-000000@10", "MODIFIED ns-0/pod-000003@12", "BOOKMARK @12"}; !slices.Equal(got, want) {
		t.Fatalf("events and bookmarks %v, want %v", got, want)
	}

	// The legacy watch without a resourceVersion: the current objects as
	// ADDED, then the changes.
	w = startWatch(t, rc, "ns-2", metav1.ListOptions{})
	if got := describe(next(t, w, 3)); len(got) != 3 || !strings.HasPrefix(got[0], "ADDED ns-2/pod-000002@") {
		t.Fatalf("watch without a resourceVersion: %v", got)
	}
}

// TestWatchFormats: a protobuf watch, a Table watch (column definitions
// in the first event only) and a metadata-only watch.
func TestWatchFormats(t *testing.T) {
	a := startAgent(t, "", newPodSource(6))
	_, cfg, _ := serveAgent(t, a, nil)
	pcfg := rest.CopyConfig(cfg)
	pcfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf"
	pcfg.ContentType = "application/vnd.kubernetes.protobuf"
	prc := restClient(t, pcfg, schema.GroupVersion{Version: "v1"})
	rv := a.src.ResourceVersion()
	w := startWatch(t, prc, "", metav1.ListOptions{ResourceVersion: rv})
	changePods(t, a.src, 0, 3)
	a.caughtUp(t)
	evs := next(t, w, 3)
	if got, want := describe(evs), historyAfter(a.src, rv, nil); !slices.Equal(got, want) {
		t.Fatalf("protobuf watch %v, want %v", got, want)
	}
	if p := evs[0].Object.(*corev1.Pod); len(p.Spec.Containers) == 0 || p.Spec.Containers[0].Image == "" {
		t.Fatalf("protobuf watch object: %+v", p.Spec)
	}

	req, _ := http.NewRequest(http.MethodGet, cfg.Host+"/api/v1/pods?watch=true&resourceVersion="+rv, nil)
	req.Header.Set("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io,application/json")
	resp, err := httpClient(t, cfg).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 1<<20)
	var body string
	for strings.Count(body, "\n") < 3 {
		n, err := resp.Body.Read(buf)
		if err != nil {
			t.Fatalf("table watch: %v after %q", err, body)
		}
		body += string(buf[:n])
	}
	lines := strings.Split(body, "\n")
	if !strings.Contains(lines[0], `"columnDefinitions":[{"name":"Name"`) || !strings.Contains(lines[1], `"columnDefinitions":null`) || !strings.Contains(lines[1], `"kind":"Table"`) {
		t.Fatalf("table watch:\n%s", body)
	}
}
