package localapi_test

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/boltinformer/boltinformer/internal/testobj"
)

// After an agent restart, a watch resumes from a resourceVersion the agent
// served before it, without 410, and gets exactly the changes after it,
// in order (issue 26 item 5). A watcher with no recent event (Python's
// client ignores bookmarks) has an old resourceVersion: the window began
// at the file's resourceVersion at each start, and the watch got 410.
// The window is kept in the file (Informer.KeepWindow).
func TestRegressionWindowAcrossRestart(t *testing.T) {
	src := newPodSource(9) // ns-0, ns-1, ns-2
	a := startAgent(t, "", src)
	_, _, rc := serveAgent(t, a, nil)
	quiet, err := listPods(t, rc, "ns-0", metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r0 := quiet.ResourceVersion
	// Changes elsewhere: the ns-0 watcher sees none of them.
	var want []string
	for i := range 6 {
		p := testobj.Pod(1+3*(i%3), 3, 2, "") // ns-1
		p.Labels["round"] = fmt.Sprint(i)
		if _, err := src.Update(p); err != nil {
			t.Fatal(err)
		}
		want = append(want, "MODIFIED "+p.Namespace+"/"+p.Name)
	}
	if err := src.Delete("ns-2/pod-000002"); err != nil {
		t.Fatal(err)
	}
	want = append(want, "DELETED ns-2/pod-000002")
	a.caughtUp(t)
	a.stop()

	a = startAgent(t, a.path, src)
	_, _, rc = serveAgent(t, a, nil)
	// All namespaces from r0: every change since, from the file's window.
	got := watchEvents(t, rc, "", r0, len(want))
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("watch from %s after the restart:\n got %v\nwant %v", r0, got, want)
	}
	// The quiet watcher resumes, and sees its namespace's next change.
	p := testobj.Pod(0, 3, 2, "")
	p.Labels["after"] = "restart"
	if _, err := src.Update(p); err != nil {
		t.Fatal(err)
	}
	if got := watchEvents(t, rc, "ns-0", r0, 1); fmt.Sprint(got) != "[MODIFIED ns-0/pod-000000]" {
		t.Fatalf("ns-0 from %s: %v", r0, got)
	}
}

// watchEvents watches pods in ns from rv and returns the first n events
// ("TYPE ns/name"); an ERROR event fails the test.
func watchEvents(t *testing.T, rc *rest.RESTClient, ns, rv string, n int) []string {
	t.Helper()
	w, err := rc.Get().Namespace(ns).Resource("pods").VersionedParams(&metav1.ListOptions{Watch: true, ResourceVersion: rv}, scheme.ParameterCodec).Watch(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var got []string
	timeout := time.After(waitTimeout)
	for len(got) < n {
		select {
		case e, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("the watch ended after %v", got)
			}
			if e.Type == watch.Error {
				t.Fatalf("watch from %s: ERROR %v (after %v)", rv, e.Object, got)
			}
			p := e.Object.(*corev1.Pod)
			got = append(got, string(e.Type)+" "+p.Namespace+"/"+p.Name)
		case <-timeout:
			t.Fatalf("watch from %s: %v after %s", rv, got, waitTimeout)
		}
	}
	return got
}
