package boltinformer_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/internal/testobj"
	"github.com/boltinformer/boltinformer/recovery/crashtest"
)

// scoped is a Source seen through a scope that leaves out the namespace
// "other" (as a selector would): its objects move the server's
// resourceVersion but never reach the informer. It records the timeouts of
// the watches through it.
type scoped struct {
	*crashtest.Source
	mu       sync.Mutex
	timeouts []int64 // -1: none
}

func inScope(obj runtime.Object) bool {
	m, err := meta.Accessor(obj)
	return err != nil || m.GetNamespace() != "other"
}

func (r *scoped) record(o metav1.ListOptions) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := int64(-1)
	if o.TimeoutSeconds != nil {
		t = *o.TimeoutSeconds
	}
	r.timeouts = append(r.timeouts, t)
}

func (r *scoped) filter(w watch.Interface, err error) (watch.Interface, error) {
	if err != nil {
		return nil, err
	}
	return newScopedWatch(w), nil
}

// scopedWatch is watch.Filter for the scope, but for a Stop that ends its
// goroutine even while it sends (watch.Filter's would wait for a reader).
type scopedWatch struct {
	inner watch.Interface
	out   chan watch.Event
	stop  chan struct{}
	once  sync.Once
}

func newScopedWatch(w watch.Interface) *scopedWatch {
	sw := &scopedWatch{inner: w, out: make(chan watch.Event), stop: make(chan struct{})}
	go func() {
		defer close(sw.out)
		defer w.Stop()
		for e := range w.ResultChan() {
			if e.Type != watch.Bookmark && e.Type != watch.Error && !inScope(e.Object) {
				continue
			}
			select {
			case sw.out <- e:
			case <-sw.stop:
				return
			}
		}
	}()
	return sw
}

func (sw *scopedWatch) ResultChan() <-chan watch.Event { return sw.out }
func (sw *scopedWatch) Stop()                          { sw.once.Do(func() { close(sw.stop); sw.inner.Stop() }) }

func (r *scoped) Watch(o metav1.ListOptions) (watch.Interface, error) {
	r.record(o)
	return r.filter(r.Source.Watch(o))
}

func (r *scoped) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	r.record(o)
	return r.filter(r.Source.WatchWithContext(ctx, o))
}

func (r *scoped) ListMetadata(ctx context.Context, o metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
	l, err := r.Source.ListMetadata(ctx, o)
	if err != nil {
		return nil, err
	}
	items := l.Items[:0]
	for i := range l.Items {
		if l.Items[i].Namespace != "other" {
			items = append(items, l.Items[i])
		}
	}
	l.Items = items
	if o.Limit > 0 && int64(len(l.Items)) > o.Limit {
		rest := int64(len(l.Items)) - o.Limit
		l.Items = l.Items[:o.Limit]
		l.Continue, l.RemainingItemCount = "more", &rest
	}
	return l, nil
}

func (r *scoped) watchTimeouts() []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int64(nil), r.timeouts...)
}

// TestFreshBookmark: with FreshBookmarkWait, a warm start reads the
// server's resourceVersion R (moved past the scope's last event by an
// object outside the scope) with one object's metadata, and is fresh at
// the server's first bookmark at or after R on the resumed watch, not
// before (the backlog of events, a delete among them, is applied first),
// without a metadata list of every object; its watches have a 3 s timeout
// until then, so that kube-apiserver sends the bookmark early; the delete
// made while it was down is replayed to a handler added once it is synced.
func TestFreshBookmark(t *testing.T) {
	f := newCacheFile(t, 10)
	keys := sortedKeys(f.src.Objects())
	if err := f.src.Delete(keys[0]); err != nil {
		t.Fatal(err)
	}
	out := testobj.Pod(100, 1, 1, "")
	out.Namespace = "other"
	if _, err := f.src.Create(out); err != nil {
		t.Fatal(err)
	}
	lw := &scoped{Source: f.src}
	f.src.ResetCalls()
	inf := f.openPods(lw, &boltinformer.InformerOptions{
		SyncPolicy: boltinformer.SyncAfterFresh, FreshBookmarkWait: time.Hour, FreshListMax: -1, Metadata: lw, ReplayDownDeletes: true})
	if !inf.Decision().Warm {
		t.Fatalf("not warm: %+v", inf.Decision())
	}
	runInformer(t, inf)
	waitFor(t, "the backlog's delete", func() bool { return inf.Indexer().Len() == 9 })
	waitFor(t, "the read of the server's resourceVersion", func() bool { return inf.Health().FreshTarget != "" })
	time.Sleep(10 * time.Millisecond) // no bookmark, nothing to make it fresh
	if inf.HasSynced() || inf.Health().Fresh {
		t.Fatal("fresh before any bookmark")
	}
	for _, to := range lw.watchTimeouts() {
		if to < 0 || to > 3 {
			t.Fatalf("watch timeouts before fresh %v, want at most 3 s", lw.watchTimeouts())
		}
	}
	rv := f.src.ResourceVersion()
	f.src.Bookmark()
	waitFor(t, "HasSynced after the bookmark", inf.HasSynced)
	if h := inf.Health(); !h.Fresh || h.FreshResourceVersion != rv {
		t.Fatalf("health %+v, want fresh at %s", h, rv)
	}
	if c := f.src.Calls(); c.MetadataLists > 2 || c.Lists != 0 {
		t.Fatalf("calls %+v, want one-object reads only (the first, and one after the watch began) and no list", c)
	}
	late := newEvRecorder("late")
	reg, err := inf.AddEventHandler(late)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the late handler's sync", reg.HasSynced)
	var deletes int
	for _, e := range late.events() {
		if e.Kind == "delete" {
			deletes++
		}
	}
	if deletes != 1 {
		t.Fatalf("late handler: %v, want the delete made while down", late.events())
	}
}

