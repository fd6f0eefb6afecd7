package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientfeatures "k8s.io/client-go/features"
	clientfeaturestesting "k8s.io/client-go/features/testing"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/test/kas/harness"
)

// freshObjects and freshChanges size TestFreshResume: 2,000 ConfigMaps
// with 0, 10 and 200 changes (and 1% after an apiserver restart); with
// BOLTINFORMER_E2E_LARGE=1 (or BOLTINFORMER_BENCH_LARGE=1), 10,000 with 0,
// 10 and 1,000.
var freshObjects, freshChanges = func() (int, []int) {
	if os.Getenv("BOLTINFORMER_E2E_LARGE") != "" || os.Getenv("BOLTINFORMER_BENCH_LARGE") != "" {
		return 10_000, []int{0, 10, 1000}
	}
	return 2000, []int{0, 10, 200}
}()

// freshAgentOptions: SyncAfterFresh, so WaitForCacheSync means Fresh, by
// the metadata list's diff (no bookmark wait: the factory's default waits
// DefaultFactoryFreshBookmarkWait for one).
func freshAgentOptions(ns string) *boltinformer.FactoryOptions {
	return &boltinformer.FactoryOptions{Namespace: ns, Informer: boltinformer.InformerOptions{SyncPolicy: boltinformer.SyncAfterFresh, FreshBookmarkWait: -1}}
}

// freshBookmarkOptions: SyncAfterFresh, fresh by a bookmark of the resumed
// watch (FreshBookmarkWait long enough that the bookmark decides).
func freshBookmarkOptions(ns string) *boltinformer.FactoryOptions {
	o := freshAgentOptions(ns)
	o.Informer.FreshBookmarkWait = 30 * time.Second
	o.Informer.FreshListMax = -1 // no metadata list at once, however small
	return o
}

// churnConfigMaps updates, creates and deletes n ConfigMaps each (named
// from gen, so that rounds do not collide).
func churnFresh(ctx context.Context, cms v1.ConfigMapInterface, ns string, n, gen int) error {
	return parallel(ctx, n, 8, func(ctx context.Context, i int) error {
		if _, err := cms.Create(ctx, configMap(ns, fmt.Sprintf("new-%d-%05d", gen, i), gen), metav1.CreateOptions{}); err != nil {
			return err
		}
		if _, err := cms.Update(ctx, configMap(ns, fmt.Sprintf("cm-%05d", i), gen), metav1.UpdateOptions{}); err != nil {
			return err
		}
		return cms.Delete(ctx, fmt.Sprintf("cm-%05d", freshObjects-1-i-n*(gen-1)), metav1.DeleteOptions{})
	})
}

