package e2e

// Issue 23, item 9, with real managers: with Options.SyncAfterDiskLoad,
// the deletes made while the operator was down reach its reconcilers, also
// when its controllers start after the resumed watch has applied them.

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	boltcr "github.com/boltinformer/boltinformer/controllerruntime"
	"github.com/boltinformer/boltinformer/examples/operator/derive"
)

// lateController sets up the derive controller of a run only once the
// run's cache has applied the deletes of ns's sources gone (its Get is
// NotFound for each): its handlers come after the resumed watch has
// applied those deletes. An operator meets this order when its
// controllers start late while its caches, started first, synced at the
// disk load: leader election after a kill -9 (the new process waits for
// the old lease to run out), a slow setup. Its setup is a
// managerOptions.setup.
type lateController struct {
	ns   string
	gone []int
	done chan struct{} // closed once the controller is set up, or err set
	err  error
}

func newLateController(ns string, gone []int) *lateController {
	return &lateController{ns: ns, gone: gone, done: make(chan struct{})}
}

// setup adds a runnable to r's manager that waits for the deletes, then
// adds the controller (the manager starts it at once).
func (l *lateController) setup(_ context.Context, r *run) error {
	return r.mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		l.err = l.open(ctx, r)
		close(l.done)
		return l.err
	}))
}

func (l *lateController) open(ctx context.Context, r *run) error {
	c := r.mgr.GetCache()
	// The informer the controller then uses, started and synced.
	if _, err := c.GetInformer(ctx, &corev1.ConfigMap{}); err != nil {
		return fmt.Errorf("the ConfigMap informer: %w", err)
	}
	for _, i := range l.gone {
		key := client.ObjectKeyFromObject(source(l.ns, i, 0))
		var err error
		if !eventually(waitTimeout, func() bool {
			err = c.Get(ctx, key, &corev1.ConfigMap{})
			return apierrors.IsNotFound(err)
		}) {
			return fmt.Errorf("the cache still reads %s, deleted while the operator was down: %v", key, err)
		}
	}
	return (&derive.Reconciler{Client: r.mgr.GetClient(), OnReconcile: r.rec.record}).SetupWithManager(ctx, r.mgr)
}

// wait waits until the controller is set up.
func (l *lateController) wait(t testing.TB) {
	t.Helper()
	select {
	case <-l.done:
		if l.err != nil {
			t.Fatalf("setting up the controller late: %v", l.err)
		}
	case <-time.After(2 * waitTimeout):
		t.Fatal("the controller was not set up")
	}
}