// TestFreshBookmarkAtAnEvent: a watch event at or after R is as good as a
// bookmark: the watch has delivered every event before it.
func TestFreshBookmarkAtAnEvent(t *testing.T) {
	f := newCacheFile(t, 10)
	out := testobj.Pod(100, 1, 1, "")
	out.Namespace = "other"
	if _, err := f.src.Create(out); err != nil {
		t.Fatal(err)
	}
	lw := &scoped{Source: f.src}
	f.src.ResetCalls()
	inf := f.openPods(lw, &boltinformer.InformerOptions{
		SyncPolicy: boltinformer.SyncAfterFresh, FreshBookmarkWait: time.Hour, FreshListMax: -1, Metadata: lw})
	runInformer(t, inf)
	waitFor(t, "the read of the server's resourceVersion", func() bool { return inf.Health().FreshTarget != "" })
	if inf.Health().Fresh {
		t.Fatal("fresh before the server's resourceVersion")
	}
	if _, err := f.src.Create(testobj.Pod(200, 1, 1, "")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "HasSynced after the event", inf.HasSynced)
	if h := inf.Health(); !h.Fresh || h.FreshResourceVersion != f.src.ResourceVersion() {
		t.Fatalf("health %+v, want fresh at %s", h, f.src.ResourceVersion())
	}
}

// TestFreshBookmarkFallsBackToMetadata: no bookmark within
// FreshBookmarkWait: the metadata list's diff makes the warm start fresh.
func TestFreshBookmarkFallsBackToMetadata(t *testing.T) {
	f := newCacheFile(t, 10)
	inf := f.openPods(f.src, &boltinformer.InformerOptions{
		SyncPolicy: boltinformer.SyncAfterFresh, FreshBookmarkWait: time.Millisecond, FreshListMax: -1, Metadata: f.src})
	runInformer(t, inf)
	waitFor(t, "HasSynced from the metadata list", inf.HasSynced)
	if h := inf.Health(); !h.Fresh || h.FreshResourceVersion == "" {
		t.Fatalf("health %+v, want fresh at the list's resourceVersion", h)
	}
}

// futureWatches accepts a watch from a resourceVersion past the Source's,
// as kube-apiserver's watch cache does (it sends the events after it, once
// there are any), where a Source answers "Too large resource version".
type futureWatches struct{ *crashtest.Source }

func (f futureWatches) future(o metav1.ListOptions) metav1.ListOptions {
	if a, err := strconv.ParseInt(o.ResourceVersion, 10, 64); err == nil {
		if now, _ := strconv.ParseInt(f.ResourceVersion(), 10, 64); a > now {
			o.ResourceVersion = f.ResourceVersion()
		}
	}
	return o
}

func (f futureWatches) Watch(o metav1.ListOptions) (watch.Interface, error) {
	return f.Source.Watch(f.future(o))
}

func (f futureWatches) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	return f.Source.WatchWithContext(ctx, f.future(o))
}

