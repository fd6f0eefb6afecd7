package boltinformer_test

// The moments of a warm start (fresh.go): Loaded, Fresh, Live. Fresh means
// the cache equals the server's state at a known resourceVersion, found by
// one metadata list diffed against the cache, with the resumed watch as the
// only source of events.

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/internal/testobj"
	"github.com/boltinformer/boltinformer/recovery/crashtest"
)

// churn changes, creates and deletes n Pods each on the Source (the
// changes made while the agent was down).
func churn(t *testing.T, src *crashtest.Source, n int) {
	t.Helper()
	objs := src.Objects()
	keys := sortedKeys(objs)
	for i := range n {
		if _, err := src.Update(bumpPod(objs[keys[i]], 1)); err != nil {
			t.Fatal(err)
		}
		if _, err := src.Create(testobj.Pod(10_000+i, 3, 2, "")); err != nil {
			t.Fatal(err)
		}
		if err := src.Delete(keys[len(keys)-1-i]); err != nil {
			t.Fatal(err)
		}
	}
}

// slowWatch delays every watch event by one tick, so that the moment the
// informer reports synced can be told apart from the moment the watch has
// delivered everything.
type slowWatch struct {
	*crashtest.Source
	delay time.Duration
}

func (w slowWatch) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watchInterface, error) {
	inner, err := w.Source.WatchWithContext(ctx, o)
	if err != nil {
		return nil, err
	}
	return newDelayedWatch(inner, w.delay), nil
}

// TestFreshWaitsForTheChangesWhileDown: with SyncAfterFresh and a
// MetadataLister, HasSynced comes only once the resumed watch has brought
// every change made while the informer was down, and at that moment the
// cache equals the server's state. SyncAfterDiskLoad is synced at once,
// with the state of the shutdown (Loaded, not Fresh).
func TestFreshWaitsForTheChangesWhileDown(t *testing.T) {
	for _, n := range []int{0, 1, 10} {
		t.Run(fmt.Sprintf("changes=%d", n), func(t *testing.T) {
			f := newCacheFile(t, 50)
			churn(t, f.src, n)
			f.src.ResetCalls()
			lw := slowWatch{Source: f.src, delay: 2 * time.Millisecond}
			db, err := boltinformer.Open(f.path, &boltinformer.Options{Logger: &quietLogger})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			inf, err := db.NewInformer("pods", lw, &corev1.Pod{}, 0, podIndexers(), &boltinformer.InformerOptions{
				SyncPolicy: boltinformer.SyncAfterFresh, Metadata: f.src})
			if err != nil {
				t.Fatal(err)
			}
			if !inf.Decision().Warm {
				t.Fatalf("not warm: %+v", inf.Decision())
			}
			// Check the cache at the very moment it reports synced.
			var atSync string
			synced := make(chan struct{})
			go func() {
				defer close(synced)
				if cache.WaitForCacheSync(t.Context().Done(), inf.HasSynced) {
					atSync = diffObjects(f.src.Objects(), inf.GetStore().List())
				}
			}()
			stop := runInformer(t, inf)
			<-synced
			if atSync != "" {
				t.Fatalf("synced before the cache equals the server's state:\n%s", atSync)
			}
			h := inf.Health()
			if !h.Loaded || !h.Fresh || h.FreshResourceVersion != f.src.ResourceVersion() || h.Stale || h.FreshFallback != "" {
				t.Fatalf("health at sync: %+v (server at %s)", h, f.src.ResourceVersion())
			}
			if c := f.src.Calls(); c.Lists != 0 || c.MetadataLists != 1 {
				t.Fatalf("requests: %+v", c.Log)
			}
			waitFor(t, "Live", func() bool { return inf.Health().Live })
			stop()
		})
	}
}

