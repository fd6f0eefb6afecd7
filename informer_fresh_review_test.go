package boltinformer_test

// Reviews of Fresh (issue 15): the races between the metadata list, the
// informer loop and the resumed watch.

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/internal/testobj"
	"github.com/boltinformer/boltinformer/recovery/crashtest"
)

// listThenChange answers the first metadata list, then creates an object
// on the Source and returns only once the informer has applied it: an
// event newer than the list that the informer loop applies between the
// list and the diff (a busy resource).
type listThenChange struct {
	*crashtest.Source
	inf   atomic.Pointer[boltinformer.Informer]
	calls atomic.Int32
	t     *testing.T
}

func (l *listThenChange) ListMetadata(ctx context.Context, o metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
	list, err := l.Source.ListMetadata(ctx, o)
	if err != nil || l.calls.Add(1) != 1 {
		return list, err
	}
	p, err := l.Source.Create(testobj.Pod(777, 3, 2, ""))
	if err != nil {
		return nil, err
	}
	key := p.(*corev1.Pod).Namespace + "/" + p.(*corev1.Pod).Name
	waitFor(l.t, "the informer to apply the event after the list", func() bool {
		_, ok, _ := l.inf.Load().GetIndexer().GetByKey(key)
		return ok
	})
	return list, nil
}

// TestRegressionFreshEventAfterListIsNotOtherTimeline: an event newer than
// the metadata list, applied before the diff, is the watch passing the
// list's resourceVersion (fresh), not a server behind the cache: the
// informer took it for a restored cluster and listed every object again.
func TestRegressionFreshEventAfterListIsNotOtherTimeline(t *testing.T) {
	f := newCacheFile(t, 20)
	churn(t, f.src, 2)
	f.src.ResetCalls()
	ml := &listThenChange{Source: f.src, t: t}
	r := f.open(nil, &boltinformer.InformerOptions{SyncPolicy: boltinformer.SyncAfterFresh, Metadata: ml})
	ml.inf.Store(r.inf)
	r.run()
	r.waitSynced()
	r.waitApplied()
	if c := f.src.Calls(); c.Lists != 0 || c.MetadataLists != 1 {
		t.Fatalf("a full LIST (the event after the list taken for another timeline): %v", c.Log)
	}
	if h := r.inf.Health(); !h.Fresh {
		t.Fatalf("health: %+v", h)
	}
}

// gatedWatch holds a Source's watch events until start is closed, and each
// event at resourceVersion hold or after until release is closed.
type gatedWatch struct {
	*crashtest.Source
	start, release chan struct{}
	hold           int64
}

func (g *gatedWatch) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	inner, err := g.Source.WatchWithContext(ctx, o)
	if err != nil {
		return nil, err
	}
	w := &forwardWatch{out: make(chan watch.Event), stop: make(chan struct{})}
	go func() {
		defer close(w.out)
		defer inner.Stop()
		for {
			var ev watch.Event
			var ok bool
			select {
			case <-w.stop:
				return
			case ev, ok = <-inner.ResultChan():
				if !ok {
					return
				}
			}
			gate := g.start
			if m, err := meta.Accessor(ev.Object); err == nil {
				if rv, _ := strconv.ParseInt(m.GetResourceVersion(), 10, 64); rv >= g.hold {
					gate = g.release
				}
			}
			for _, ch := range []chan struct{}{g.start, gate} {
				select {
				case <-ch:
				case <-w.stop:
					return
				}
			}
			select {
			case w.out <- ev:
			case <-w.stop:
				return
			}
		}
	}()
	return w, nil
}

// forwardWatch is a watch.Interface fed by one goroutine, which Stop ends.
type forwardWatch struct {
	out  chan watch.Event
	stop chan struct{}
	once sync.Once
}

func (w *forwardWatch) Stop()                          { w.once.Do(func() { close(w.stop) }) }
func (w *forwardWatch) ResultChan() <-chan watch.Event { return w.out }

