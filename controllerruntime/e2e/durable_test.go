package e2e

// Issue 24, item 3, with real managers: with boltcr.NewQueue a warm start
// reconciles only what needs work.

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	boltcr "github.com/boltinformer/boltinformer/controllerruntime"
)

// durableLog records a durable controller's reconciles: each request
// with what its Get saw ("" for NotFound).
type durableLog struct {
	mu    sync.Mutex
	seen  map[string][]string // request -> resourceVersions seen, in order
	total int
	queue *boltcr.Queue
}

func newDurableLog() *durableLog { return &durableLog{seen: map[string][]string{}} }

func (l *durableLog) requests() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]string, 0, len(l.seen))
	for k := range l.seen {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func (l *durableLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}

func (l *durableLog) busy() int {
	l.mu.Lock()
	q := l.queue
	l.mu.Unlock()
	if q == nil {
		return -1
	}
	return q.Busy()
}

// durableController sets up a controller of ConfigMaps named name with a
// durable queue (boltcr.NewQueue on r's file), recorded in l. Objects
// whose data has "requeue" get RequeueAfter that long.
func durableController(name string, l *durableLog) func(ctx context.Context, r *run) error {
	return func(_ context.Context, r *run) error {
		newQueue := boltcr.NewQueue(r.db, &boltcr.QueueOptions{CheckpointInterval: 100 * time.Millisecond})
		c := r.mgr.GetCache()
		return ctrl.NewControllerManagedBy(r.mgr).Named(name).For(&corev1.ConfigMap{}).
			WithOptions(controller.Options{
				MaxConcurrentReconciles: 2,
				NewQueue: func(n string, rl workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
					q := newQueue(n, rl)
					l.mu.Lock()
					l.queue = q.(*boltcr.Queue)
					l.mu.Unlock()
					return q
				},
			}).
			Complete(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
				var cm corev1.ConfigMap
				rv := ""
				err := c.Get(ctx, req.NamespacedName, &cm)
				switch {
				case apierrors.IsNotFound(err):
				case err != nil:
					return reconcile.Result{}, err
				default:
					rv = cm.ResourceVersion
				}
				l.mu.Lock()
				l.seen[req.String()] = append(l.seen[req.String()], rv)
				l.total++
				l.mu.Unlock()
				if d, err := time.ParseDuration(cm.Data["requeue"]); err == nil && rv != "" {
					return reconcile.Result{RequeueAfter: d}, nil
				}
				return reconcile.Result{}, nil
			}))
	}
}

// TestDurableQueueWarmStartReconcilesOnlyWhatChanged: a controller with a
// durable queue reconciles 200 ConfigMaps (one of them asks for a
// RequeueAfter of 3 s) and stops; while it is down 4 are updated, 2
// created and 2 deleted; at its warm start it reconciles exactly those 8
// and, once its deadline falls due, the requeued one: not the 190
// unchanged (stock controller-runtime reconciles all 200 again).
func TestDurableQueueWarmStartReconcilesOnlyWhatChanged(t *testing.T) {
	const sources = 200
	cs := clientset(t)
	ns := newNamespace(t, cs, "durable")
	seedSources(t, cs, ns, sources)
	ctx := context.Background()
	requeued := source(ns, 7, 0)
	requeued.Data["requeue"] = "3s"
	if _, err := cs.CoreV1().ConfigMaps(ns).Update(ctx, requeued, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	o := managerOptions{
		config: cluster.RESTConfig(),
		path:   cachePath(t),
		cache:  cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
	}
	first := newDurableLog()
	o.setup = durableController("durable", first)
	r1 := startManager(t, o)
	if !eventually(waitTimeout, func() bool { return len(first.requests()) == sources && first.busy() == 0 }) {
		t.Fatalf("first run: %d of %d reconciled, %d busy", len(first.requests()), sources, first.busy())
	}
	r1.stop(t)

	var want []string
	for _, i := range []int{3, 50, 120, 199} {
		if _, err := cs.CoreV1().ConfigMaps(ns).Update(ctx, source(ns, i, 1), metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		want = append(want, ns+"/"+source(ns, i, 1).Name)
	}
	for _, i := range []int{sources, sources + 1} {
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, source(ns, i, 0), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		want = append(want, ns+"/"+source(ns, i, 0).Name)
	}
	for _, i := range []int{10, 11} {
		if err := cs.CoreV1().ConfigMaps(ns).Delete(ctx, source(ns, i, 0).Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		want = append(want, ns+"/"+source(ns, i, 0).Name)
	}
	want = append(want, client.ObjectKeyFromObject(requeued).String())
	slices.Sort(want)

	second := newDurableLog()
	o.setup = durableController("durable", second)
	r2 := startManager(t, o)
	if !eventually(waitTimeout, func() bool { return len(second.requests()) >= len(want) && second.busy() == 0 }) {
		t.Fatalf("warm start: reconciled %v, %d busy; want %v", second.requests(), second.busy(), want)
	}
	if got := second.requests(); !slices.Equal(got, want) {
		t.Fatalf("warm start reconciled\n %v\nwant exactly the objects changed, created or deleted while down and the one due:\n %v", got, want)
	}
	t.Logf("warm start: %d reconciles of %d requests (of %d objects)", second.count(), len(want), sources)
	r2.stop(t)
}
