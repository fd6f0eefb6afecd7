package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	corev1listers "k8s.io/client-go/listers/core/v1"

	"github.com/boltinformer/boltinformer"
)

const (
	warmObjects = 5000
	warmChurn   = 100 // created, updated and deleted each while the agent is down
)

func configMap(ns, name string, gen int) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "e2e"}},
		Data:       map[string]string{"gen": fmt.Sprint(gen), "payload": fmt.Sprintf("%0200d", gen)},
	}
}

// TestWarmRestart: 5,000 ConfigMaps synced, the agent stops, objects are
// created, updated and deleted, and the agent restarts from its file. The
// lister answers from disk while the server has not answered anything, the
// first request is a WATCH from the saved resourceVersion, no LIST reaches
// the apiserver, and the cache converges to the server's state.
func TestWarmRestart(t *testing.T) {
	ctx := t.Context()
	c := newChecker(t)
	ns := c.namespace(t, "warm")
	cms := c.cs.CoreV1().ConfigMaps(ns)
	start := time.Now()
	if err := parallel(ctx, warmObjects, 16, func(ctx context.Context, i int) error {
		_, err := cms.Create(ctx, configMap(ns, fmt.Sprintf("cm-%05d", i), 0), metav1.CreateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("created %d ConfigMaps in %s", warmObjects, time.Since(start).Round(time.Millisecond))
	serverList := func(ctx context.Context) (runtime.Object, error) { return cms.List(ctx, metav1.ListOptions{}) }
	path := cachePath(t)
	fopts := &boltinformer.FactoryOptions{Namespace: ns}

	// Cold start.
	a1 := newAgent(t, path, fopts)
	inf1, err := a1.factory.PersistentInformer(&corev1.ConfigMap{})
	if err != nil {
		t.Fatal(err)
	}
	if inf1.Decision().Warm {
		t.Fatalf("first start is warm: %+v", inf1.Decision())
	}
	a1.start()
	a1.waitSynced(2 * time.Minute)
	waitConverged(t, inf1, serverList, time.Minute)
	a1.stop()
	saved := inf1.Indexer().SavedState()
	if saved.ResourceVersion == "" || !saved.Synced {
		t.Fatalf("saved state after stop: %+v", saved)
	}
	t.Logf("cold start: %d objects, saved resourceVersion %s; requests %v", saved.Objects, saved.ResourceVersion, a1.rec.listWatch("configmaps"))

	// Churn while the agent is down.
	if err := parallel(ctx, warmChurn, 8, func(ctx context.Context, i int) error {
		if _, err := cms.Create(ctx, configMap(ns, fmt.Sprintf("new-%05d", i), 0), metav1.CreateOptions{}); err != nil {
			return err
		}
		if _, err := cms.Update(ctx, configMap(ns, fmt.Sprintf("cm-%05d", i), 1), metav1.UpdateOptions{}); err != nil {
			return err
		}
		return cms.Delete(ctx, fmt.Sprintf("cm-%05d", warmObjects-1-i), metav1.DeleteOptions{})
	}); err != nil {
		t.Fatal(err)
	}

	// Warm restart, with the agent's configmaps requests held until the
	// lister has answered.
	listsBefore := apiserverLists(t, "configmaps")
	checkerListsBefore := c.rec.count("LIST", "configmaps")
	restart := time.Now()
	a2 := newAgent(t, path, fopts)
	held, release := a2.rec.holdRequests("configmaps")
	defer release()
	inf2, err := a2.factory.PersistentInformer(&corev1.ConfigMap{})
	if err != nil {
		t.Fatal(err)
	}
	if d := inf2.Decision(); !d.Warm {
		t.Fatalf("restart is cold: %+v", d)
	}
	if got := inf2.Indexer().SavedState().ResourceVersion; got != saved.ResourceVersion {
		t.Fatalf("reopened file resumes from %q, want %q", got, saved.ResourceVersion)
	}
	ev := &events{}
	if _, err := inf2.AddEventHandler(ev.handler()); err != nil {
		t.Fatal(err)
	}
	lister := corev1listers.NewConfigMapLister(inf2.GetIndexer()).ConfigMaps(ns)
	got, err := lister.List(labels.Everything())
	if err != nil || len(got) != warmObjects {
		t.Fatalf("lister before Start: %d objects (%v), want %d", len(got), err, warmObjects)
	}
	firstAnswer := time.Since(restart)
	a2.start()
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("no configmaps request within 30 s of Start")
	}
	// The server has answered nothing yet: the cache serves from disk.
	if !eventually(10*time.Second, inf2.HasSynced) {
		t.Fatal("warm informer not synced while its first request is held (SyncAfterDiskLoad)")
	}
	if got, err := lister.List(labels.Everything()); err != nil || len(got) != warmObjects {
		t.Fatalf("lister while the first request is held: %d objects (%v), want %d", len(got), err, warmObjects)
	}
	if cm, err := lister.Get("cm-00000"); err != nil || cm.Data["gen"] != "0" {
		t.Fatalf("lister Get from disk: %v %v", cm, err)
	}
	syncedAt := time.Since(restart)
	release()

	waitConverged(t, inf2, serverList, time.Minute)
	converged := time.Since(restart)
	reqs := a2.rec.listWatch("configmaps")
	if len(reqs) == 0 || reqs[0].Verb != "WATCH" {
		t.Fatalf("first configmaps request is not a WATCH: %v", reqs)
	}
	if rv := reqs[0].Query.Get("resourceVersion"); rv != saved.ResourceVersion {
		t.Fatalf("first WATCH from resourceVersion %q, want the saved %q", rv, saved.ResourceVersion)
	}
	if n := a2.rec.count("LIST", "configmaps"); n != 0 {
		t.Fatalf("warm restart made %d LIST requests: %v", n, reqs)
	}
	checkerLists := c.rec.count("LIST", "configmaps") - checkerListsBefore
	if d := apiserverLists(t, "configmaps") - listsBefore - float64(checkerLists); d != 0 {
		t.Fatalf("apiserver_request_total{verb=LIST,resource=configmaps} rose by %v beyond the test's own %d lists", d, checkerLists)
	}
	// The handler got the disk objects as the initial list, then the
	// changes from the watch.
	e := ev.snapshot()
	if e.initialAdds != warmObjects || len(e.adds) != warmObjects+warmChurn || len(e.updates) != warmChurn || e.changedUpdates != warmChurn || len(e.dels) != warmChurn || e.unknowns != 0 {
		t.Fatalf("handler: %d adds (%d initial), %d updates (%d changed), %d deletes (%d final state unknown); want %d (%d), %d (%d), %d (0)",
			len(e.adds), e.initialAdds, len(e.updates), e.changedUpdates, len(e.dels), e.unknowns, warmObjects+warmChurn, warmObjects, warmChurn, warmChurn, warmChurn)
	}
	t.Logf("warm restart: lister answered %d objects after %s, synced after %s (before any response), converged after %s; requests %v",
		warmObjects, firstAnswer.Round(time.Microsecond), syncedAt.Round(time.Microsecond), converged.Round(time.Millisecond), reqs)
}