// TestRegressionFreshNotBeforeRecreatedKeyGone: an object deleted while
// the informer was down, then created again and deleted again, is not
// fresh at its first delete: once the resumed watch has brought the
// changed object, the cache still holds the re-created one, which the
// server's state at the list's resourceVersion does not. The informer was
// fresh (and synced) there, serving the deleted object.
func TestRegressionFreshNotBeforeRecreatedKeyGone(t *testing.T) {
	f := newCacheFile(t, 10)
	keys := sortedKeys(f.src.Objects())
	objs := f.src.Objects()
	k, j := keys[0], keys[1]
	if err := f.src.Delete(k); err != nil {
		t.Fatal(err)
	}
	if _, err := f.src.Create(objs[k]); err != nil {
		t.Fatal(err)
	}
	upd, err := f.src.Update(bumpPod(objs[j], 1))
	if err != nil {
		t.Fatal(err)
	}
	jrv, _ := strconv.ParseInt(upd.(*corev1.Pod).ResourceVersion, 10, 64)
	if err := f.src.Delete(k); err != nil {
		t.Fatal(err)
	}
	g := &gatedWatch{Source: f.src, start: make(chan struct{}), release: make(chan struct{}), hold: jrv + 1}
	db, err := boltinformer.Open(f.path, &boltinformer.Options{Logger: &quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	inf, err := db.NewInformer("pods", g, &corev1.Pod{}, 0, podIndexers(), &boltinformer.InformerOptions{
		SyncPolicy: boltinformer.SyncAfterFresh, Metadata: f.src})
	if err != nil {
		t.Fatal(err)
	}
	stop := runInformer(t, inf)
	defer stop()
	waitFor(t, "the diff", func() bool { return inf.Health().CatchupPending == 2 })
	close(g.start)
	waitFor(t, "the changed object", func() bool {
		o, ok, _ := inf.GetIndexer().GetByKey(j)
		return ok && o.(*corev1.Pod).ResourceVersion == upd.(*corev1.Pod).ResourceVersion
	})
	// A handler's registration waits for the informer loop's batch.
	if _, err := inf.AddEventHandler(newEvRecorder("barrier")); err != nil {
		t.Fatal(err)
	}
	if h := inf.Health(); h.Fresh {
		_, exists, _ := inf.GetIndexer().GetByKey(k)
		t.Fatalf("fresh while the cache holds %s (%t), deleted at %s: %+v", k, exists, h.FreshResourceVersion, h)
	}
	close(g.release)
	waitFor(t, "HasSynced", inf.HasSynced)
	if d := diffObjects(f.src.Objects(), inf.GetStore().List()); d != "" {
		t.Fatalf("synced, not the server's state:\n%s", d)
	}
}

// cutWatch serves the first watch of a Source one event at a time: the
// first event, then, once after is closed, the second, then a 410 (as an
// apiserver restart ends a watch). Later watches are the Source's.
type cutWatch struct {
	*crashtest.Source
	after   chan struct{}
	watches atomic.Int32
}

func (c *cutWatch) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	inner, err := c.Source.WatchWithContext(ctx, o)
	if err != nil || c.watches.Add(1) != 1 {
		return inner, err
	}
	w := &forwardWatch{out: make(chan watch.Event), stop: make(chan struct{})}
	go func() {
		defer close(w.out)
		defer inner.Stop()
		gone := apierrors.NewResourceExpired("too old resource version").ErrStatus
		for i := range 3 {
			ev := watch.Event{Type: watch.Error, Object: &gone}
			if i < 2 {
				var ok bool
				select {
				case <-w.stop:
					return
				case ev, ok = <-inner.ResultChan():
					if !ok {
						return
					}
				}
			}
			if i == 1 {
				select {
				case <-c.after:
				case <-w.stop:
					return
				}
			}
			select {
			case w.out <- ev:
			case <-w.stop:
				return
			}
		}
	}()
	return w, nil
}

// TestRegressionPartialRelistAfterQueuedEvents: a partial relist diffs the
// metadata list against the cache while the old watch's last events may
// still be queued for the informer loop; they are applied before the
// patch. An object those events create, deleted before the list, stayed
// in the cache after the patch (the diff, made before it was applied, did
// not name it), and the informer was fresh at the list's resourceVersion
// with an object the server did not have.
// failIndexFile is a cache file of 20 Pods under an index function that
// fails on Pods labelled "fail": the informer loop reports such an
// object's error outside its lock, through the watch error handler, which
// a test can hold (holding the loop between two batches).
type failIndexFile struct {
	t    *testing.T
	path string
	src  *crashtest.Source
}

func newFailIndexFile(t *testing.T) *failIndexFile {
	f := &failIndexFile{t: t, path: filepath.Join(t.TempDir(), "cache.db"), src: newPodSource()}
	for i := range 20 {
		if _, err := f.src.Create(testobj.Pod(i, 3, 2, "")); err != nil {
			t.Fatal(err)
		}
	}
	db, inf := f.open(f.src, nil)
	stop := runInformer(t, inf)
	waitFor(t, "the cold list", func() bool { return inf.HasSynced() && len(inf.GetIndexer().ListKeys()) == 20 })
	stop()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *failIndexFile) open(lw cache.ListerWatcher, opts *boltinformer.InformerOptions) (*boltinformer.DB, *boltinformer.Informer) {
	db, err := boltinformer.Open(f.path, &boltinformer.Options{Logger: &quietLogger})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = db.Close() })
	idx := cache.Indexers{"fail": func(obj any) ([]string, error) {
		if obj.(*corev1.Pod).Labels["fail"] != "" {
			return nil, errors.New("an index function that fails")
		}
		return nil, nil
	}}
	inf, err := db.NewInformer("pods", lw, &corev1.Pod{}, 0, idx, opts)
	if err != nil {
		f.t.Fatal(err)
	}
	return db, inf
}

