package boltinformer_test

// Second review of Fresh (issue 15): what the diff can and cannot see.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/internal/testobj"
	"github.com/boltinformer/boltinformer/recovery/crashtest"
)

// spoilRecord makes the payload of key's record in the file undecodable,
// its checksum kept valid (the load passes; the decoding finds it).
func spoilRecord(t *testing.T, path, key string) {
	t.Helper()
	damageRecord(t, path, key, "payload", true)
}

// TestRegressionPartialRelistReplacesUndecodable: a record of the file
// that does not decode makes the informer relist, so that the server's
// object replaces it. With a MetadataLister and a Getter (as a Factory
// sets them) the relist was partial, and the diff by resourceVersion found
// the record unchanged (its envelope's resourceVersion is the server's):
// nothing was read, and the object stayed undecodable for good (Get
// failed, List left it out) while the cache was Fresh.
func TestRegressionPartialRelistReplacesUndecodable(t *testing.T) {
	for _, policy := range []boltinformer.SyncPolicy{boltinformer.SyncAfterDiskLoad, boltinformer.SyncAfterFresh} {
		t.Run(fmt.Sprintf("policy=%d", policy), func(t *testing.T) {
			f := newCacheFile(t, 20)
			const bad = "ns-1/pod-000010"
			spoilRecord(t, f.path, bad)
			f.src.ResetCalls()
			r := f.open(nil, &boltinformer.InformerOptions{SyncPolicy: policy, Metadata: f.src, Getter: f.src})
			if d := r.inf.Decision(); !d.Warm {
				t.Fatalf("decision %+v, want warm", d)
			}
			r.run()
			r.waitSynced()
			waitFor(t, "the undecodable record to be replaced by the server's object", func() bool {
				if r.inf.Indexer().Undecodable() != 0 {
					return false
				}
				_, ok, err := r.inf.GetIndexer().GetByKey(bad)
				return err == nil && ok
			})
			r.waitApplied()
			if h := r.inf.Health(); !h.Fresh || h.Undecodable != 0 {
				t.Fatalf("health: %+v", h)
			}
		})
	}
}

// TestRegressionFreshRestoredClusterMissingObject: a cluster restored
// from a backup and written to since, past the file's resourceVersion,
// whose objects are all at or before their cached versions: nothing the
// diff compared looked newer in the cache, but the server has an object at
// a resourceVersion the cache has applied, which the cache does not hold
// (deleted in the file's history after the backup). In one history a
// cache at resourceVersion A holds every object that exists later at a
// resourceVersion not after A, so this is another history; the informer
// waited for the resumed watch to bring the object, which it never does
// (its event is before the resume point), and was fresh at the first
// event past the list without it.
func TestRegressionFreshRestoredClusterMissingObject(t *testing.T) {
	old := newPodSource()
	for i := range 20 {
		if _, err := old.Create(testobj.Pod(i, 3, 2, "")); err != nil {
			t.Fatal(err)
		}
	}
	backup := old.History() // resourceVersions 1..20
	// After the backup, the file's history deletes one Pod and creates
	// another; the file is saved there (resourceVersion 22).
	if err := old.Delete(keyOfPod(5)); err != nil {
		t.Fatal(err)
	}
	if _, err := old.Create(testobj.Pod(50, 3, 2, "")); err != nil {
		t.Fatal(err)
	}
	f := &cacheFile{t: t, path: t.TempDir() + "/cache.db", src: old}
	r := f.open(nil, nil)
	r.run()
	r.waitSynced()
	r.waitApplied()
	r.close()

	// The restored server: the backup, then writes of its own that take
	// it past the file's resourceVersion.
	restored := newPodSource()
	for _, e := range backup {
		if err := restored.Apply(e); err != nil {
			t.Fatal(err)
		}
	}
	for i := 60; i < 64; i++ {
		if _, err := restored.Create(testobj.Pod(i, 3, 2, "")); err != nil {
			t.Fatal(err)
		}
	}
	f.src = restored
	r = f.open(nil, &boltinformer.InformerOptions{SyncPolicy: boltinformer.SyncAfterFresh, Metadata: restored})
	if !r.inf.Decision().Warm {
		t.Fatalf("not warm: %+v", r.inf.Decision())
	}
	r.run()
	// The apiserver's periodic bookmark: at the server's resourceVersion.
	for i := 0; !r.inf.HasSynced(); i++ {
		if i == 60_000 {
			t.Fatal("not synced")
		}
		restored.Bookmark()
		time.Sleep(time.Millisecond)
	}
	if d := diffObjects(restored.Objects(), r.inf.GetStore().List()); d != "" {
		t.Fatalf("fresh but not the restored server's state:\n%s", d)
	}
}

