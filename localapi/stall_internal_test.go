package localapi

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/internal/testobj"
)

// hangTimeout bounds the waits of the internal tests: a deadline for a
// hang, not a threshold.
const hangTimeout = 60 * time.Second

// podsHandler is a handler serving one view of n Pods (benchPods) at
// resourceVersion n, as core/v1 pods.
func podsHandler(tb testing.TB, n int) (*Handler, *view) {
	tb.Helper()
	logger := klog.Background().V(10)
	h := newHandler(&Options{Logger: &logger})
	v := newView(DefaultWindowEvents, h.budget)
	v.initLocked(boltinformer.ObservedState{Objects: benchPods(n), ResourceVersion: strconv.Itoa(n), Synced: true})
	sv := &served{view: v}
	var err error
	sv.res, err = describe(Resource{Informer: "pods"}, "/v1, Resource=pods", &corev1.Pod{}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	h.mu.Lock()
	h.addLocked(sv, nil)
	h.mu.Unlock()
	return h, v
}

// TestRegressionSelectionDoesNotHoldUpTheInformer (issue 23, finding 5):
// while a LIST, or a watch's initial events, is selecting (held there by
// the test hook: a selector of any cost), the informer's observer
// (view.apply, which runs under the informer's lock) completes, and so
// does a GET of the same resource. The LIST then answers the objects and
// the resourceVersion of the state it started from; the watch its initial
// events of that state, then the change as an event.
func TestRegressionSelectionDoesNotHoldUpTheInformer(t *testing.T) {
	const n = 200
	for _, tc := range []struct{ name, query string }{
		{"list", "labelSelector=" + url.QueryEscape("!absent")},
		{"list-page", "limit=50&labelSelector=" + url.QueryEscape("!absent")},
		{"list-namespace", "fieldSelector=" + url.QueryEscape("metadata.name!=x")},
		{"watch", "watch=1&labelSelector=" + url.QueryEscape("!absent")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, v := podsHandler(t, n)
			entered, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			h.testHookSelecting = func() {
				once.Do(func() {
					close(entered)
					<-release
				})
			}
			var releaseOnce sync.Once
			releaseAll := func() { releaseOnce.Do(func() { close(release) }) }
			srv := httptest.NewServer(h)
			defer srv.Close()
			defer h.Close()
			defer releaseAll()

			type result struct {
				lines []string
				err   error
			}
			done := make(chan result, 1)
			path := "/api/v1/pods?" + tc.query
			go func() {
				resp, err := srv.Client().Get(srv.URL + path)
				if err != nil {
					done <- result{err: err}
					return
				}
				defer resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					done <- result{err: fmt.Errorf("status %d", resp.StatusCode)}
					return
				}
				var r result
				sc := bufio.NewScanner(resp.Body)
				sc.Buffer(nil, 64<<20)
				for sc.Scan() {
					r.lines = append(r.lines, sc.Text())
					if strings.Contains(sc.Text(), `"name":"new"`) {
						break // the watch's change
					}
				}
				r.err = sc.Err()
				done <- r
			}()
			select {
			case <-entered:
			case r := <-done:
				t.Fatalf("the request ended before selecting: %+v", r)
			case <-time.After(hangTimeout):
				t.Fatal("the request did not start selecting")
			}

			applied := make(chan struct{})
			newPod := testobj.Pod(n, 100, 50, strconv.Itoa(n+1))
			newPod.Namespace, newPod.Name = "ns-0", "new"
			go func() {
				defer close(applied)
				v.apply(boltinformer.Change{Type: boltinformer.ChangeUpsert, Key: "ns-0/new", Object: newPod, ResourceVersion: newPod.ResourceVersion})
			}()
			select {
			case <-applied:
			case <-time.After(hangTimeout):
				t.Fatalf("the informer's apply waited %s for a selection in progress", hangTimeout)
			}
			resp, err := srv.Client().Get(srv.URL + "/api/v1/namespaces/ns-0/pods/new")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("GET of the new Pod while a selection runs: %d", resp.StatusCode)
			}
			releaseAll()

			var r result
			select {
			case r = <-done:
			case <-time.After(hangTimeout):
				t.Fatal("the request did not end")
			}
			if r.err != nil {
				t.Fatal(r.err)
			}
			if tc.name == "watch" {
				// n ADDED of the state the watch started from, then the change.
				if len(r.lines) != n+1 || !strings.Contains(r.lines[n], `"type":"ADDED"`) || !strings.Contains(r.lines[n], `"resourceVersion":"201"`) {
					t.Fatalf("watch: %d events, last %.200s", len(r.lines), r.lines[len(r.lines)-1])
				}
				for _, l := range r.lines[:n] {
					if strings.Contains(l, `"name":"new"`) {
						t.Fatal("the initial events hold the change made after they were selected")
					}
				}
				return
			}
			var list corev1.PodList
			if err := json.Unmarshal([]byte(strings.Join(r.lines, "\n")), &list); err != nil {
				t.Fatal(err)
			}
			want := n
			if strings.Contains(tc.query, "limit=50") {
				want = 50
			}
			if list.ResourceVersion != strconv.Itoa(n) || len(list.Items) != want {
				t.Fatalf("list: %d items at %q, want %d at %d (the state the list started from)", len(list.Items), list.ResourceVersion, want, n)
			}
			for _, p := range list.Items {
				if p.Name == "new" {
					t.Fatal("the list holds the change made after its resourceVersion")
				}
			}
		})
	}
}