// TestRegressionFreshWithoutWatchEvent: a warm start over a file that is
// already current is fresh at once, with no watch event at all (the
// apiserver sends its first bookmark to a resumed watch about a minute
// later; SyncAfterResume waited for it).
func TestRegressionFreshWithoutWatchEvent(t *testing.T) {
	f := newCacheFile(t, 20)
	src := f.src
	src.ResetCalls()
	db, err := boltinformer.Open(f.path, &boltinformer.Options{Logger: &quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	inf, err := db.NewInformer("pods", src, &corev1.Pod{}, 0, podIndexers(), &boltinformer.InformerOptions{
		SyncPolicy: boltinformer.SyncAfterResume, Metadata: src})
	if err != nil {
		t.Fatal(err)
	}
	runInformer(t, inf)
	waitFor(t, "HasSynced", inf.HasSynced)
	if ws := inf.WatchStats(); ws.Events != 0 {
		t.Fatalf("watch events before sync: %d", ws.Events)
	}
	if h := inf.Health(); !h.Fresh || h.FreshResourceVersion != src.ResourceVersion() {
		t.Fatalf("health: %+v", h)
	}
}

// TestFreshTimeoutServesStale: with the server unreachable, SyncAfterFresh
// waits FreshTimeout, then reports synced and serves what it loaded,
// marked stale; once the server is back the cache becomes fresh.
func TestFreshTimeoutServesStale(t *testing.T) {
	f := newCacheFile(t, 20)
	churn(t, f.src, 3)
	f.src.SetDown(true)
	db, err := boltinformer.Open(f.path, &boltinformer.Options{Logger: &quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	inf, err := db.NewInformer("pods", f.src, &corev1.Pod{}, 0, podIndexers(), &boltinformer.InformerOptions{
		SyncPolicy: boltinformer.SyncAfterFresh, Metadata: f.src, FreshTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runInformer(t, inf)
	waitFor(t, "HasSynced", inf.HasSynced)
	if h := inf.Health(); !h.Stale || h.Fresh || !h.Loaded || h.Live {
		t.Fatalf("health while down: %+v", h)
	}
	if inf.Indexer().Len() != 20 {
		t.Fatalf("serving %d objects, want the 20 loaded", inf.Indexer().Len())
	}
	f.src.SetDown(false)
	waitFor(t, "Fresh", func() bool { return inf.Health().Fresh })
	if d := diffObjects(f.src.Objects(), inf.GetStore().List()); d != "" {
		t.Fatalf("fresh but not the server's state:\n%s", d)
	}
	if h := inf.Health(); h.Stale {
		t.Fatalf("still stale once fresh: %+v", h)
	}
}

// TestFreshRestoredCluster: a server whose resourceVersion is behind the
// file's (restored from a backup, or replaced) is another history: the
// informer relists over the cache, and the handlers get the difference.
func TestFreshRestoredCluster(t *testing.T) {
	f := newCacheFile(t, 30)
	saved := f.src.ResourceVersion()
	// The restored server: at resourceVersion 5, with other objects.
	var objs []runtime.Object
	for i := range 10 {
		p := testobj.Pod(500+i, 3, 2, "")
		p.ResourceVersion = "3"
		objs = append(objs, p)
	}
	restored := crashtest.NewSourceAt(func() runtime.Object { return &corev1.PodList{} }, 5, objs)
	f.src = restored
	r := f.open(nil, &boltinformer.InformerOptions{SyncPolicy: boltinformer.SyncAfterFresh, Metadata: restored})
	if !r.inf.Decision().Warm {
		t.Fatalf("not warm: %+v", r.inf.Decision())
	}
	r.run()
	r.waitSynced()
	if d := diffObjects(restored.Objects(), r.inf.GetStore().List()); d != "" {
		t.Fatalf("synced with another history's objects (file at %s, server at 5):\n%s", saved, d)
	}
	r.waitApplied()
	if h := r.inf.Health(); !h.Fresh || h.FreshResourceVersion != "5" {
		t.Fatalf("health: %+v", h)
	}
	var deletes int
	for _, e := range r.rec.events() {
		if e.Kind == "delete" {
			deletes++
		}
	}
	if deletes != 30 {
		t.Fatalf("handler saw %d deletes, want the 30 objects of the old history", deletes)
	}
	if c := restored.Calls(); c.Lists != 1 {
		t.Fatalf("lists: %v", c.Log)
	}
}

// notComparable answers metadata lists with resourceVersions that do not
// parse (as some aggregated APIs do).
type notComparable struct{ *crashtest.Source }

func (n notComparable) ListMetadata(ctx context.Context, o metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
	l, err := n.Source.ListMetadata(ctx, o)
	if err != nil {
		return nil, err
	}
	l.ResourceVersion = "v-" + l.ResourceVersion
	return l, nil
}

// TestFreshNotComparable: resourceVersions that do not compare make
// freshness the first watch event, with the reason in Health.
func TestFreshNotComparable(t *testing.T) {
	f := newCacheFile(t, 10)
	churn(t, f.src, 1)
	r := f.open(nil, &boltinformer.InformerOptions{SyncPolicy: boltinformer.SyncAfterFresh, Metadata: notComparable{f.src}})
	r.run()
	r.waitSynced()
	h := r.inf.Health()
	if !h.Fresh || !strings.Contains(h.FreshFallback, "not comparable") {
		t.Fatalf("health: %+v", h)
	}
	r.waitApplied()
}

type watchInterface = watch.Interface

// delayedWatch forwards another watch's events, each after a delay. It
// owns one goroutine, ended by Stop or the inner watch ending.
type delayedWatch struct {
	inner watch.Interface
	out   chan watch.Event
	stop  chan struct{}
	once  sync.Once
}

func newDelayedWatch(inner watch.Interface, d time.Duration) *delayedWatch {
	w := &delayedWatch{inner: inner, out: make(chan watch.Event), stop: make(chan struct{})}
	go func() {
		defer close(w.out)
		defer inner.Stop()
		for {
			select {
			case <-w.stop:
				return
			case ev, ok := <-inner.ResultChan():
				if !ok {
					return
				}
				time.Sleep(d)
				select {
				case w.out <- ev:
				case <-w.stop:
					return
				}
			}
		}
	}()
	return w
}

func (w *delayedWatch) Stop()                          { w.once.Do(func() { close(w.stop) }) }
func (w *delayedWatch) ResultChan() <-chan watch.Event { return w.out }

// TestPartialRelistAfter410: after a 410 (the server compacted past the
// saved resourceVersion, as an apiserver restart does), a warm informer
// with a MetadataLister and an ObjectGetter lists metadata, reads only the
// objects that changed, and deletes the ones that went away, instead of
// listing every object; a larger change lists everything. The cache, the
// file and the handlers end as after a full relist.
func TestPartialRelistAfter410(t *testing.T) {
	for _, tc := range []struct {
		name    string
		changes int
		partial bool
	}{{"changes=0", 0, true}, {"changes=2", 2, true}, {"changes=30", 30, false}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newCacheFile(t, 100)
			churn(t, f.src, tc.changes)
			f.src.Compact()
			f.src.ResetCalls()
			r := f.open(nil, &boltinformer.InformerOptions{SyncPolicy: boltinformer.SyncAfterFresh, Metadata: f.src, Getter: f.src})
			r.run()
			r.waitSynced()
			if d := diffObjects(f.src.Objects(), r.inf.GetStore().List()); d != "" {
				t.Fatalf("synced, not the server's state:\n%s", d)
			}
			r.waitApplied()
			c := f.src.Calls()
			if tc.partial && (c.Lists != 0 || c.Gets != 2*tc.changes) {
				t.Fatalf("partial relist: %d lists, %d reads, want 0 and %d: %v", c.Lists, c.Gets, 2*tc.changes, c.Log)
			}
			if !tc.partial && (c.Lists != 1 || c.Gets != 0) {
				t.Fatalf("full relist: %d lists, %d reads: %v", c.Lists, c.Gets, c.Log)
			}
			var deletes int
			for _, e := range r.rec.events() {
				if e.Kind == "delete" {
					deletes++
				}
			}
			if deletes != tc.changes {
				t.Fatalf("handler saw %d deletes, want %d", deletes, tc.changes)
			}
			// The file holds the same, at the list's resourceVersion.
			r.close()
			r2 := f.open(nil, nil)
			if st := r2.inf.Indexer().SavedState(); st.ResourceVersion != f.src.ResourceVersion() {
				t.Fatalf("saved resourceVersion %s, server at %s", st.ResourceVersion, f.src.ResourceVersion())
			}
			if d := diffObjects(f.src.Objects(), r2.inf.GetStore().List()); d != "" {
				t.Fatalf("file after the relist:\n%s", d)
			}
		})
	}
}

// TestReplayDownDeletes: a handler added only once the cache is fresh (as
// controller-runtime adds its controllers' handlers) hears about the
// objects deleted while the informer was down, with ReplayDownDeletes:
// their deletes first, then the initial adds of what exists.
func TestReplayDownDeletes(t *testing.T) {
	for _, replay := range []bool{false, true} {
		t.Run(fmt.Sprintf("replay=%t", replay), func(t *testing.T) {
			f := newCacheFile(t, 20)
			keys := sortedKeys(f.src.Objects())
			for _, k := range keys[:3] {
				if err := f.src.Delete(k); err != nil {
					t.Fatal(err)
				}
			}
			db, err := boltinformer.Open(f.path, &boltinformer.Options{Logger: &quietLogger})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			inf, err := db.NewInformer("pods", f.src, &corev1.Pod{}, 0, podIndexers(), &boltinformer.InformerOptions{
				SyncPolicy: boltinformer.SyncAfterFresh, Metadata: f.src, ReplayDownDeletes: replay})
			if err != nil {
				t.Fatal(err)
			}
			runInformer(t, inf)
			waitFor(t, "HasSynced", inf.HasSynced)
			late := newEvRecorder("late")
			reg, err := inf.AddEventHandler(late)
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the late handler's sync", reg.HasSynced)
			var deletes, adds []string
			for _, e := range late.events() {
				switch e.Kind {
				case "delete":
					if len(adds) > 0 {
						t.Fatalf("a delete after the initial adds: %v", late.events())
					}
					deletes = append(deletes, e.Key)
				case "add":
					adds = append(adds, e.Key)
				}
			}
			want := 0
			if replay {
				want = 3
			}
			if len(deletes) != want || len(adds) != 17 {
				t.Fatalf("late handler: %d deletes %v, %d adds; want %d and 17", len(deletes), deletes, len(adds), want)
			}
			// Only ReplayDownDeletes holds a warm start's commits, until fresh.
			if err := inf.Flush(context.Background()); err != nil {
				t.Fatalf("Flush once fresh: %v", err)
			}
			if h := inf.Health(); h.CommitsHeld || h.SavedResourceVersion != f.src.ResourceVersion() {
				t.Fatalf("held %t, saved resourceVersion %s, server at %s", h.CommitsHeld, h.SavedResourceVersion, f.src.ResourceVersion())
			}
		})
	}
}

// TestRegressionRecreateAfterStop: once an informer's Run has returned, its
// name is free: the same informer can be built again on the open DB (what
// controller-runtime's RemoveInformer and a later Get of the same kind
// do), and resumes warm from what the first one wrote.
func TestRegressionRecreateAfterStop(t *testing.T) {
	f := newCacheFile(t, 10)
	db, err := boltinformer.Open(f.path, &boltinformer.Options{Logger: &quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	inf, err := db.NewInformer("pods", f.src, &corev1.Pod{}, 0, podIndexers(), nil)
	if err != nil {
		t.Fatal(err)
	}
	stop := runInformer(t, inf)
	waitFor(t, "HasSynced", inf.HasSynced)
	if _, err := f.src.Create(testobj.Pod(99, 3, 2, "")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new Pod", func() bool { return inf.Indexer().Len() == 11 })
	stop()
	again, err := db.NewInformer("pods", f.src, &corev1.Pod{}, 0, podIndexers(), nil)
	if err != nil {
		t.Fatalf("building the informer again after its Run returned: %v", err)
	}
	if !again.Decision().Warm || again.Indexer().Len() != 11 {
		t.Fatalf("rebuilt informer: %+v with %d objects, want warm with 11", again.Decision(), again.Indexer().Len())
	}
	runInformer(t, again)
	waitFor(t, "HasSynced", again.HasSynced)
}
