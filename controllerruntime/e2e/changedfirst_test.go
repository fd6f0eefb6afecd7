package e2e

// Issue 24, item 2, with a real manager: at a warm start the objects
// changed or created while the operator was down are reconciled before
// the unchanged ones (boltinformer.InformerOptions.ChangedFirst, which
// NewCache sets, and controller-runtime's priority queue).

import (
	"context"
	"slices"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// orderLog records the order of a controller's reconciles.
type orderLog struct {
	mu    sync.Mutex
	order []string // request keys, in reconcile order
}

func (l *orderLog) add(req reconcile.Request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.order = append(l.order, req.String())
}

// firstDistinct returns the first n distinct requests reconciled, and how
// many distinct requests were reconciled.
func (l *orderLog) firstDistinct(n int) ([]string, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := map[string]bool{}
	var first []string
	for _, k := range l.order {
		if !seen[k] {
			seen[k] = true
			if len(first) < n {
				first = append(first, k)
			}
		}
	}
	return first, len(seen)
}

// orderedController sets up a controller of ConfigMaps with one worker
// that records the order of its reconciles in l.
func orderedController(name string, l *orderLog) func(ctx context.Context, r *run) error {
	return func(_ context.Context, r *run) error {
		return ctrl.NewControllerManagedBy(r.mgr).Named(name).For(&corev1.ConfigMap{}).
			WithOptions(controller.Options{MaxConcurrentReconciles: 1}).
			Complete(reconcile.Func(func(_ context.Context, req reconcile.Request) (reconcile.Result, error) {
				l.add(req)
				return reconcile.Result{}, nil
			}))
	}
}

// TestChangedFirstAtWarmStart: an operator reconciles 200 ConfigMaps and
// stops; while it is down the 10 whose names sort last are updated and 3
// are created; at its warm start (one worker) the 13 changed ones are
// reconciled before any of the unchanged. Stock controller-runtime (and
// boltcr before ChangedFirst) gives every object as an initial-list add
// at LowPriority, so the changed ones wait behind the others.
func TestChangedFirstAtWarmStart(t *testing.T) {
	const sources, updated, created = 200, 10, 3
	cs := clientset(t)
	ns := newNamespace(t, cs, "changedfirst")
	seedSources(t, cs, ns, sources)
	o := managerOptions{
		config: cluster.RESTConfig(),
		path:   cachePath(t),
		cache:  cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
	}
	first := &orderLog{}
	o.setup = orderedController("changedfirst-1", first)
	r1 := startManager(t, o)
	if !eventually(waitTimeout, func() bool { _, n := first.firstDistinct(0); return n == sources }) {
		_, n := first.firstDistinct(0)
		t.Fatalf("first run: %d of %d reconciled", n, sources)
	}
	r1.stop(t)

	var changed []string
	ctx := context.Background()
	for i := sources - updated; i < sources; i++ {
		if _, err := cs.CoreV1().ConfigMaps(ns).Update(ctx, source(ns, i, 1), metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		changed = append(changed, ns+"/"+source(ns, i, 1).Name)
	}
	for i := sources; i < sources+created; i++ {
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, source(ns, i, 0), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		changed = append(changed, ns+"/"+source(ns, i, 0).Name)
	}

	second := &orderLog{}
	o.setup = orderedController("changedfirst-2", second)
	r2 := startManager(t, o)
	total := sources + created
	if !eventually(waitTimeout, func() bool { _, n := second.firstDistinct(0); return n == total }) {
		_, n := second.firstDistinct(0)
		t.Fatalf("warm start: %d of %d reconciled", n, total)
	}
	if inf := r2.cache.Informers(); len(inf) != 1 || inf[0].Persistent() == nil || !inf[0].Persistent().Decision().Warm {
		t.Fatalf("want one persisted informer started warm: %v", inf)
	}
	got, _ := second.firstDistinct(len(changed))
	slices.Sort(got)
	slices.Sort(changed)
	if !slices.Equal(got, changed) {
		t.Fatalf("the first %d reconciles of the warm start are not the objects changed while down:\n got %v\nwant %v", len(changed), got, changed)
	}
	t.Logf("warm start: the %d changed objects came first of %d", len(changed), total)
	r2.stop(t)
}
