package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	boltcr "github.com/boltinformer/boltinformer/controllerruntime"
)

// TestStaleButServing: WaitForCacheSync means fresh, but with a bounded
// wait. A warm start whose server does not answer its lists and watches
// (the proxy answers 503 for ConfigMaps) is synced after FreshTimeout,
// stale (Health.Stale), and its cached reads serve what the file held, a
// source deleted while the operator was down included. Once the server
// answers again the informer becomes fresh and every change made while it
// was down is reconciled, the deletes included.
func TestStaleButServing(t *testing.T) {
	const sources = 50
	cs := clientset(t)
	ns := newNamespace(t, cs, "stale")
	seedSources(t, cs, ns, sources)
	p := newProxy(t)
	o := managerOptions{config: p.config(), path: cachePath(t), bolt: &boltcr.Options{FreshTimeout: 3 * time.Second}}
	first := startManager(t, o)
	if !eventually(waitTimeout, func() bool { return derivedState(t, cs, ns, sources, churn{}) == "" }) {
		t.Fatalf("first run: %s", derivedState(t, cs, ns, sources, churn{}))
	}
	first.stop(t)
	c := newChurn(sources, 3)
	c.apply(t, cs, ns)

	p.block("configmaps")
	start := time.Now()
	second := startManager(t, o) // returns once WaitForCacheSync has
	synced := time.Since(start)
	infs := second.cache.Informers()
	if len(infs) == 0 {
		t.Fatal("no informers")
	}
	for _, inf := range infs {
		if inf.Persistent() == nil {
			t.Fatalf("informer %s not persisted: %s", inf.Name(), inf.NotPersisted())
		}
		if h := inf.Persistent().Health(); !h.Stale || h.Fresh {
			t.Fatalf("informer %s synced without its server: %+v, want stale", inf.Name(), h)
		}
	}
	var cm corev1.ConfigMap
	gone := source(ns, c.deleted[0], 0)
	if err := second.mgr.GetClient().Get(context.Background(), client.ObjectKeyFromObject(gone), &cm); err != nil {
		t.Fatalf("a stale cache does not serve the file's %s: %v", gone.Name, err)
	}
	t.Logf("synced stale after %s (FreshTimeout 3 s)", synced.Round(time.Millisecond))

	p.unblock()
	if !eventually(waitTimeout, func() bool {
		for _, inf := range second.cache.Informers() {
			if !inf.Persistent().Health().Fresh {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("not fresh once the server answers: %+v", second.cache.Informers()[0].Persistent().Health())
	}
	total := sources + len(c.created)
	if !eventually(waitTimeout, func() bool { return derivedState(t, cs, ns, total, c) == "" }) {
		t.Fatalf("once the server answers: %s", derivedState(t, cs, ns, total, c))
	}
	if err := second.mgr.GetClient().Get(context.Background(), client.ObjectKeyFromObject(gone), &cm); err == nil {
		t.Fatalf("the fresh cache still serves %s, deleted on the server", gone.Name)
	}
}
