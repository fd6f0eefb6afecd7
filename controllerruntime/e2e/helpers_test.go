package e2e

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/boltinformer/boltinformer"
	boltcr "github.com/boltinformer/boltinformer/controllerruntime"
	"github.com/boltinformer/boltinformer/examples/operator/derive"
)

// waitTimeout bounds every wait: generous, never a measurement.
const waitTimeout = 3 * time.Minute

// clientset is a client straight to the apiserver (not through a proxy).
func clientset(t testing.TB) kubernetes.Interface {
	t.Helper()
	cfg := cluster.RESTConfig()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

var nsCounter atomic.Int64

// newNamespace creates a namespace for one test (left behind: without a
// controller-manager it would stay Terminating anyway).
func newNamespace(t testing.TB, cs kubernetes.Interface, prefix string) string {
	t.Helper()
	name := fmt.Sprintf("%s-%d-%d", prefix, time.Now().UnixNano()%1_000_000, nsCounter.Add(1))
	if _, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return name
}

// parallel runs f(0..n-1) on workers goroutines and returns the first
// error.
func parallel(ctx context.Context, n, workers int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for range min(workers, n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := f(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

// source returns the i-th source ConfigMap of ns at generation gen.
func source(ns string, i, gen int) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("src-%05d", i), Labels: map[string]string{derive.SourceLabel: "true"}},
		Data:       map[string]string{"gen": fmt.Sprint(gen), "payload": fmt.Sprintf("%0400d", gen*7919+i)},
	}
}

// seedSources creates sources 0..n-1 of ns.
func seedSources(t testing.TB, cs kubernetes.Interface, ns string, n int) {
	t.Helper()
	err := parallel(context.Background(), n, 16, func(ctx context.Context, i int) error {
		_, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, source(ns, i, 0), metav1.CreateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// eventually polls cond every 20 ms until it holds or timeout passes.
func eventually(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// reconciles records what a derive.Reconciler did, per request.
type reconciles struct {
	mu  sync.Mutex
	by  map[string][]derive.Action
	all int
}

func newReconciles() *reconciles { return &reconciles{by: map[string][]derive.Action{}} }

func (r *reconciles) record(req reconcile.Request, a derive.Action, _ int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := req.String()
	r.by[k] = append(r.by[k], a)
	r.all++
}

// actions returns the actions of the request for ns/name.
func (r *reconciles) actions(ns, name string) []derive.Action {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]derive.Action(nil), r.by[ns+"/"+name]...)
}

// keys returns the requests reconciled at least once.
func (r *reconciles) keys() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.by))
	for k := range r.by {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// run is a controller-runtime manager in this process.
type run struct {
	mgr    manager.Manager
	cache  *boltcr.Cache // nil for controller-runtime's own cache
	db     *boltinformer.DB
	cancel context.CancelFunc
	done   chan error
	rec    *reconciles
}

// managerOptions describe a manager to start.
type managerOptions struct {
	config *rest.Config
	path   string          // the cache file; "" for controller-runtime's own cache
	cache  cache.Options   // controller-runtime's cache options
	bolt   *boltcr.Options // boltcr's
	// setup adds controllers; nil adds the derive controller, recorded
	// in run.rec.
	setup func(ctx context.Context, r *run) error
}

// startManager starts a manager and waits for its caches to sync.
func startManager(t testing.TB, o managerOptions) *run {
	t.Helper()
	r := &run{done: make(chan error, 1), rec: newReconciles()}
	mopts := ctrl.Options{
		Cache:                   o.cache,
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:  "0",
		Controller:              config.Controller{SkipNameValidation: ptr.To(true)},
		GracefulShutdownTimeout: ptr.To(time.Minute),
	}
	if o.path != "" {
		db, err := boltinformer.Open(o.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		r.db = db
		newCache := boltcr.NewCache(db, o.bolt)
		mopts.NewCache = func(cfg *rest.Config, copts cache.Options) (cache.Cache, error) {
			c, err := newCache(cfg, copts)
			if bc, ok := c.(*boltcr.Cache); ok {
				r.cache = bc
			}
			return c, err
		}
	}
	mgr, err := ctrl.NewManager(o.config, mopts)
	if err != nil {
		r.closeDB(t)
		t.Fatal(err)
	}
	r.mgr = mgr
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	setup := o.setup
	if setup == nil {
		setup = func(ctx context.Context, r *run) error {
			return (&derive.Reconciler{Client: r.mgr.GetClient(), OnReconcile: r.rec.record}).SetupWithManager(ctx, r.mgr)
		}
	}
	if err := setup(ctx, r); err != nil {
		cancel()
		r.closeDB(t)
		t.Fatal(err)
	}
	go func() { r.done <- mgr.Start(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	sctx, scancel := context.WithTimeout(ctx, waitTimeout)
	defer scancel()
	if !mgr.GetCache().WaitForCacheSync(sctx) {
		t.Fatal("the manager's caches did not sync")
	}
	return r
}

// stop stops the manager (once) and closes its file.
func (r *run) stop(t testing.TB) {
	t.Helper()
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	select {
	case err := <-r.done:
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("manager: %v", err)
		}
	case <-time.After(waitTimeout):
		t.Error("the manager did not stop")
	}
	r.closeDB(t)
}

func (r *run) closeDB(t testing.TB) {
	if r.db != nil {
		if err := r.db.Close(); err != nil {
			t.Errorf("closing the cache file: %v", err)
		}
		r.db = nil
	}
}

func cachePath(t testing.TB) string { return filepath.Join(t.TempDir(), "cache.db") }
