package boltinformer_test

// Fresh by a bookmark under client-go's batch processing (issue 23, items
// 1 to 3, and the suspected defects of their class): the tests stage what
// the informer sees, and when, with a server whose watches hold their
// events until the test releases them and an index function that holds the
// informer loop on one object, so that a batch holds exactly the deltas a
// test names.

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/internal/testobj"
	"github.com/boltinformer/boltinformer/recovery/crashtest"
)

// stagedServer is a Source whose watches hold their events until the test
// releases them (held), and whose one-object metadata reads (Limit 1: the
// informer's read of the server's resourceVersion, then one per watch)
// call onRead with their number, from 1, and the read itself.
type stagedServer struct {
	*crashtest.Source
	held bool
	// onRead is set before the informer runs.
	onRead func(n int, read func() (*metav1.PartialObjectMetadataList, error)) (*metav1.PartialObjectMetadataList, error)

	mu        sync.Mutex
	reads     int
	fullLists int // metadata lists of every object
	watches   []*heldWatch
}

func (s *stagedServer) ListMetadata(ctx context.Context, o metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
	read := func() (*metav1.PartialObjectMetadataList, error) { return s.Source.ListMetadata(ctx, o) }
	s.mu.Lock()
	if o.Limit != 1 {
		s.fullLists++
		s.mu.Unlock()
		return read()
	}
	s.reads++
	n := s.reads
	s.mu.Unlock()
	if s.onRead == nil {
		return read()
	}
	return s.onRead(n, read)
}

func (s *stagedServer) fullMetadataLists() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fullLists
}

func (s *stagedServer) Watch(o metav1.ListOptions) (watch.Interface, error) {
	return s.WatchWithContext(context.Background(), o)
}

func (s *stagedServer) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	w, err := s.Source.WatchWithContext(ctx, o)
	if err != nil {
		return nil, err
	}
	hw := newHeldWatch(w, !s.held)
	s.mu.Lock()
	s.watches = append(s.watches, hw)
	s.mu.Unlock()
	return hw, nil
}

// watch returns the i-th watch started (from 0), waiting for it.
func (s *stagedServer) watch(t *testing.T, i int) *heldWatch {
	t.Helper()
	var w *heldWatch
	waitFor(t, "watch "+strconv.Itoa(i), func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		if len(s.watches) > i {
			w = s.watches[i]
		}
		return w != nil
	})
	return w
}

// heldWatch forwards a watch's events once released, one at a time and
// unbuffered: an event is in sent once the reflector has taken it, so
// every earlier event is in the informer's queue.
type heldWatch struct {
	inner   watch.Interface
	out     chan watch.Event
	release chan struct{}
	sent    chan watch.Event
	stop    chan struct{}
	once    sync.Once
	relOnce sync.Once
}

func newHeldWatch(w watch.Interface, released bool) *heldWatch {
	h := &heldWatch{inner: w, out: make(chan watch.Event), release: make(chan struct{}), sent: make(chan watch.Event, 100), stop: make(chan struct{})}
	if released {
		h.open()
	}
	go h.run()
	return h
}

func (h *heldWatch) open() { h.relOnce.Do(func() { close(h.release) }) }

func (h *heldWatch) run() {
	defer close(h.out)
	defer h.inner.Stop()
	select {
	case <-h.release:
	case <-h.stop:
		return
	}
	for {
		select {
		case ev, ok := <-h.inner.ResultChan():
			if !ok {
				return
			}
			select {
			case h.out <- ev:
				h.sent <- ev
			case <-h.stop:
				return
			}
		case <-h.stop:
			return
		}
	}
}

// taken waits until the reflector has taken an event of resourceVersion
// rv.
func (h *heldWatch) taken(t *testing.T, rv string) {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		select {
		case ev := <-h.sent:
			if rvOf(ev.Object) == rv {
				return
			}
		case <-deadline:
			t.Errorf("the reflector did not take the event at %s", rv)
			return
		}
	}
}