func keyOfPod(i int) string {
	p := testobj.Pod(i, 3, 2, "")
	return p.Namespace + "/" + p.Name
}

// logLines collects a logger's lines.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logger() klog.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		l.lines = append(l.lines, prefix+" "+args)
		l.mu.Unlock()
	}, funcr.Options{Verbosity: 0})
}

func (l *logLines) count(sub string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.lines {
		if strings.Contains(s, sub) {
			n++
		}
	}
	return n
}

// TestRegressionNotComparableOnce: resourceVersions that do not compare
// are found once, logged once, and the informer falls back to today's
// behaviour (a full relist after a 410) without listing metadata again:
// every relist listed metadata only to find it out again (a request for
// nothing), and with SyncAfterDiskLoad it was never logged but at V(2).
func TestRegressionNotComparableOnce(t *testing.T) {
	for _, policy := range []boltinformer.SyncPolicy{boltinformer.SyncAfterDiskLoad, boltinformer.SyncAfterFresh} {
		t.Run(fmt.Sprintf("policy=%d", policy), func(t *testing.T) {
			f := newCacheFile(t, 20)
			churn(t, f.src, 1)
			f.src.Compact() // the resume gets 410: a relist
			f.src.ResetCalls()
			logs := &logLines{}
			lg := logs.logger()
			r := f.open(&boltinformer.Options{Logger: &lg}, &boltinformer.InformerOptions{SyncPolicy: policy, Metadata: notComparable{f.src}, Getter: f.src})
			r.run()
			r.waitSynced()
			r.waitApplied()
			// A second relist: the watch ends while the server moves on and
			// compacts.
			f.src.SetDown(true)
			if _, err := f.src.Create(testobj.Pod(900, 3, 2, "")); err != nil {
				t.Fatal(err)
			}
			f.src.Compact()
			f.src.SetDown(false)
			r.waitApplied()
			waitFor(t, "the second relist", func() bool { return f.src.Calls().Lists == 2 })
			if c := f.src.Calls(); c.MetadataLists != 1 {
				t.Fatalf("%d metadata lists, want 1 (found not comparable once): %v", c.MetadataLists, c.Log)
			}
			if n := logs.count("not comparable"); n != 1 {
				t.Fatalf("logged %d times that resourceVersions do not compare, want once: %q", n, logs.lines)
			}
		})
	}
}

