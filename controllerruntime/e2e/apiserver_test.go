package e2e

import (
	"context"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/boltinformer/boltinformer/examples/operator/derive"
)

// TestAPIServerRestartWhileDown: the operator stops, sources change, and
// the apiserver restarts, so its new watch cache answers the resumed watch
// with 410 Gone. The relist reads only what changed (a metadata list and
// exact reads), no full list; every change is reconciled, deletes
// included. Then, with the operator running, the apiserver restarts again
// and a change made after it is reconciled too.
func TestAPIServerRestartWhileDown(t *testing.T) {
	cs := clientset(t)
	ns := newNamespace(t, cs, "kas-restart")
	seedSources(t, cs, ns, restartSources)
	p := newProxy(t)
	o := managerOptions{config: p.config(), path: cachePath(t)}
	first := startManager(t, o)
	if !eventually(waitTimeout, func() bool { return derivedState(t, cs, ns, restartSources, churn{}) == "" }) {
		t.Fatalf("first run: %s", derivedState(t, cs, ns, restartSources, churn{}))
	}
	first.stop(t)
	c := newChurn(restartSources, 5)
	c.apply(t, cs, ns)
	restartAPIServer(t, false)
	mark := p.mark()
	second := startManager(t, o)
	for _, i := range c.deleted {
		name := source(ns, i, 0).Name
		if !eventually(waitTimeout, func() bool { return slices.Contains(second.rec.actions(ns, name), derive.Cleaned) }) {
			t.Fatalf("source %s, deleted while down, was not reconciled as gone: %v", name, second.rec.actions(ns, name))
		}
	}
	total := restartSources + len(c.created)
	if !eventually(waitTimeout, func() bool { return derivedState(t, cs, ns, total, c) == "" }) {
		t.Fatalf("after the apiserver restart: %s", derivedState(t, cs, ns, total, c))
	}
	tr := summarize(p.since(mark), "configmaps")
	t.Logf("warm restart after an apiserver restart: configmaps requests %+v", tr)
	if tr.FullLists != 0 {
		t.Errorf("listed ConfigMaps in full: %v", p.since(mark))
	}

	// The apiserver crashes and restarts under the running operator.
	restartAPIServer(t, true)
	if _, err := cs.CoreV1().ConfigMaps(ns).Update(context.Background(), source(ns, 250, 1), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.updated = append(c.updated, 250)
	if !eventually(waitTimeout, func() bool { return derivedState(t, cs, ns, total, c) == "" }) {
		t.Fatalf("after an apiserver restart under the running operator: %s", derivedState(t, cs, ns, total, c))
	}
}

// restartAPIServer stops (kill: SIGKILLs) the apiserver and starts it
// again; it is started again whatever happened, so that the tests after
// this one have it.
func restartAPIServer(t *testing.T, kill bool) {
	t.Helper()
	stop := cluster.StopAPIServer
	if kill {
		stop = cluster.KillAPIServer
	}
	serr := stop()
	if err := cluster.StartAPIServer(); err != nil {
		t.Fatalf("start the apiserver again: %v (stop: %v)", err, serr)
	}
	if serr != nil {
		t.Fatalf("stop the apiserver: %v", serr)
	}
}