// freshStart restarts an agent warm, waits for the factory's sync (which
// means Fresh), and checks that the cache equals a list the checker makes
// right after: nothing changes on the server meanwhile.
func freshStart(t *testing.T, cl *harness.Cluster, c *checker, path string, fopts *boltinformer.FactoryOptions) (*agent, *boltinformer.Informer) {
	t.Helper()
	ns := fopts.Namespace
	a := newAgentOn(t, cl, path, fopts)
	inf, err := a.factory.PersistentInformer(&corev1.ConfigMap{})
	if err != nil {
		t.Fatal(err)
	}
	if !inf.Decision().Warm {
		t.Fatalf("restart is cold: %+v", inf.Decision())
	}
	start := time.Now()
	a.start()
	a.waitSynced(2 * time.Minute)
	synced := time.Since(start)
	list, err := c.cs.CoreV1().ConfigMaps(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want, err := stateOf(list)
	if err != nil {
		t.Fatal(err)
	}
	if d := cacheState(inf).diff(want); d != "" {
		t.Fatalf("synced (Fresh) but the cache is not the server's state: %s", d)
	}
	h := inf.Health()
	if !h.Fresh || h.Stale || h.FreshFallback != "" || h.FreshResourceVersion == "" {
		t.Fatalf("health at sync: %+v", h)
	}
	t.Logf("fresh after %s at resourceVersion %s; requests: %d LIST, %d LIST-METADATA (%d bytes), %d LIST-EXACT (%d bytes), %d WATCH",
		synced.Round(time.Millisecond), h.FreshResourceVersion,
		a.rec.count("LIST", "configmaps"), a.rec.count("LIST-METADATA", "configmaps"), a.rec.bytes("LIST-METADATA", "configmaps"),
		a.rec.count("LIST-EXACT", "configmaps"), a.rec.bytes("LIST-EXACT", "configmaps"), a.rec.count("WATCH", "configmaps"))
	return a, inf
}

// TestFreshResume: with SyncAfterFresh, a warm restart is synced exactly
// when its cache equals the server's state, after 0, 10 and 200 objects
// each were changed, created and deleted while it was down, with one
// metadata-only list and the resumed watch (no full LIST). Then, after an
// apiserver restart (which answers 410 to every older resourceVersion),
// the relist reads only what changed.
func TestFreshResume(t *testing.T) {
	ctx := t.Context()
	c := newChecker(t)
	ns := c.namespace(t, "fresh")
	cms := c.cs.CoreV1().ConfigMaps(ns)
	if err := parallel(ctx, freshObjects, 16, func(ctx context.Context, i int) error {
		_, err := cms.Create(ctx, configMap(ns, fmt.Sprintf("cm-%05d", i), 0), metav1.CreateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	path := cachePath(t)
	a := newAgent(t, path, freshAgentOptions(ns))
	if _, err := a.factory.PersistentInformer(&corev1.ConfigMap{}); err != nil {
		t.Fatal(err)
	}
	a.start()
	a.waitSynced(2 * time.Minute)
	a.stop()

	for gen, n := range freshChanges {
		t.Run(fmt.Sprintf("changes=%d", n), func(t *testing.T) {
			if err := churnFresh(ctx, cms, ns, n, gen+1); err != nil {
				t.Fatal(err)
			}
			a, _ := freshStart(t, cluster, c, path, freshAgentOptions(ns))
			defer a.stop()
			if got := a.rec.count("LIST", "configmaps"); got != 0 {
				t.Fatalf("%d full LISTs: %v", got, a.rec.listWatch("configmaps"))
			}
			if got := a.rec.count("LIST-METADATA", "configmaps"); got != 1 {
				t.Fatalf("%d metadata lists, want 1", got)
			}
		})
	}
	// Fresh by a bookmark of the resumed watch: no metadata list of every
	// object, only one-object reads of the server's resourceVersion (with
	// a live cluster's lease renewals, without which kube-apiserver may
	// send no bookmark; they end with the group, before the apiserver
	// restarts).
	t.Run("bookmark", func(t *testing.T) {
		heartbeat(t, c.cs, c.namespace(t, "fresh-elsewhere"), 2*time.Second)
		for i, n := range freshChanges {
			t.Run(fmt.Sprintf("changes=%d", n), func(t *testing.T) {
				if err := churnFresh(ctx, cms, ns, n, i+5); err != nil {
					t.Fatal(err)
				}
				a, _ := freshStart(t, cluster, c, path, freshBookmarkOptions(ns))
				defer a.stop()
				if got := a.rec.count("LIST", "configmaps"); got != 0 {
					t.Fatalf("%d full LISTs: %v", got, a.rec.listWatch("configmaps"))
				}
				for _, r := range a.rec.requests("configmaps") {
					if r.Verb == "LIST-METADATA" && r.Query.Get("limit") != "1" {
						t.Fatalf("a metadata list of every object (the bookmark did not decide): %v", a.rec.listWatch("configmaps"))
					}
				}
			})
		}
	})

	t.Run("apiserver-restart", func(t *testing.T) {
		n := freshObjects / 100 // 1% of the objects changed, 1% created, 1% deleted
		if err := churnFresh(ctx, cms, ns, n, 4); err != nil {
			t.Fatal(err)
		}
		if err := cluster.StopAPIServer(); err != nil {
			t.Fatal(err)
		}
		if err := cluster.StartAPIServer(); err != nil {
			t.Fatal(err)
		}
		c := newChecker(t)
		a, inf := freshStart(t, cluster, c, path, freshAgentOptions(ns))
		defer a.stop()
		if st := inf.WatchStats(); st.Expired < 1 || st.PartialRelists != 1 {
			t.Fatalf("watch stats: %+v, want a 410 and one partial relist", st)
		}
		if got := a.rec.count("LIST", "configmaps"); got != 0 {
			t.Fatalf("%d full LISTs after the 410: %v", got, a.rec.listWatch("configmaps"))
		}
		if got := a.rec.count("LIST-EXACT", "configmaps"); got != 2*n {
			t.Fatalf("%d exact reads, want %d (changed and created)", got, 2*n)
		}
		if got := a.rec.count("LIST-METADATA", "configmaps"); got != 1 {
			t.Fatalf("%d metadata lists, want 1 (the relist takes the fresh start's)", got)
		}
		// What a full relist reads, through the same kind of client (a
		// LIST, not client-go's default WatchList).
		clientfeaturestesting.SetFeatureDuringTest(t, clientfeatures.WatchListClient, false)
		b := newAgent(t, filepath.Join(t.TempDir(), "cold.db"), freshAgentOptions(ns))
		if _, err := b.factory.PersistentInformer(&corev1.ConfigMap{}); err != nil {
			t.Fatal(err)
		}
		b.start()
		b.waitSynced(time.Minute)
		b.stop()
		full := b.rec.bytes("LIST", "configmaps")
		partial := a.rec.bytes("LIST-METADATA", "configmaps") + a.rec.bytes("LIST-EXACT", "configmaps")
		t.Logf("partial relist read %d bytes, a full LIST %d (%.0f%%)", partial, full, 100*float64(partial)/float64(full))
		if partial >= full {
			t.Fatalf("the partial relist read %d bytes, a full LIST %d", partial, full)
		}
	})
}

// TestFreshRestoredCluster: the cluster's etcd is restored from a backup
// taken before the agent's last run, so the saved resourceVersion is in
// the server's future. The warm start sees the server behind its cache,
// relists over it, and is fresh with the restored state (objects created
// after the backup are deleted, changed ones go back); fresh by the
// metadata list and fresh by a bookmark (FreshBookmarkWait) alike.
func TestFreshRestoredCluster(t *testing.T) {
	t.Run("metadata-list", func(t *testing.T) { testFreshRestoredCluster(t, -1) })
	t.Run("bookmark", func(t *testing.T) { testFreshRestoredCluster(t, 5*time.Second) })
}

func testFreshRestoredCluster(t *testing.T, bookmarkWait time.Duration) {
	freshAgentOptions := func(ns string) *boltinformer.FactoryOptions {
		o := freshAgentOptions(ns)
		o.Informer.FreshBookmarkWait = bookmarkWait
		o.Informer.FreshListMax = -1 // the bookmark path, not a list at once
		return o
	}
	cl, err := harness.Start(t, &harness.Options{EtcdUnsafeNoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	c := newCheckerOn(t, cl)
	ns := c.namespace(t, "restore")
	cms := c.cs.CoreV1().ConfigMaps(ns)
	create := func(from, to, gen int) {
		t.Helper()
		if err := parallel(ctx, to-from, 8, func(ctx context.Context, i int) error {
			_, err := cms.Create(ctx, configMap(ns, fmt.Sprintf("cm-%05d", from+i), gen), metav1.CreateOptions{})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	create(0, 100, 0)
	backup := filepath.Join(t.TempDir(), "etcd-backup")
	if err := cl.BackupEtcd(backup); err != nil {
		t.Fatal(err)
	}
	c = newCheckerOn(t, cl)
	cms = c.cs.CoreV1().ConfigMaps(ns)
	create(100, 150, 0)
	for i := range 20 {
		if _, err := cms.Update(ctx, configMap(ns, fmt.Sprintf("cm-%05d", i), 1), metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	path := cachePath(t)
	a := newAgentOn(t, cl, path, freshAgentOptions(ns))
	inf, err := a.factory.PersistentInformer(&corev1.ConfigMap{})
	if err != nil {
		t.Fatal(err)
	}
	ev := &events{}
	a.start()
	a.waitSynced(2 * time.Minute)
	a.stop()
	saved := inf.Indexer().SavedState().ResourceVersion
	if n := inf.Indexer().Len(); n != 150 {
		t.Fatalf("cold start cached %d objects, want 150", n)
	}

	if err := cl.RestoreEtcd(backup); err != nil {
		t.Fatal(err)
	}
	c = newCheckerOn(t, cl)
	a2 := newAgentOn(t, cl, path, freshAgentOptions(ns))
	inf2, err := a2.factory.PersistentInformer(&corev1.ConfigMap{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inf2.AddEventHandler(ev.handler()); err != nil {
		t.Fatal(err)
	}
	a2.start()
	a2.waitSynced(2 * time.Minute)
	list, err := c.cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want, err := stateOf(list)
	if err != nil {
		t.Fatal(err)
	}
	if d := cacheState(inf2).diff(want); d != "" {
		t.Fatalf("synced after a restore (file at %s, server at %s) but not the server's state: %s", saved, list.ResourceVersion, d)
	}
	if len(want) != 100 {
		t.Fatalf("the restored server has %d objects, want the backup's 100", len(want))
	}
	if !eventually(10*time.Second, func() bool { return len(ev.snapshot().dels) == 50 }) {
		t.Fatalf("handler deletes: %d, want the 50 created after the backup", len(ev.snapshot().dels))
	}
	t.Logf("restored: file at %s, server at %s; requests %v", saved, list.ResourceVersion, a2.rec.listWatch("configmaps"))
}

// TestFreshBookmarkResume: with FreshBookmarkWait, a warm restart after
// changes, creates and deletes made while it was down is synced exactly
// when its cache equals the server's state, by one read of one object's
// metadata (Limit 1) and a bookmark of the resumed watch (a write in
// another namespace moved the server past the scope's last event): no
// LIST, no metadata list of every object. A lease renewed every 2 s stands
// for a live cluster's leader elections: on a cluster where nothing at all
// is written, kube-apiserver's watch cache never moves past the watch's
// start and sends no bookmark (the informer then lists metadata after
// FreshBookmarkWait).
func TestFreshBookmarkResume(t *testing.T) {
	ctx := t.Context()
	c := newChecker(t)
	ns, other := c.namespace(t, "bookmark"), c.namespace(t, "elsewhere")
	heartbeat(t, c.cs, other, 2*time.Second)
	cms := c.cs.CoreV1().ConfigMaps(ns)
	const n = 300
	if err := parallel(ctx, n, 16, func(ctx context.Context, i int) error {
		_, err := cms.Create(ctx, configMap(ns, fmt.Sprintf("cm-%05d", i), 0), metav1.CreateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	opts := func() *boltinformer.FactoryOptions {
		o := freshAgentOptions(ns)
		o.Informer.FreshBookmarkWait = 10 * time.Second
		o.Informer.FreshListMax = -1 // the bookmark path, not a list at once
		return o
	}
	path := cachePath(t)
	a := newAgent(t, path, opts())
	if _, err := a.factory.PersistentInformer(&corev1.ConfigMap{}); err != nil {
		t.Fatal(err)
	}
	a.start()
	a.waitSynced(2 * time.Minute)
	a.stop()
	for round, changes := range []int{0, 10} {
		t.Run(fmt.Sprintf("changes=%d", changes), func(t *testing.T) {
			if err := parallel(ctx, changes, 8, func(ctx context.Context, i int) error {
				if _, err := cms.Create(ctx, configMap(ns, fmt.Sprintf("new-%d-%05d", round, i), round), metav1.CreateOptions{}); err != nil {
					return err
				}
				if _, err := cms.Update(ctx, configMap(ns, fmt.Sprintf("cm-%05d", i), round+1), metav1.UpdateOptions{}); err != nil {
					return err
				}
				return cms.Delete(ctx, fmt.Sprintf("cm-%05d", n-1-i), metav1.DeleteOptions{})
			}); err != nil {
				t.Fatal(err)
			}
			// A write out of the informer's scope moves the server's
			// resourceVersion past the scope's last event: only a
			// bookmark tells the informer it has seen everything.
			if _, err := c.cs.CoreV1().ConfigMaps(other).Create(ctx, configMap(other, fmt.Sprintf("elsewhere-%d", round), 0), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			b := newAgent(t, path, opts())
			inf, err := b.factory.PersistentInformer(&corev1.ConfigMap{})
			if err != nil {
				t.Fatal(err)
			}
			if !inf.Decision().Warm {
				t.Fatalf("restart is cold: %+v", inf.Decision())
			}
			start := time.Now()
			b.start()
			defer b.stop()
			b.waitSynced(2 * time.Minute)
			synced := time.Since(start)
			list, err := c.cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			want, err := stateOf(list)
			if err != nil {
				t.Fatal(err)
			}
			if d := cacheState(inf).diff(want); d != "" {
				t.Fatalf("synced (Fresh) but the cache is not the server's state: %s", d)
			}
			if h := inf.Health(); !h.Fresh || h.Stale || h.FreshFallback != "" || h.FreshResourceVersion == "" {
				t.Fatalf("health at sync: %+v", h)
			}
			if got := b.rec.count("LIST", "configmaps"); got != 0 {
				t.Fatalf("%d full LISTs: %v", got, b.rec.listWatch("configmaps"))
			}
			for _, r := range b.rec.requests("configmaps") {
				if r.Verb == "LIST-METADATA" && r.Query.Get("limit") != "1" {
					t.Fatalf("a metadata list of every object: %v; watch bytes %d; stats %+v", b.rec.listWatch("configmaps"), b.rec.bytes("WATCH", "configmaps"), inf.WatchStats())
				}
			}
			t.Logf("fresh after %s at %s; metadata read %d bytes; requests %v", synced.Round(time.Millisecond),
				inf.Health().FreshResourceVersion, b.rec.bytes("LIST-METADATA", "configmaps"), b.rec.listWatch("configmaps"))
		})
	}
}

// heartbeat renews a Lease in ns every period until the test ends
// (harness.Heartbeat), as a live cluster's leader elections do.
func heartbeat(t *testing.T, cs kubernetes.Interface, ns string, period time.Duration) {
	t.Helper()
	stop, err := harness.Heartbeat(cs, ns, "heartbeat", period)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
}