// TestRegressionDownDeletesReachReconcilersSyncAfterDiskLoad: an operator
// with Options.SyncAfterDiskLoad is stopped (cleanly, or killed with
// SIGKILL: the example operator's binary); sources are deleted (3, or 50:
// more than one watch event applies), updated and created while it is
// down (and the apiserver restarts, so that the resumed watch gets 410 and
// the informer relists); it starts again warm from its file, and its
// controller starts only once the cache has applied the deletes
// (lateController). Every deleted source still gets a request whose Get is
// NotFound (derive.Cleaned: its derived object is deleted), and the
// restart lists no ConfigMap in full.
// Before the fix (908e991) a SyncAfterDiskLoad warm start was fresh at its
// first watch event and kept only the deletes applied before it for the
// late handlers: the others never reached the reconciler.
func TestRegressionDownDeletesReachReconcilersSyncAfterDiskLoad(t *testing.T) {
	const sources = 100
	for _, tc := range []struct {
		name       string
		deletes    int
		kill       bool // the first run is the example operator, killed
		kasRestart bool // the apiserver restarts while down: a 410
	}{
		{"3 deletes", 3, false, false},
		{"50 deletes", 50, false, false},
		{"50 deletes after kill -9", 50, true, false},
		{"50 deletes and a 410", 50, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := clientset(t)
			ns := newNamespace(t, cs, "diskload")
			seedSources(t, cs, ns, sources)
			p := newProxy(t)
			dir := t.TempDir()
			o := managerOptions{
				config: p.config(),
				path:   filepath.Join(dir, "cache.db"),
				cache:  cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
				bolt:   &boltcr.Options{SyncAfterDiskLoad: true},
			}
			if tc.kill {
				// The example operator, as a user runs it: the same
				// scope and options, so the next run resumes its file.
				op := startProcess(t, dir, "operator", nil, operatorBinary(t),
					"--kubeconfig", p.kubeconfig(t, dir), "--cache-file", o.path, "--namespace", ns, "--sync-after-disk-load")
				if !eventually(waitTimeout, func() bool { return derivedState(t, cs, ns, sources, churn{}) == "" }) {
					t.Fatalf("first run: %s\n%s", derivedState(t, cs, ns, sources, churn{}), op.logText(t))
				}
				op.signal(t, syscall.SIGKILL)
			} else {
				first := startManager(t, o)
				if !eventually(waitTimeout, func() bool { return derivedState(t, cs, ns, sources, churn{}) == "" }) {
					t.Fatalf("first run: %s", derivedState(t, cs, ns, sources, churn{}))
				}
				first.stop(t)
			}
			c := newChurn(sources, tc.deletes)
			c.apply(t, cs, ns)
			if tc.kasRestart {
				restartAPIServer(t, false)
			}

			mark := p.mark()
			late := newLateController(ns, c.deleted)
			o.setup = late.setup
			second := startManager(t, o)
			late.wait(t)
			infs := second.cache.Informers()
			if len(infs) != 1 {
				t.Fatalf("%d informers, want the ConfigMaps of %s", len(infs), ns)
			}
			inf := infs[0]
			if inf.Persistent() == nil {
				t.Fatalf("informer %s not persisted: %s", inf.Name(), inf.NotPersisted())
			}
			if d := inf.Persistent().Decision(); !d.Warm {
				t.Fatalf("informer %s started cold: %+v", inf.Name(), d)
			}

			var lost []string
			if !eventually(waitTimeout, func() bool {
				lost = lost[:0]
				for _, i := range c.deleted {
					name := source(ns, i, 0).Name
					if !slices.Contains(second.rec.actions(ns, name), derive.Cleaned) {
						lost = append(lost, name)
					}
				}
				return len(lost) == 0
			}) {
				t.Fatalf("%d of the %d sources deleted while the operator was down never reached the reconciler as gone: %v", len(lost), len(c.deleted), lost[:min(len(lost), 5)])
			}
			total := sources + len(c.created)
			if !eventually(waitTimeout, func() bool { return derivedState(t, cs, ns, total, c) == "" }) {
				t.Fatalf("after the warm restart: %s", derivedState(t, cs, ns, total, c))
			}
			if !eventually(waitTimeout, func() bool { return inf.Persistent().Health().Fresh }) {
				t.Fatalf("never fresh: %+v", inf.Persistent().Health())
			}
			// The cost of knowing the deletes: one object's metadata (the
			// server's resourceVersion, read as the informer starts) and
			// one more per watch started before it is fresh (the nudge
			// that moves kube-apiserver's watch cache to send its
			// bookmark), and at most one metadata list.
			// After a 410 the relist lists every object: 150 changes of
			// 100 objects are above PartialRelistRatio's 5%.
			tr := summarize(p.since(mark), "configmaps")
			t.Logf("warm restart: configmaps requests %+v", tr)
			fullLists := 0
			if tc.kasRestart {
				fullLists = 1
			}
			if tr.FullLists != fullLists || tr.MetadataReads > 1+tr.Watches || tr.MetadataLists > 1 {
				t.Errorf("the warm restart made %d full lists, %d one-object metadata reads and %d metadata lists of ConfigMaps, want %d, at most %d (1 + one per watch) and at most 1: %v",
					tr.FullLists, tr.MetadataReads, tr.MetadataLists, fullLists, 1+tr.Watches, p.since(mark))
			}
		})
	}
}