func (h *heldWatch) ResultChan() <-chan watch.Event { return h.out }
func (h *heldWatch) Stop()                          { h.once.Do(func() { close(h.stop) }) }

// holdIndex returns an index function that holds the informer loop on the
// object labelled hold=yes until release is closed.
func holdIndex(release <-chan struct{}) cache.Indexers {
	ix := podIndexers()
	ix["hold"] = func(obj any) ([]string, error) {
		if p, ok := obj.(*corev1.Pod); ok && p.Labels["hold"] == "yes" {
			<-release
		}
		return nil, nil
	}
	return ix
}

// openStaged opens the cache file with informer "pods" over srv, with
// Fresh by a bookmark only (no metadata list of every object at once).
func (f *cacheFile) openStaged(srv *stagedServer, ix cache.Indexers, opts *boltinformer.InformerOptions) *boltinformer.Informer {
	f.t.Helper()
	db, err := boltinformer.Open(f.path, &boltinformer.Options{Logger: &quietLogger})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = db.Close() })
	if opts == nil {
		opts = &boltinformer.InformerOptions{SyncPolicy: boltinformer.SyncAfterFresh, FreshBookmarkWait: time.Hour, FreshListMax: -1, Metadata: srv}
	}
	inf, err := db.NewInformer("pods", srv, &corev1.Pod{}, 0, ix, opts)
	if err != nil {
		f.t.Fatal(err)
	}
	if !inf.Decision().Warm {
		f.t.Fatalf("not warm: %+v", inf.Decision())
	}
	return inf
}

// TestRegressionFreshBookmarkAppliedPastR (issue 23, item 1): the resumed
// watch applied an event past R between the read of R and its comparison
// with the cache. That compared R with what the cache had applied, took
// the healthy server for a restored one, and listed every object's
// metadata; R is compared with the resume point, and a cache that has
// applied past R is fresh (the watch is in order).
func TestRegressionFreshBookmarkAppliedPastR(t *testing.T) {
	f := newCacheFile(t, 10)
	srv := &stagedServer{Source: f.src}
	var inf *boltinformer.Informer
	created := testobj.Pod(100, 3, 2, "")
	srv.onRead = func(n int, read func() (*metav1.PartialObjectMetadataList, error)) (*metav1.PartialObjectMetadataList, error) {
		list, err := read()
		if n == 1 {
			if _, err := f.src.Create(created); err != nil {
				t.Error(err)
			}
			waitFor(t, "the event past R applied", func() bool {
				_, ok, _ := inf.GetStore().GetByKey(created.Namespace + "/" + created.Name)
				return ok
			})
		}
		return list, err
	}
	inf = f.openStaged(srv, podIndexers(), nil)
	runInformer(t, inf)
	waitFor(t, "HasSynced", inf.HasSynced)
	if n := srv.fullMetadataLists(); n != 0 {
		t.Fatalf("%d metadata lists of every object, want none: the server's history is the cache's", n)
	}
	if h := inf.Health(); !h.Fresh || h.FreshResourceVersion != f.src.ResourceVersion() || h.FreshFallback != "" {
		t.Fatalf("health %+v, want fresh at %s by the read", h, f.src.ResourceVersion())
	}
	if st := inf.WatchStats(); st.RelistsRequested != 0 || st.Lists != 0 {
		t.Fatalf("watch stats %+v, want no relist", st)
	}
}