// TestRegressionFreshBookmarkServerBehindCache: the cluster was restored
// from a backup older than the file, so the server's resourceVersion R is
// behind the cache's, and kube-apiserver accepts the watch from the
// file's resourceVersion all the same. The bookmark wait took "the cache
// has applied R or later" for fresh, at once, and served the old
// history's objects as the server's; R behind the cache is another
// history: the metadata list decides (it relists the latest state).
func TestRegressionFreshBookmarkServerBehindCache(t *testing.T) {
	f := newCacheFile(t, 10)
	var objs []runtime.Object
	for _, k := range sortedKeys(f.src.Objects())[:7] {
		p := f.src.Objects()[k].(*corev1.Pod).DeepCopy()
		p.ResourceVersion = "3" // the backup's version
		p.Labels["timeline"] = "restored"
		objs = append(objs, p)
	}
	restored := crashtest.NewSourceAt(func() runtime.Object { return &corev1.PodList{} }, 5, objs)
	inf := f.openPods(futureWatches{restored}, &boltinformer.InformerOptions{
		SyncPolicy: boltinformer.SyncAfterFresh, FreshBookmarkWait: time.Hour, FreshListMax: -1, Metadata: restored, Getter: restored})
	if !inf.Decision().Warm {
		t.Fatalf("not warm: %+v", inf.Decision())
	}
	runInformer(t, inf)
	waitFor(t, "HasSynced", inf.HasSynced)
	if d := diffObjects(restored.Objects(), inf.GetStore().List()); d != "" {
		t.Fatalf("synced with the old history's objects:\n%s", d)
	}
	if st := inf.WatchStats(); st.RelistsRequested != 1 {
		t.Fatalf("watch stats %+v, want one relist of the latest state", st)
	}
}

// TestFreshBookmarkNothingChanged: the server is where the cache is (R
// equals the applied resourceVersion): fresh at once, by one read of one
// object's metadata and no bookmark.
func TestFreshBookmarkNothingChanged(t *testing.T) {
	f := newCacheFile(t, 10)
	f.src.ResetCalls()
	inf := f.openPods(f.src, &boltinformer.InformerOptions{
		SyncPolicy: boltinformer.SyncAfterFresh, FreshBookmarkWait: time.Hour, FreshListMax: -1, Metadata: f.src})
	runInformer(t, inf)
	waitFor(t, "HasSynced", inf.HasSynced)
	if h := inf.Health(); !h.Fresh || h.FreshResourceVersion != f.src.ResourceVersion() {
		t.Fatalf("health %+v, want fresh at %s", h, f.src.ResourceVersion())
	}
	if c := f.src.Calls(); c.MetadataLists > 2 || c.Lists != 0 {
		t.Fatalf("calls %+v, want one-object reads only (the first, and one after the watch began) and no list", c)
	}
}

// TestRegressionFreshBookmarkBehindResumePoint: a bookmark behind the resourceVersion
// the watch resumed from is not of the cache's history (a server sends a
// watch only bookmarks past where it began): it does not make the cache
// fresh; the informer relists the server's latest state over it.
func TestRegressionFreshBookmarkBehindResumePoint(t *testing.T) {
	f := newCacheFile(t, 10)
	restored := crashtest.NewSourceAt(func() runtime.Object { return &corev1.PodList{} }, 5, []runtime.Object{testobj.Pod(0, 3, 2, "3")})
	inf := f.openPods(futureWatches{restored}, &boltinformer.InformerOptions{
		SyncPolicy: boltinformer.SyncAfterFresh, FreshBookmarkWait: time.Hour, FreshListMax: -1})
	runInformer(t, inf)
	waitFor(t, "the watch", func() bool { return restored.Calls().Watches > 0 })
	restored.Bookmark()
	waitFor(t, "HasSynced", inf.HasSynced)
	if d := diffObjects(restored.Objects(), inf.GetStore().List()); d != "" {
		t.Fatalf("synced with the old history's objects:\n%s", d)
	}
	if st := inf.WatchStats(); st.RelistsRequested != 1 {
		t.Fatalf("watch stats %+v, want one relist of the latest state", st)
	}
}

// TestRegressionFreshBookmarkRestoredPastTheFile: the cluster was restored
// from a backup and written past the file's resourceVersion before the
// start, so the resumed watch is served (events after the file's
// resourceVersion, of the other history), and the first object the read
// of R returns is not older than the cache's copy. Fresh at the first
// event past R kept the old history's objects; the scope's size at R,
// which the read gives, is not the cache's there: another history,
// relisted.
func TestRegressionFreshBookmarkRestoredPastTheFile(t *testing.T) {
	f := newCacheFile(t, 10) // pods 0-9 at resourceVersions 1-10
	var objs []runtime.Object
	for _, k := range sortedKeys(f.src.Objects())[:7] {
		p := f.src.Objects()[k].(*corev1.Pod).DeepCopy()
		p.ResourceVersion = "3" // the backup's version, not older than the file's pod 0
		p.Labels["timeline"] = "restored"
		objs = append(objs, p)
	}
	restored := crashtest.NewSourceAt(func() runtime.Object { return &corev1.PodList{} }, 5, objs)
	for i := range 8 { // written past the file's 10
		if _, err := restored.Create(testobj.Pod(100+i, 3, 2, "")); err != nil {
			t.Fatal(err)
		}
	}
	lw := &scoped{Source: restored}
	inf := f.openPods(lw, &boltinformer.InformerOptions{
		SyncPolicy: boltinformer.SyncAfterFresh, FreshBookmarkWait: time.Hour, FreshListMax: -1, Metadata: lw})
	runInformer(t, inf)
	// R is known, or the read's count already contradicts the cache
	// (the watch's events up to R applied first): a relist then.
	waitFor(t, "the read of the server's resourceVersion", func() bool { return inf.Health().FreshTarget != "" || inf.HasSynced() })
	restored.Bookmark()
	waitFor(t, "HasSynced", inf.HasSynced)
	if d := diffObjects(restored.Objects(), inf.GetStore().List()); d != "" {
		t.Fatalf("synced with the old history's objects:\n%s", d)
	}
	if st := inf.WatchStats(); st.RelistsRequested != 1 {
		t.Fatalf("watch stats %+v, want one relist of the latest state", st)
	}
}