// failOne changes the first object so that the index function fails on it.
func (f *failIndexFile) failOne() {
	first := sortedKeys(f.src.Objects())[0]
	changed := bumpPod(f.src.Objects()[first], 1)
	changed.Labels["fail"] = "1"
	if _, err := f.src.Update(changed); err != nil {
		f.t.Fatal(err)
	}
}

// holdApplyError makes inf's watch error handler hold the informer loop at
// its first ApplyError until release is closed; held is closed then.
func holdApplyError(t *testing.T, inf *boltinformer.Informer) (held chan struct{}, release func()) {
	held, rel := make(chan struct{}), make(chan struct{})
	var once, relOnce sync.Once
	release = func() { relOnce.Do(func() { close(rel) }) }
	t.Cleanup(release)
	if err := inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, _ *cache.Reflector, err error) {
		var ae *boltinformer.ApplyError
		if errors.As(err, &ae) {
			once.Do(func() { close(held) })
			select {
			case <-rel:
			case <-ctx.Done():
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	return held, release
}

func TestRegressionPartialRelistAfterQueuedEvents(t *testing.T) {
	f := newFailIndexFile(t)
	src := f.src
	// While down: an object changed (an index function fails on it, so the
	// informer loop reports it outside its lock, where the test holds it),
	// then one created and deleted.
	f.failOne()
	if _, err := src.Create(testobj.Pod(99, 3, 2, "")); err != nil {
		t.Fatal(err)
	}
	x := "ns-0/pod-000099"
	if err := src.Delete(x); err != nil {
		t.Fatal(err)
	}

	cw := &cutWatch{Source: src, after: make(chan struct{})}
	_, inf := f.open(cw, &boltinformer.InformerOptions{SyncPolicy: boltinformer.SyncAfterDiskLoad, Metadata: src, Getter: src})
	held, release := holdApplyError(t, inf)
	src.ResetCalls()
	stop := runInformer(t, inf)
	defer stop()
	<-held          // the loop has applied the changed object and is held
	close(cw.after) // the creation is queued, then the watch ends with a 410
	waitFor(t, "the relist's watch", func() bool { return src.Calls().Watches == 2 })
	release()
	waitFor(t, "the partial relist", func() bool {
		return inf.Health().AppliedResourceVersion == src.ResourceVersion() && inf.WatchStats().PartialRelists == 1
	})
	if _, exists, _ := inf.GetIndexer().GetByKey(x); exists {
		t.Fatalf("%s, deleted before the list, is in the cache after the partial relist (fresh: %+v)", x, inf.Health())
	}
	if d := diffObjects(src.Objects(), inf.GetStore().List()); d != "" {
		t.Fatalf("after the partial relist:\n%s", d)
	}
}

// TestRegressionPartialRelistKeptListOlderThanWatch: a relist soon after a
// warm start takes the start's metadata list, unless the old watch has
// delivered events past it: those are applied before the patch, which
// moved the cache's resourceVersion back to the list's, and the watch
// from there delivered them again (a second OnDelete of one delete).
func TestRegressionPartialRelistKeptListOlderThanWatch(t *testing.T) {
	f := newFailIndexFile(t)
	src := f.src
	f.failOne() // while down
	cw := &cutWatch{Source: src, after: make(chan struct{})}
	_, inf := f.open(cw, &boltinformer.InformerOptions{SyncPolicy: boltinformer.SyncAfterFresh, Metadata: src, Getter: src})
	rec := newEvRecorder("handler")
	if _, err := inf.AddEventHandler(rec); err != nil {
		t.Fatal(err)
	}
	held, release := holdApplyError(t, inf)
	src.ResetCalls()
	stop := runInformer(t, inf)
	defer stop()
	<-held // the changed object is applied; the loop is held
	waitFor(t, "Fresh", func() bool { return inf.Health().Fresh })
	y := sortedKeys(src.Objects())[5]
	if err := src.Delete(y); err != nil { // after the start's metadata list
		t.Fatal(err)
	}
	close(cw.after) // the delete is queued, then the watch ends with a 410
	waitFor(t, "the relist's watch", func() bool { return src.Calls().Watches == 2 })
	release()
	waitFor(t, "the partial relist", func() bool { return inf.WatchStats().PartialRelists == 1 })
	r := newEvRecorder("barrier")
	waitFor(t, "the store to converge", func() bool {
		return inf.Health().AppliedResourceVersion == src.ResourceVersion() && diffObjects(src.Objects(), inf.GetStore().List()) == ""
	})
	// The watch after the relist has delivered whatever it replays once a
	// bookmark after it is applied.
	src.Bookmark()
	waitFor(t, "the bookmark", func() bool { return inf.Health().AppliedResourceVersion == src.ResourceVersion() })
	if _, err := inf.AddEventHandler(r); err != nil { // waits for the informer loop's batch
		t.Fatal(err)
	}
	var deletes int
	for _, e := range rec.events() {
		if e.Kind == "delete" && e.Key == y {
			deletes++
		}
	}
	if deletes != 1 {
		t.Fatalf("the handler got %d deletes of %s, want 1: %v", deletes, y, rec.events())
	}
}

// TestRegressionFreshRestoredClusterPastTheFile: a cluster restored from a
// backup and written to since, until its resourceVersion passed the
// file's, is still another history: an object the file has at a
// resourceVersion newer than the server's version of it cannot happen in
// one history (a list after the cache's state has every object at its
// cached version or later). The diff took such objects for unchanged, and
// the cache kept the old history's versions.
func TestRegressionFreshRestoredClusterPastTheFile(t *testing.T) {
	f := newCacheFile(t, 30)
	var objs []runtime.Object
	for _, k := range sortedKeys(f.src.Objects()) {
		p := f.src.Objects()[k].(*corev1.Pod).DeepCopy()
		p.ResourceVersion = "3" // the backup's version
		p.Labels["timeline"] = "restored"
		objs = append(objs, p)
	}
	restored := crashtest.NewSourceAt(func() runtime.Object { return &corev1.PodList{} }, 100, objs)
	f.src = restored
	r := f.open(nil, &boltinformer.InformerOptions{SyncPolicy: boltinformer.SyncAfterFresh, Metadata: restored, Getter: restored, PartialRelistRatio: 0.5})
	r.run()
	r.waitSynced()
	if d := diffObjects(restored.Objects(), r.inf.GetStore().List()); d != "" {
		t.Fatalf("synced with the old history's objects:\n%s", d)
	}
}