// stageBatch stages a warm start whose resumed watch brings, once R is
// known, a batch of deltas: the file is at S; the server holds an update
// of an object labelled hold=yes (S+1), the changes of beforeR (the read
// returns R after them), then those of afterR. The watch is held until the
// informer knows R (Health.FreshTarget); the loop is then held on the
// first update until the reflector has queued everything after it, so the
// rest comes in one batch (with client-go's batch processing, its
// default), then a bookmark at the server's resourceVersion.
func stageBatch(t *testing.T, f *cacheFile, beforeR, afterR func()) (*boltinformer.Informer, *stagedServer) {
	t.Helper()
	srv := &stagedServer{Source: f.src, held: true}
	release := make(chan struct{})
	keys := sortedKeys(f.src.Objects())
	srv.onRead = func(n int, read func() (*metav1.PartialObjectMetadataList, error)) (*metav1.PartialObjectMetadataList, error) {
		if n != 1 {
			return read()
		}
		// R is read with the watch held: nothing is applied.
		p := f.src.Objects()[keys[5]].(*corev1.Pod).DeepCopy()
		p.Labels["hold"] = "yes"
		if _, err := f.src.Update(p); err != nil {
			t.Error(err)
		}
		beforeR()
		list, err := read()
		afterR()
		return list, err
	}
	inf := f.openStaged(srv, holdIndex(release), nil)
	stop := runInformer(t, inf)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
		stop()
	})
	waitFor(t, "R known", func() bool { return inf.Health().FreshTarget != "" })
	w := srv.watch(t, 0)
	w.open()
	// Everything after the held update is queued once the reflector has
	// taken the bookmark after it: then the loop goes on, and pops the
	// rest at once.
	f.src.Bookmark()
	w.taken(t, f.src.ResourceVersion())
	close(release)
	return inf, srv
}

// TestRegressionFreshBookmarkBatchDeleteThenCreate (issue 23, item 2): a
// batch [delete at or before R, create after R] counted the cache's size at
// R before the batch's delete was applied: one object too many, taken for
// another history, and every object relisted from a healthy server.
func TestRegressionFreshBookmarkBatchDeleteThenCreate(t *testing.T) {
	f := newCacheFile(t, 10)
	keys := sortedKeys(f.src.Objects())
	inf, srv := stageBatch(t, f,
		func() {
			if err := f.src.Delete(keys[0]); err != nil {
				t.Error(err)
			}
		},
		func() {
			if _, err := f.src.Create(testobj.Pod(100, 3, 2, "")); err != nil {
				t.Error(err)
			}
		})
	waitFor(t, "HasSynced", inf.HasSynced)
	if st := inf.WatchStats(); st.RelistsRequested != 0 || st.Lists != 0 {
		t.Fatalf("watch stats %+v, want no relist: the server's history is the cache's", st)
	}
	if n := srv.fullMetadataLists(); n != 0 {
		t.Fatalf("%d metadata lists of every object, want none", n)
	}
	if d := diffObjects(f.src.Objects(), inf.GetStore().List()); d != "" {
		t.Fatalf("cache differs from the server:\n%s", d)
	}
}

// TestRegressionFreshBookmarkEventsInABatch (issue 23, item 3): events at
// or past R applied in a batch never made the informer fresh (only the
// path of a single delta looked at them): it waited for a bookmark. It is
// fresh at the first of them.
func TestRegressionFreshBookmarkEventsInABatch(t *testing.T) {
	f := newCacheFile(t, 10)
	var atR string
	inf, _ := stageBatch(t, f,
		func() {
			p := f.src.Objects()[sortedKeys(f.src.Objects())[2]].(*corev1.Pod).DeepCopy()
			p.Labels["changed"] = "yes"
			out, err := f.src.Update(p)
			if err != nil {
				t.Error(err)
			}
			atR = rvOf(out)
		},
		func() {
			for i := range 2 {
				if _, err := f.src.Create(testobj.Pod(100+i, 3, 2, "")); err != nil {
					t.Error(err)
				}
			}
		})
	waitFor(t, "HasSynced", inf.HasSynced)
	if h := inf.Health(); !h.Fresh || h.FreshResourceVersion != atR {
		t.Fatalf("health %+v, want fresh at the batch's event at R (%s), not at the bookmark after it", h, atR)
	}
}

