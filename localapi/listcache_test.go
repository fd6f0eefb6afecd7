package localapi_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/boltinformer/boltinformer/internal/testobj"
	"github.com/boltinformer/boltinformer/localapi"
)

// podVersions are the pods of a list as "ns/name@resourceVersion
// label=value...", in the list's order.
func podVersions(l *corev1.PodList) []string {
	var out []string
	for _, p := range l.Items {
		out = append(out, podVersion(&p))
	}
	return out
}

func podVersion(p *corev1.Pod) string {
	return fmt.Sprintf("%s/%s@%s x=%s", p.Namespace, p.Name, p.ResourceVersion, p.Labels["x"])
}

// sourceVersions are the source's pods, as podVersions shows them, in key
// order.
func sourceVersions(a *agent) []string {
	var out []string
	for _, k := range truthKeys(a.src, nil) {
		out = append(out, podVersion(a.src.Objects()[k].(*corev1.Pod)))
	}
	return out
}

// TestListCacheServesTheCurrentVersion: lists keep each object's
// encodings (JSON, protobuf) across requests; after the object is updated,
// deleted and created again, or relisted, every list, in either format,
// serves the version the cache holds now, never a kept encoding of an
// older one; a continue token from before the changes still serves the
// state of its resourceVersion. With ListCacheBytes negative (none kept)
// and tiny (most not kept) the answers are the same.
func TestListCacheServesTheCurrentVersion(t *testing.T) {
	for _, budget := range []int64{0, -1, 2000} {
		t.Run(fmt.Sprint(budget), func(t *testing.T) {
			a := startAgent(t, "", newPodSource(30))
			_, cfg, jsonRC := serveAgent(t, a, &localapi.Options{ListCacheBytes: budget})
			pcfg := rest.CopyConfig(cfg)
			pcfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf"
			protoRC := restClient(t, pcfg, schema.GroupVersion{Version: "v1"})
			clients := map[string]*rest.RESTClient{"json": jsonRC, "protobuf": protoRC}
			check := func(when string) {
				t.Helper()
				want := sourceVersions(a)
				for name, rc := range clients {
					for range 2 { // the second from the kept encodings
						l, err := listPods(t, rc, "", metav1.ListOptions{})
						if err != nil {
							t.Fatal(err)
						}
						if got := podVersions(l); !slices.Equal(got, want) {
							t.Fatalf("%s, %s list:\n got %v\nwant %v", when, name, got, want)
						}
						if l.ResourceVersion != a.src.ResourceVersion() {
							t.Fatalf("%s, %s list at %s, want %s", when, name, l.ResourceVersion, a.src.ResourceVersion())
						}
					}
					var p corev1.Pod
					if err := rc.Get().Namespace("ns-1").Resource("pods").Name(testobj.Pod(7, 3, 2, "").Name).Do(context.Background()).Into(&p); err != nil {
						t.Fatal(err)
					}
					if got, want := podVersion(&p), podVersion(a.src.Objects()["ns-1/"+p.Name].(*corev1.Pod)); got != want {
						t.Fatalf("%s, %s get: %s, want %s", when, name, got, want)
					}
				}
			}
			check("at first")
			// A first page, its continue token kept for after the changes.
			first, err := listPods(t, jsonRC, "", metav1.ListOptions{Limit: 10})
			if err != nil {
				t.Fatal(err)
			}
			before := sourceVersions(a)
			// Updates of the first 20 pods (every one of them listed, kept).
			for i := range 20 {
				p := testobj.Pod(i, 3, 2, "")
				p.Labels["x"] = "1"
				if _, err := a.src.Update(p); err != nil {
					t.Fatal(err)
				}
			}
			a.caughtUp(t)
			check("after updates")
			// The continue token: the rest of the state before the updates,
			// in both formats.
			for name, rc := range clients {
				l, err := listPods(t, rc, "", metav1.ListOptions{Limit: 100, Continue: first.Continue})
				if err != nil {
					t.Fatal(err)
				}
				if got := podVersions(l); !slices.Equal(got, before[10:]) {
					t.Fatalf("%s, the rest of the first list:\n got %v\nwant %v", name, got, before[10:])
				}
			}
			// Another update of the same pods, a delete and a create again
			// under the same name.
			for i := range 20 {
				p := testobj.Pod(i, 3, 2, "")
				p.Labels["x"] = "2"
				if _, err := a.src.Update(p); err != nil {
					t.Fatal(err)
				}
			}
			p4 := testobj.Pod(4, 3, 2, "")
			if err := a.src.Delete(p4.Namespace + "/" + p4.Name); err != nil {
				t.Fatal(err)
			}
			a.caughtUp(t)
			check("after a delete")
			p4.Labels["x"] = "3"
			if _, err := a.src.Create(p4); err != nil {
				t.Fatal(err)
			}
			a.caughtUp(t)
			check("after a create again")
		})
	}
}