// TestFreshBookmarkCountsAtR: the scope's size at R is checked against
// the cache's when the first event past R comes, not after it: the
// objects created after R do not count.
func TestFreshBookmarkCountsAtR(t *testing.T) {
	f := newCacheFile(t, 10)
	out := testobj.Pod(100, 1, 1, "")
	out.Namespace = "other"
	if _, err := f.src.Create(out); err != nil {
		t.Fatal(err)
	}
	lw := &scoped{Source: f.src}
	inf := f.openPods(lw, &boltinformer.InformerOptions{
		SyncPolicy: boltinformer.SyncAfterFresh, FreshBookmarkWait: time.Hour, FreshListMax: -1, Metadata: lw})
	runInformer(t, inf)
	waitFor(t, "the read of the server's resourceVersion", func() bool { return f.src.Calls().MetadataLists >= 1 })
	for i := range 3 {
		if _, err := f.src.Create(testobj.Pod(200+i, 3, 2, "")); err != nil {
			t.Fatal(err)
		}
	}
	f.src.Bookmark()
	waitFor(t, "HasSynced", inf.HasSynced)
	waitFor(t, "the 13 objects", func() bool { return inf.Indexer().Len() == 13 })
	if st := inf.WatchStats(); st.RelistsRequested != 0 || st.Lists != 0 {
		t.Fatalf("watch stats %+v, want no relist", st)
	}
}

// openPods opens f's file and builds its informer "pods" over lw with
// opts; the DB is closed when the test ends.
func (f *cacheFile) openPods(lw cache.ListerWatcher, opts *boltinformer.InformerOptions) *boltinformer.Informer {
	f.t.Helper()
	db, err := boltinformer.Open(f.path, &boltinformer.Options{Logger: &quietLogger})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = db.Close() })
	inf, err := db.NewInformer("pods", lw, &corev1.Pod{}, 0, podIndexers(), opts)
	if err != nil {
		f.t.Fatal(err)
	}
	return inf
}

// TestFreshBookmarkWholeScopeRead: a scope of at most one object (many of a
// controller manager's informers watch resources that have none or one) is
// read whole by the one-object read of the server's resourceVersion R: the
// warm start is fresh at R without waiting for a bookmark, though the
// cluster has moved on: at once when the cache holds the scope as the
// server has it, and once the resumed watch has brought the difference
// when it does not (the one object deleted while down).
func TestFreshBookmarkWholeScopeRead(t *testing.T) {
	for _, deleted := range []bool{false, true} {
		t.Run(map[bool]string{false: "unchanged", true: "deleted while down"}[deleted], func(t *testing.T) {
			f := newCacheFile(t, 1)
			if deleted {
				if err := f.src.Delete(sortedKeys(f.src.Objects())[0]); err != nil {
					t.Fatal(err)
				}
			}
			out := testobj.Pod(100, 1, 1, "")
			out.Namespace = "other" // moves the server, not the scope
			if _, err := f.src.Create(out); err != nil {
				t.Fatal(err)
			}
			lw := &scoped{Source: f.src}
			inf := f.openPods(lw, &boltinformer.InformerOptions{
				SyncPolicy: boltinformer.SyncAfterFresh, FreshBookmarkWait: time.Hour, FreshListMax: -1, Metadata: lw})
			runInformer(t, inf)
			waitFor(t, "HasSynced without a bookmark", inf.HasSynced)
			if h := inf.Health(); !h.Fresh || h.FreshResourceVersion != f.src.ResourceVersion() || inf.Indexer().Len() != map[bool]int{false: 1, true: 0}[deleted] {
				t.Fatalf("health %+v, %d objects; want fresh at %s with the server's scope", h, inf.Indexer().Len(), f.src.ResourceVersion())
			}
		})
	}
}
