package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	boltcr "github.com/boltinformer/boltinformer/controllerruntime"
	"github.com/boltinformer/boltinformer/examples/operator/derive"
)

// churn is what happens to the sources of ns while the operator is down:
// deleted, updated and created sources, by index.
type churn struct {
	deleted, updated, created []int
}

func newChurn(seeded, n int) churn {
	var c churn
	for i := range n {
		c.deleted = append(c.deleted, i)
		c.updated = append(c.updated, n+i)
		c.created = append(c.created, seeded+i)
	}
	return c
}

func (c churn) apply(t testing.TB, cs kubernetes.Interface, ns string) {
	t.Helper()
	cms := cs.CoreV1().ConfigMaps(ns)
	err := parallel(context.Background(), len(c.deleted), 8, func(ctx context.Context, k int) error {
		if err := cms.Delete(ctx, source(ns, c.deleted[k], 0).Name, metav1.DeleteOptions{}); err != nil {
			return err
		}
		if _, err := cms.Update(ctx, source(ns, c.updated[k], 1), metav1.UpdateOptions{}); err != nil {
			return err
		}
		_, err := cms.Create(ctx, source(ns, c.created[k], 0), metav1.CreateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// derivedState compares the derived ConfigMaps of ns on the server with
// what the sources 0..total-1 after c want, and describes the first
// differences ("" when they agree).
func derivedState(t testing.TB, cs kubernetes.Interface, ns string, total int, c churn) string {
	t.Helper()
	list, err := cs.CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{LabelSelector: derive.DerivedFromLabel})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*corev1.ConfigMap{}
	for i := range list.Items {
		got[list.Items[i].Name] = &list.Items[i]
	}
	var diffs []string
	for i := range total {
		gen := 0
		if slices.Contains(c.updated, i) {
			gen = 1
		}
		want := derive.Derived(source(ns, i, gen))
		d, ok := got[want.Name]
		delete(got, want.Name)
		switch {
		case slices.Contains(c.deleted, i):
			if ok {
				diffs = append(diffs, "derived object of deleted source "+want.Name+" is still there")
			}
		case !ok:
			diffs = append(diffs, "missing "+want.Name)
		case d.Data["gen"] != want.Data["gen"]:
			diffs = append(diffs, "stale "+want.Name)
		}
	}
	for name := range got {
		diffs = append(diffs, "unexpected "+name)
	}
	slices.Sort(diffs)
	if len(diffs) > 5 {
		diffs = append(diffs[:5], fmt.Sprintf("... %d more", len(diffs)-5))
	}
	if len(diffs) == 0 {
		return ""
	}
	return fmt.Sprint(len(diffs), " differences: ", diffs)
}

const (
	restartSources = 300
	restartChurn   = 30
)

// restartScenario runs the derive controller over restartSources
// sources, stops it, churns the sources, and starts it again with the
// same options. It returns the second run (still running), the proxy's
// mark at its start, and the apiserver's LIST count of configmaps then.
func restartScenario(t *testing.T, path string, bopts *boltcr.Options) (*run, *proxy, int, churn, string) {
	cs := clientset(t)
	ns := newNamespace(t, cs, "restart")
	seedSources(t, cs, ns, restartSources)
	p := newProxy(t)
	o := managerOptions{config: p.config(), path: path, bolt: bopts}
	first := startManager(t, o)
	if !eventually(waitTimeout, func() bool { return len(first.rec.keys()) >= restartSources }) {
		t.Fatalf("first run: %d of %d sources reconciled", len(first.rec.keys()), restartSources)
	}
	if !eventually(waitTimeout, func() bool { return derivedState(t, cs, ns, restartSources, churn{}) == "" }) {
		t.Fatalf("first run: %s", derivedState(t, cs, ns, restartSources, churn{}))
	}
	first.stop(t)
	c := newChurn(restartSources, restartChurn)
	c.apply(t, cs, ns)
	mark := p.mark()
	second := startManager(t, o)
	return second, p, mark, c, ns
}

// TestRegressionDownDeletesReachReconcilers: the derive controller with a
// persistent cache is stopped; sources are deleted, updated and created;
// it starts again from its file. Every change is reconciled, deletes
// included (a request per deleted source, whose Get is NotFound: its
// derived object is cleaned up), and the restart lists no ConfigMap in
// full: one metadata-only list makes the cache fresh, the watch resumes.
// Without the replay of the deletes made while it was down (as with
// controller-runtime's own cache: TestDownDeletesLostWithoutReplay) it
// fails.
func TestRegressionDownDeletesReachReconcilers(t *testing.T) {
	cs := clientset(t)
	second, p, mark, c, ns := restartScenario(t, cachePath(t), nil)
	for _, inf := range second.cache.Informers() {
		if inf.Persistent() == nil {
			t.Fatalf("informer %s not persisted: %s", inf.Name(), inf.NotPersisted())
		}
		if d := inf.Persistent().Decision(); !d.Warm {
			t.Fatalf("informer %s started cold: %+v", inf.Name(), d)
		}
	}
	// Every deleted source gets a request, whose Get is NotFound.
	for _, i := range c.deleted {
		name := source(ns, i, 0).Name
		if !eventually(waitTimeout, func() bool { return slices.Contains(second.rec.actions(ns, name), derive.Cleaned) }) {
			t.Fatalf("source %s, deleted while down, was not reconciled as gone: %v", name, second.rec.actions(ns, name))
		}
	}
	if !eventually(waitTimeout, func() bool { return derivedState(t, cs, ns, restartSources+restartChurn, c) == "" }) {
		t.Fatalf("after the warm restart: %s", derivedState(t, cs, ns, restartSources+restartChurn, c))
	}
	tr := summarize(p.since(mark), "configmaps")
	t.Logf("warm restart: configmaps requests %+v", tr)
	if tr.FullLists != 0 {
		t.Errorf("the warm restart listed ConfigMaps in full %d times: %v", tr.FullLists, p.since(mark))
	}
	for _, inf := range second.cache.Informers() {
		if h := inf.Persistent().Health(); !h.Fresh || h.FreshResourceVersion == "" {
			t.Errorf("informer %s: %+v, want fresh at a known resourceVersion", inf.Name(), h)
		}
	}
	if _, err := cs.CoreV1().ConfigMaps(ns).Get(context.Background(), derive.Derived(source(ns, c.deleted[0], 0)).Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("derived object of a deleted source: %v, want NotFound", err)
	}
}

// TestDownDeletesLostWithoutReplay is the control of
// TestRegressionDownDeletesReachReconcilers: with controller-runtime's own
// cache, or a persistent one without the replay of deletes
// (Options.NoReplayDownDeletes), a source deleted while the operator was
// down is never reconciled and its derived object stays, while the
// updates and creates are reconciled.
func TestDownDeletesLostWithoutReplay(t *testing.T) {
	for _, tc := range []struct {
		name string
		path string
		opts *boltcr.Options
	}{
		{"controller-runtime's cache", "", nil},
		{"NoReplayDownDeletes", cachePath(t), &boltcr.Options{NoReplayDownDeletes: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := clientset(t)
			second, _, _, c, ns := restartScenario(t, tc.path, tc.opts)
			for _, i := range c.created {
				name := source(ns, i, 0).Name
				if !eventually(waitTimeout, func() bool { return len(second.rec.actions(ns, name)) > 0 }) {
					t.Fatalf("created source %s not reconciled", name)
				}
			}
			for _, i := range c.deleted {
				name := source(ns, i, 0).Name
				if a := second.rec.actions(ns, name); len(a) != 0 {
					t.Fatalf("source %s, deleted while down, reconciled: %v", name, a)
				}
				if _, err := cs.CoreV1().ConfigMaps(ns).Get(context.Background(), derive.Derived(source(ns, i, 0)).Name, metav1.GetOptions{}); err != nil {
					t.Fatalf("derived object of %s: %v, want it left behind", name, err)
				}
			}
		})
	}
}
