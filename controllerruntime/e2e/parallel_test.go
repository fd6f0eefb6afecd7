package e2e

// Issue 24, item 1, with a real manager: the lazily created warm
// informers of a cache over several namespaces start together and become
// fresh in parallel, not one after another.

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	boltcr "github.com/boltinformer/boltinformer/controllerruntime"
)

// TestMultiNamespaceInformersFreshInParallel: a manager whose cache spans
// 4 namespaces lists ConfigMaps in all of them after it started (the
// informers are created lazily), stops, and starts again warm after a
// write elsewhere (so each informer waits for a bookmark to be fresh).
// The second List creates the 4 warm informers: every one of them starts
// before any one is fresh. controller-runtime's multi-namespace cache
// creates them one after another, each waiting until synced (fresh)
// before the next is created.
func TestMultiNamespaceInformersFreshInParallel(t *testing.T) {
	cs := clientset(t)
	namespaces := map[string]cache.Config{}
	for range 4 {
		ns := newNamespace(t, cs, "parallel")
		seedSources(t, cs, ns, 20)
		namespaces[ns] = cache.Config{}
	}
	o := managerOptions{
		config: cluster.RESTConfig(),
		path:   cachePath(t),
		cache:  cache.Options{DefaultNamespaces: namespaces},
		// Fresh by a bookmark only: a metadata list of 20 objects
		// answers within milliseconds, which would hide the order.
		bolt:  &boltcr.Options{FreshListMax: -1},
		setup: func(context.Context, *run) error { return nil },
	}
	list := func(r *run) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		var l corev1.ConfigMapList
		if err := r.mgr.GetCache().List(ctx, &l); err != nil {
			t.Fatal(err)
		}
		if len(l.Items) != 4*20 {
			t.Fatalf("listed %d ConfigMaps, want %d", len(l.Items), 4*20)
		}
	}
	r1 := startManager(t, o)
	list(r1)
	r1.stop(t)
	// A write elsewhere: the server's resourceVersion is past the file's.
	other := newNamespace(t, cs, "parallel-other")
	if _, err := cs.CoreV1().ConfigMaps(other).Create(context.Background(), source(other, 0, 0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	r2 := startManager(t, o)
	list(r2)
	infs := r2.cache.Informers()
	if len(infs) != 4 {
		t.Fatalf("%d informers, want 4", len(infs))
	}
	var lastStart, firstFresh time.Time
	var report string
	for _, inf := range infs {
		p := inf.Persistent()
		if p == nil || !p.Decision().Warm {
			t.Fatalf("informer %s not persisted or not warm: %s", inf.Name(), inf.NotPersisted())
		}
		h := p.Health()
		if !h.Fresh {
			t.Fatalf("informer %s synced but not fresh: %+v", inf.Name(), h)
		}
		start, fresh := inf.RunAt(), inf.RunAt().Add(h.FreshAfter)
		if start.After(lastStart) {
			lastStart = start
		}
		if firstFresh.IsZero() || fresh.Before(firstFresh) {
			firstFresh = fresh
		}
		report += fmt.Sprintf("\n  %s: started %s, fresh after %s", inf.Name(), start.Format("15:04:05.000"), h.FreshAfter.Round(time.Millisecond))
	}
	t.Logf("warm informers:%s", report)
	if !firstFresh.After(lastStart) {
		t.Fatalf("an informer was fresh (%s) before another one started (%s): they became fresh one after another:%s",
			firstFresh.Format("15:04:05.000"), lastStart.Format("15:04:05.000"), report)
	}
	r2.stop(t)
}