// TestRegressionFallbackFreshOnceApplied (issue 23, suspected): with no
// MetadataLister a warm start is fresh at the first watch event; it was
// fresh once the event was received, before the loop applied it, so
// HasSynced reported a cache without it. Here the event is held in the
// transform (the informer's queue, before the loop) while HasSynced is
// watched.
func TestRegressionFallbackFreshOnceApplied(t *testing.T) {
	f := newCacheFile(t, 10)
	entered, release := make(chan struct{}), make(chan struct{})
	inf := f.openStaged(&stagedServer{Source: f.src}, podIndexers(), &boltinformer.InformerOptions{SyncPolicy: boltinformer.SyncAfterFresh})
	if err := inf.SetTransform(func(obj any) (any, error) {
		if p, ok := obj.(*corev1.Pod); ok && p.Labels["hold"] == "yes" {
			close(entered)
			<-release
		}
		return obj, nil
	}); err != nil {
		t.Fatal(err)
	}
	stop := runInformer(t, inf)
	p := f.src.Objects()[sortedKeys(f.src.Objects())[3]].(*corev1.Pod).DeepCopy()
	p.Labels["hold"] = "yes"
	if _, err := f.src.Update(p); err != nil {
		t.Fatal(err)
	}
	<-entered
	// Received, not applied: not fresh, however long it waits.
	for range 100 {
		if inf.HasSynced() {
			close(release)
			stop()
			t.Fatal("synced (fresh) before the first watch event was applied")
		}
		time.Sleep(2 * time.Millisecond)
	}
	close(release)
	waitFor(t, "HasSynced", inf.HasSynced)
	if h := inf.Health(); !h.Fresh || h.FreshFallback == "" {
		t.Fatalf("health %+v, want fresh by the fallback", h)
	}
}

// TestRegressionReplayDownDeletesSyncAfterDiskLoad (issue 23, item 9): with
// SyncAfterDiskLoad a warm start was fresh at the first watch event it
// received, so the deletes its backlog brought after it were never
// replayed to a handler added later (controller-runtime adds its handlers
// once synced, which SyncAfterDiskLoad is at once). Freshness is decided
// as with SyncAfterFresh whenever ReplayDownDeletes asks for the deletes:
// every delete made while down reaches a late handler, in every policy.
func TestRegressionReplayDownDeletesSyncAfterDiskLoad(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts boltinformer.InformerOptions
	}{
		{"bookmark", boltinformer.InformerOptions{FreshBookmarkWait: time.Hour, FreshListMax: -1}},
		{"metadata list", boltinformer.InformerOptions{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newCacheFile(t, 10)
			keys := sortedKeys(f.src.Objects())
			for _, k := range keys[:3] {
				if err := f.src.Delete(k); err != nil {
					t.Fatal(err)
				}
			}
			srv := &stagedServer{Source: f.src}
			opts := tc.opts
			opts.SyncPolicy, opts.ReplayDownDeletes, opts.Metadata = boltinformer.SyncAfterDiskLoad, true, srv
			inf := f.openStaged(srv, podIndexers(), &opts)
			runInformer(t, inf)
			waitFor(t, "HasSynced at the disk load", inf.HasSynced)
			waitFor(t, "the deletes applied", func() bool { return inf.GetStore().ListKeys() != nil && len(inf.GetStore().ListKeys()) == 7 })
			if tc.opts.FreshBookmarkWait > 0 {
				f.src.Bookmark()
			}
			waitFor(t, "fresh", func() bool { return inf.Health().Fresh })
			late := newEvRecorder("late")
			reg, err := inf.AddEventHandler(late)
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the late handler's sync", reg.HasSynced)
			var deletes []string
			for _, e := range late.events() {
				if e.Kind == "delete" {
					deletes = append(deletes, e.Key)
				}
			}
			if len(deletes) != 3 {
				t.Fatalf("late handler got deletes %v, want the 3 made while down %v", deletes, keys[:3])
			}
		})
	}
}
