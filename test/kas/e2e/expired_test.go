package e2e

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/boltinformer/boltinformer"
)

const (
	expiredObjects = 1200
	expiredDeletes = 100
	expiredUpdates = 50
	expiredCreates = 50
)

func secret(ns, name string, gen int) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Data:       map[string][]byte{"gen": []byte(fmt.Sprint(gen))},
	}
}

// TestTooOldResourceVersion: Secrets have no watch cache in the shared
// cluster and etcd is compacted every 5 s, so the resourceVersion an agent
// saved is compacted away while it is down. On restart the resumed WATCH
// gets 410 Expired, exactly one relist follows (counted by the agent and by
// the apiserver), and the handlers get Deletes
// (cache.DeletedFinalStateUnknown) for what was deleted while down,
// Updates for what changed and Adds for what is new.
func TestTooOldResourceVersion(t *testing.T) {
	ctx := t.Context()
	c := newChecker(t)
	ns := c.namespace(t, "expired")
	secrets := c.cs.CoreV1().Secrets(ns)
	if err := parallel(ctx, expiredObjects, 16, func(ctx context.Context, i int) error {
		_, err := secrets.Create(ctx, secret(ns, fmt.Sprintf("s-%05d", i), 0), metav1.CreateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	serverList := func(ctx context.Context) (runtime.Object, error) { return secrets.List(ctx, metav1.ListOptions{}) }
	path := cachePath(t)
	// A full relist after the 410 (fresh_test.go covers the partial one,
	// which reads only what changed).
	fopts := &boltinformer.FactoryOptions{Namespace: ns, Informer: boltinformer.InformerOptions{PartialRelistRatio: -1}}

	a1 := newAgent(t, path, fopts)
	inf1, err := a1.factory.PersistentInformer(&corev1.Secret{})
	if err != nil {
		t.Fatal(err)
	}
	a1.start()
	a1.waitSynced(2 * time.Minute)
	waitConverged(t, inf1, serverList, time.Minute)
	a1.stop()
	saved := inf1.Indexer().SavedState().ResourceVersion
	t.Logf("cold start: saved resourceVersion %s; requests %v", saved, a1.rec.listWatch("secrets"))

	// While the agent is down: deletes, updates, creates.
	var deleted []string
	for i := range expiredDeletes {
		deleted = append(deleted, ns+"/"+fmt.Sprintf("s-%05d", expiredObjects-1-i))
	}
	if err := parallel(ctx, expiredDeletes, 8, func(ctx context.Context, i int) error {
		if i < expiredUpdates {
			if _, err := secrets.Update(ctx, secret(ns, fmt.Sprintf("s-%05d", i), 1), metav1.UpdateOptions{}); err != nil {
				return err
			}
		}
		if i < expiredCreates {
			if _, err := secrets.Create(ctx, secret(ns, fmt.Sprintf("new-%05d", i), 0), metav1.CreateOptions{}); err != nil {
				return err
			}
		}
		return secrets.Delete(ctx, fmt.Sprintf("s-%05d", expiredObjects-1-i), metav1.DeleteOptions{})
	}); err != nil {
		t.Fatal(err)
	}
	waitCompacted(t, c.cs, ns, saved, 90*time.Second)

	listsBefore := apiserverLists(t, "secrets")
	checkerListsBefore := c.rec.count("LIST", "secrets")
	a2 := newAgent(t, path, fopts)
	inf2, err := a2.factory.PersistentInformer(&corev1.Secret{})
	if err != nil {
		t.Fatal(err)
	}
	if !inf2.Decision().Warm {
		t.Fatalf("restart is cold: %+v", inf2.Decision())
	}
	ev := &events{}
	if _, err := inf2.AddEventHandler(ev.handler()); err != nil {
		t.Fatal(err)
	}
	a2.start()
	waitConverged(t, inf2, serverList, time.Minute)
	// The relist's events follow the Replace, once the watch restarted.
	if !eventually(10*time.Second, func() bool { return len(ev.snapshot().dels) >= expiredDeletes }) {
		t.Log("timed out waiting for the deletes")
	}
	reqs := a2.rec.listWatch("secrets")
	t.Logf("restart requests: %v", reqs)
	if len(reqs) < 2 || reqs[0].Verb != "WATCH" || reqs[0].Query.Get("resourceVersion") != saved {
		t.Fatalf("first request is not a WATCH from the saved resourceVersion %s: %v", saved, reqs)
	}
	var lists, pages int
	for _, r := range reqs {
		if r.Verb != "LIST" {
			continue
		}
		if r.Query.Get("continue") == "" {
			lists++
		} else {
			pages++
		}
	}
	if lists != 1 {
		t.Fatalf("%d LISTs (without continue) after the 410, want exactly 1: %v", lists, reqs)
	}
	if st := inf2.WatchStats(); st.Expired < 1 {
		t.Fatalf("the informer saw no 410: %+v", st)
	}
	checkerLists := c.rec.count("LIST", "secrets") - checkerListsBefore
	if d := apiserverLists(t, "secrets") - listsBefore - float64(checkerLists); d != float64(lists+pages) {
		t.Fatalf("apiserver_request_total{verb=LIST,resource=secrets} rose by %v beyond the test's own %d lists; the agent made %d", d, checkerLists, lists+pages)
	}
	e := ev.snapshot()
	sort.Strings(e.dels)
	sort.Strings(deleted)
	if fmt.Sprint(e.dels) != fmt.Sprint(deleted) || e.unknowns != expiredDeletes {
		t.Fatalf("deletes: %d (%d DeletedFinalStateUnknown), want %d, all DeletedFinalStateUnknown; got %v", len(e.dels), e.unknowns, expiredDeletes, e.dels[:min(len(e.dels), 5)])
	}
	// As in client-go, a relist updates every listed object that was
	// cached: the unchanged ones with their resourceVersion unchanged.
	remaining := expiredObjects - expiredDeletes
	if e.initialAdds != expiredObjects || len(e.adds) != expiredObjects+expiredCreates || len(e.updates) != remaining || e.changedUpdates != expiredUpdates {
		t.Fatalf("handler: %d adds (%d initial), %d updates (%d changed); want %d (%d), %d (%d)",
			len(e.adds), e.initialAdds, len(e.updates), e.changedUpdates, expiredObjects+expiredCreates, expiredObjects, remaining, expiredUpdates)
	}
	t.Logf("after the 410: %d LIST + %d continued pages; %d deletes (all DeletedFinalStateUnknown), %d updates (%d changed), %d adds",
		lists, pages, len(e.dels), len(e.updates), e.changedUpdates, len(e.adds)-e.initialAdds)
}

// waitCompacted waits until a watch of the namespace's Secrets from rv
// fails with 410 Expired: etcd has compacted past rv.
func waitCompacted(t *testing.T, cs kubernetes.Interface, ns, rv string, timeout time.Duration) {
	t.Helper()
	start := time.Now()
	for time.Since(start) < timeout {
		if watchExpired(t.Context(), cs, ns, rv) {
			t.Logf("resourceVersion %s compacted after %s", rv, time.Since(start).Round(time.Second))
			return
		}
		time.Sleep(compactionInterval / 2)
	}
	t.Fatalf("resourceVersion %s not compacted within %s", rv, timeout)
}

func watchExpired(ctx context.Context, cs kubernetes.Interface, ns, rv string) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	w, err := cs.CoreV1().Secrets(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
	if err != nil {
		return apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
	}
	defer w.Stop()
	select {
	case e, ok := <-w.ResultChan():
		if !ok || e.Type != watch.Error {
			return false
		}
		err := apierrors.FromObject(e.Object)
		return apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
	case <-ctx.Done():
		return false
	}
}