// TestRegressionFreshRestoredClusterWatchMissesDeletes: a cluster
// restored from a backup, whose own writes since are deletes of objects
// the file has and objects created after the file's resourceVersion: the
// diff sees nothing that one history could not do (deletions, a creation
// after the cache), but the resumed watch passes the list's
// resourceVersion without the deletes of the objects the file's history
// created after the backup (they never happened in this one). The
// informer was fresh at that event with those objects (and the ones the
// restored cluster deleted before the resume point) still cached.
func TestRegressionFreshRestoredClusterWatchMissesDeletes(t *testing.T) {
	old := newPodSource()
	for i := range 20 {
		if _, err := old.Create(testobj.Pod(i, 3, 2, "")); err != nil {
			t.Fatal(err)
		}
	}
	backup := old.History()           // resourceVersions 1..20
	for _, i := range []int{50, 51} { // 21, 22: the file's history
		if _, err := old.Create(testobj.Pod(i, 3, 2, "")); err != nil {
			t.Fatal(err)
		}
	}
	f := &cacheFile{t: t, path: t.TempDir() + "/cache.db", src: old}
	r := f.open(nil, nil)
	r.run()
	r.waitSynced()
	r.waitApplied()
	r.close()

	restored := newPodSource()
	for _, e := range backup {
		if err := restored.Apply(e); err != nil {
			t.Fatal(err)
		}
	}
	for _, i := range []int{1, 2} { // 21, 22: deletes
		if err := restored.Delete(keyOfPod(i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := restored.Create(testobj.Pod(60, 3, 2, "")); err != nil { // 23
		t.Fatal(err)
	}
	f.src = restored
	r = f.open(nil, &boltinformer.InformerOptions{SyncPolicy: boltinformer.SyncAfterFresh, Metadata: restored})
	r.run()
	for i := 0; !r.inf.HasSynced(); i++ {
		if i == 60_000 {
			t.Fatal("not synced")
		}
		restored.Bookmark()
		time.Sleep(time.Millisecond)
	}
	if d := diffObjects(restored.Objects(), r.inf.GetStore().List()); d != "" {
		t.Fatalf("fresh but not the restored server's state:\n%s", d)
	}
	r.waitApplied()
}

// futureWatch is a Source whose watches from a resourceVersion it has not
// reached are accepted and quiet, as kube-apiserver's watch cache keeps
// them (it sends nothing, bookmarks included, until it passes that
// resourceVersion), where the Source refuses them as too large.
type futureWatch struct{ *crashtest.Source }

func (f futureWatch) Watch(o metav1.ListOptions) (watch.Interface, error) {
	return f.WatchWithContext(context.Background(), o)
}

func (f futureWatch) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	if rv, err := strconv.ParseInt(o.ResourceVersion, 10, 64); err == nil {
		if cur, _ := strconv.ParseInt(f.ResourceVersion(), 10, 64); rv > cur {
			return watch.NewFake(), nil
		}
	}
	return f.Source.WatchWithContext(ctx, o)
}

// TestFreshBookmarkRestoredClusterBehind: with FreshBookmarkWait, a warm
// start reads the server's resourceVersion R (one object's metadata) once
// its watch is accepted, which kube-apiserver does from a resourceVersion
// it has not reached; a cache that has applied more than R is not caught
// up: the server is behind what it has sent (restored from a backup),
// another history, and the metadata list's diff relists over the cache.
func TestFreshBookmarkRestoredClusterBehind(t *testing.T) {
	f := newCacheFile(t, 30)
	var objs []runtime.Object
	for i := range 10 {
		p := testobj.Pod(500+i, 3, 2, "")
		p.ResourceVersion = "3"
		objs = append(objs, p)
	}
	restored := crashtest.NewSourceAt(func() runtime.Object { return &corev1.PodList{} }, 5, objs)
	f.src = restored
	db, err := boltinformer.Open(f.path, &boltinformer.Options{Logger: &quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	inf, err := db.NewInformer("pods", futureWatch{restored}, &corev1.Pod{}, 0, podIndexers(), &boltinformer.InformerOptions{
		SyncPolicy: boltinformer.SyncAfterFresh, Metadata: restored, FreshBookmarkWait: time.Minute, FreshListMax: -1})
	if err != nil {
		t.Fatal(err)
	}
	runInformer(t, inf)
	waitFor(t, "HasSynced", inf.HasSynced)
	if d := diffObjects(restored.Objects(), inf.GetStore().List()); d != "" {
		t.Fatalf("fresh with another history's objects:\n%s", d)
	}
}
