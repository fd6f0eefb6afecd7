package boltinformer_test

// Warm restarts (invariants 2 and 4): after Close and reopen the informer
// resumes the watch from the saved resourceVersion without a LIST; after a
// 410 it relists once and the handlers get the difference; listers serve
// before Run; the HasSynced policy; offline starts.

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	corev1listers "k8s.io/client-go/listers/core/v1"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/internal/testobj"
	"github.com/boltinformer/boltinformer/recovery"
	"github.com/boltinformer/boltinformer/recovery/crashtest"
)

// cacheFile is a cache file and the Source it mirrors.
type cacheFile struct {
	t    *testing.T
	path string
	src  *crashtest.Source
}

// newCacheFile creates a Source with n Pods and a file that a cold run of
// informer "pods" filled from it, stopped gracefully.
func newCacheFile(t *testing.T, n int) *cacheFile {
	t.Helper()
	f := &cacheFile{t: t, path: filepath.Join(t.TempDir(), "cache.db"), src: newPodSource()}
	for i := range n {
		if _, err := f.src.Create(testobj.Pod(i, 3, 2, "")); err != nil {
			t.Fatal(err)
		}
	}
	r := f.open(nil, nil)
	if r.inf.Decision().Warm {
		t.Fatalf("first run started warm: %+v", r.inf.Decision())
	}
	r.run()
	r.waitSynced()
	r.waitApplied()
	r.close()
	return f
}

// run is one informer "pods" on one open DB.
type run struct {
	t    *testing.T
	f    *cacheFile
	db   *boltinformer.DB
	inf  *boltinformer.Informer
	rec  *evRecorder
	stop func()
}

// open opens the file and builds the informer; its handler is added before
// Run.
func (f *cacheFile) open(dbOpts *boltinformer.Options, opts *boltinformer.InformerOptions) *run {
	f.t.Helper()
	if dbOpts == nil {
		dbOpts = &boltinformer.Options{}
	}
	if dbOpts.Logger == nil {
		dbOpts.Logger = &quietLogger
	}
	db, err := boltinformer.Open(f.path, dbOpts)
	if err != nil {
		f.t.Fatal(err)
	}
	r := &run{t: f.t, f: f, db: db, rec: newEvRecorder("handler")}
	f.t.Cleanup(func() { r.close() })
	if r.inf, err = db.NewInformer("pods", f.src, &corev1.Pod{}, 0, podIndexers(), opts); err != nil {
		f.t.Fatal(err)
	}
	if _, err := r.inf.AddEventHandler(r.rec); err != nil {
		f.t.Fatal(err)
	}
	return r
}

func (r *run) run() { r.stop = runInformer(r.t, r.inf) }

func (r *run) waitSynced() {
	r.t.Helper()
	waitFor(r.t, "HasSynced", r.inf.HasSynced)
}

// waitApplied waits until the store and the handler hold the Source's
// objects.
func (r *run) waitApplied() {
	r.t.Helper()
	waitFor(r.t, "the store to converge", func() bool {
		return diffObjects(r.f.src.Objects(), r.inf.GetStore().List()) == ""
	})
	waitFor(r.t, "the handler to converge", func() bool {
		m := newModel()
		for _, e := range r.rec.events() {
			if err := m.apply(r.t, e); err != nil {
				r.t.Fatalf("handler: %v", err)
			}
		}
		return diffObjects(r.f.src.Objects(), m.list()) == ""
	})
}

// close stops the informer and closes the DB (idempotent).
func (r *run) close() {
	if r.stop != nil {
		r.stop()
	}
	if r.db != nil {
		if err := r.db.Close(); err != nil {
			r.t.Error(err)
		}
		r.db = nil
	}
}

func (r *run) lister() corev1listers.PodLister { return corev1listers.NewPodLister(r.inf.GetIndexer()) }

// checkLister checks that a generated lister serves exactly want.
func checkLister(t *testing.T, l corev1listers.PodLister, want map[string]runtime.Object) {
	t.Helper()
	pods, err := l.List(labels.Everything())
	if err != nil {
		t.Fatal(err)
	}
	got := make([]any, len(pods))
	for i, p := range pods {
		got[i] = p
	}
	if d := diffObjects(want, got); d != "" {
		t.Fatalf("lister: %s", d)
	}
	for key, obj := range want {
		ns, name, _ := strings.Cut(key, "/")
		p, err := l.Pods(ns).Get(name)
		if err != nil {
			t.Fatalf("lister Get %s: %v", key, err)
		}
		if !apiequality.Semantic.DeepEqual(p, obj) {
			t.Fatalf("lister Get %s: rv %s, want %s", key, p.ResourceVersion, rvOf(obj))
		}
	}
	byNS := map[string]int{}
	for key := range want {
		ns, _, _ := strings.Cut(key, "/")
		byNS[ns]++
	}
	for ns, n := range byNS {
		// The namespace lister probes the "namespace" index.
		pods, err := l.Pods(ns).List(labels.Everything())
		if err != nil || len(pods) != n {
			t.Fatalf("lister Pods(%q).List: %d pods, %v; want %d", ns, len(pods), err, n)
		}
	}
}

func TestRestartResumesWatchWithoutList(t *testing.T) {
	f := newCacheFile(t, 20)
	saved := f.src.ResourceVersion()
	want := f.src.Objects()
	f.src.ResetCalls()

	r := f.open(nil, nil)
	if d := r.inf.Decision(); !d.Warm || d.Reason != recovery.ReasonResumable {
		t.Fatalf("decision %+v, want a warm resumable start", d)
	}
	if got := r.inf.Indexer().SavedState().ResourceVersion; got != saved {
		t.Fatalf("saved resourceVersion %s, want %s", got, saved)
	}
	// Listers serve the cached objects at once, before Run and before any
	// call to the server.
	checkLister(t, r.lister(), want)
	if c := f.src.Calls(); len(c.Log) != 0 {
		t.Fatalf("calls before Run: %v", c.Log)
	}

	r.run()
	r.waitSynced()
	// A change made now arrives by the resumed watch.
	if _, err := f.src.Update(bumpPod(want["ns-1/pod-000004"], 1)); err != nil {
		t.Fatal(err)
	}
	r.waitApplied()
	c := f.src.Calls()
	if len(c.Log) == 0 || c.Log[0] != "WATCH rv="+saved {
		t.Fatalf("first call %v, want WATCH rv=%s", c.Log, saved)
	}
	if c.Lists != 0 {
		t.Fatalf("%d LISTs after a warm restart (calls %v), want none", c.Lists, c.Log)
	}
	evs := r.rec.events()
	for _, e := range evs[:len(want)] {
		if e.Kind != "add" || !e.Initial {
			t.Fatalf("%s before all the cached objects were added", e)
		}
	}
	if rest := evs[len(want):]; len(rest) != 1 || rest[0].Kind != "update" || rest[0].Key != "ns-1/pod-000004" {
		t.Fatalf("after the cached objects: %v, want one update", rest)
	}
	r.close()

	// Bounded memory: the lister decodes from the file, before Run too.
	f.src.ResetCalls()
	r = f.open(nil, &boltinformer.InformerOptions{Memory: boltinformer.BoundedMemory, CacheSize: 3})
	checkLister(t, r.lister(), f.src.Objects())
	if c := f.src.Calls(); len(c.Log) != 0 {
		t.Fatalf("calls before Run: %v", c.Log)
	}
}

func TestRestartAfter410RelistsOnce(t *testing.T) {
	f := newCacheFile(t, 30)
	saved := f.src.ResourceVersion()
	before := f.src.Objects()

	// While the agent is down: deletes, updates and creates, then the
	// history is compacted past the saved resourceVersion.
	deleted := []string{"ns-0/pod-000003", "ns-1/pod-000010", "ns-2/pod-000029"}
	updated := []string{"ns-0/pod-000000", "ns-1/pod-000013", "ns-2/pod-000020"}
	for _, k := range deleted {
		if err := f.src.Delete(k); err != nil {
			t.Fatal(err)
		}
	}
	for i, k := range updated {
		if _, err := f.src.Update(bumpPod(before[k], i)); err != nil {
			t.Fatal(err)
		}
	}
	created := map[string]bool{}
	for i := 30; i < 33; i++ {
		obj, err := f.src.Create(testobj.Pod(i, 3, 2, ""))
		if err != nil {
			t.Fatal(err)
		}
		created[keyOf(obj)] = true
	}
	f.src.Compact()
	f.src.SetMaxPageSize(7)
	f.src.ResetCalls()

	r := f.open(nil, nil)
	checkLister(t, r.lister(), before)
	r.run()
	r.waitSynced()
	r.waitApplied()

	c := f.src.Calls()
	if len(c.WatchRVs) == 0 || c.WatchRVs[0] != saved || !strings.HasPrefix(c.Log[0], "WATCH") {
		t.Fatalf("calls %v: want a WATCH from the saved resourceVersion %s first", c.Log, saved)
	}
	pages := (len(f.src.Objects()) + 6) / 7
	if c.Lists != 1 || c.ListPages != pages {
		t.Fatalf("%d lists in %d pages (calls %v), want 1 list in %d pages", c.Lists, c.ListPages, c.Log, pages)
	}
	if got := c.Log[1]; got != "LIST rv="+saved+" continue=false" {
		t.Fatalf("relist %q: want one not older than the saved resourceVersion %s", got, saved)
	}

	evs := r.rec.events()
	if len(evs) < len(before) {
		t.Fatalf("%d events", len(evs))
	}
	for _, e := range evs[:len(before)] {
		if e.Kind != "add" || !e.Initial {
			t.Fatalf("%s before all the cached objects were added", e)
		}
	}
	gotDeleted := map[string]bool{}
	gotUpdated := map[string]bool{}
	gotCreated := map[string]bool{}
	resyncs := 0
	for _, e := range evs[len(before):] {
		switch {
		case e.Kind == "delete":
			if !e.Unknown {
				t.Errorf("%s: a delete made while down must come as DeletedFinalStateUnknown", e)
			}
			if !apiequality.Semantic.DeepEqual(e.Obj, before[e.Key]) {
				t.Errorf("%s: its final state is not the cached object", e)
			}
			gotDeleted[e.Key] = true
		case e.Kind == "update" && rvOf(e.Old) != rvOf(e.Obj):
			if !apiequality.Semantic.DeepEqual(e.Old, before[e.Key]) {
				t.Errorf("%s: old object is not the cached one", e)
			}
			gotUpdated[e.Key] = true
		case e.Kind == "update":
			resyncs++ // unchanged objects of the relist
		case e.Kind == "add" && !e.Initial:
			gotCreated[e.Key] = true
		default:
			t.Errorf("unexpected %s", e)
		}
	}
	if fmt.Sprint(sortedKeys(gotDeleted)) != fmt.Sprint(sortedKeys(setOf(deleted))) {
		t.Errorf("deletes %v, want %v", sortedKeys(gotDeleted), deleted)
	}
	if fmt.Sprint(sortedKeys(gotUpdated)) != fmt.Sprint(sortedKeys(setOf(updated))) {
		t.Errorf("updates %v, want %v", sortedKeys(gotUpdated), updated)
	}
	if fmt.Sprint(sortedKeys(gotCreated)) != fmt.Sprint(sortedKeys(created)) {
		t.Errorf("adds %v, want %v", sortedKeys(gotCreated), sortedKeys(created))
	}
	// Like client-go, the unchanged objects of a relist reach handlers
	// without a resync period as updates with equal resourceVersions.
	if want := len(before) - len(deleted) - len(updated); resyncs != want {
		t.Errorf("%d unchanged-object updates, want %d", resyncs, want)
	}
	r.close()

	// The relist committed: the next start resumes from the new state.
	f.src.ResetCalls()
	r = f.open(nil, nil)
	if got, want := r.inf.Indexer().SavedState().ResourceVersion, f.src.ResourceVersion(); got != want {
		t.Fatalf("saved resourceVersion %s after the relist, want %s", got, want)
	}
	checkLister(t, r.lister(), f.src.Objects())
}

func setOf(keys []string) map[string]bool {
	m := map[string]bool{}
	for _, k := range keys {
		m[k] = true
	}
	return m
}

func TestSyncPolicyWithSourceDown(t *testing.T) {
	f := newCacheFile(t, 10)
	want := f.src.Objects()
	saved := f.src.ResourceVersion()
	f.src.SetDown(true)

	// SyncAfterDiskLoad (the default): synced from the file, offline.
	r := f.open(nil, nil)
	r.run()
	r.waitSynced()
	waitFor(t, "the cached objects to reach the handler", func() bool { return r.rec.len() == len(want) })
	if !r.inf.Indexer().Synced() {
		t.Fatal("indexer not synced")
	}
	r.close()

	// SyncAfterResume: not synced until the server has answered.
	f.src.ResetCalls()
	r = f.open(nil, &boltinformer.InformerOptions{SyncPolicy: boltinformer.SyncAfterResume})
	checkLister(t, r.lister(), want)
	r.run()
	waitFor(t, "the cached objects to reach the handler", func() bool { return r.rec.len() == len(want) })
	waitFor(t, "a failed call to the Source", func() bool { return f.src.Calls().Errors >= 2 })
	if r.inf.HasSynced() {
		t.Fatal("synced with SyncAfterResume while the Source is down")
	}
	checkLister(t, r.lister(), want)
	f.src.SetDown(false)
	// The resume counts as accepted at the watch's first event: on a quiet
	// resource, the server's next bookmark.
	waitFor(t, "HasSynced after the Source is back", func() bool {
		f.src.Bookmark()
		return r.inf.HasSynced()
	})
	if _, err := f.src.Create(testobj.Pod(99, 3, 2, "")); err != nil {
		t.Fatal(err)
	}
	r.waitApplied()
	checkResumedByWatch(t, f.src, saved)
}

// checkResumedByWatch checks that the Source served no LIST and that its
// first successful watch started at rv.
func checkResumedByWatch(t *testing.T, src *crashtest.Source, rv string) {
	t.Helper()
	c := src.Calls()
	if c.Lists != 0 {
		t.Fatalf("%d LISTs (calls %v), want the watch resumed from %s", c.Lists, c.Log, rv)
	}
	for _, w := range c.WatchRVs {
		if w != rv {
			t.Fatalf("watch from %s (calls %v), want every watch from the saved %s", w, c.Log, rv)
		}
	}
}

func TestOfflineStart(t *testing.T) {
	f := newCacheFile(t, 12)
	want := f.src.Objects()
	saved := f.src.ResourceVersion()
	f.src.SetDown(true)
	f.src.ResetCalls()

	r := f.open(nil, nil)
	checkLister(t, r.lister(), want)
	r.run()
	r.waitSynced()
	waitFor(t, "the cached objects to reach the handler", func() bool { return r.rec.len() == len(want) })
	for _, e := range r.rec.events() {
		if e.Kind != "add" || !e.Initial {
			t.Fatalf("offline: %s", e)
		}
	}
	if d := diffObjects(want, newModelOf(t, r.rec).list()); d != "" {
		t.Fatalf("handler: %s", d)
	}
	if err := r.db.Healthy(); err != nil {
		t.Fatalf("Healthy offline: %v (a lost uplink alone is not unhealthy)", err)
	}
	waitFor(t, "a failed call to the Source", func() bool { return f.src.Calls().Errors >= 1 })
	checkLister(t, r.lister(), want)

	// Changes made during the outage arrive once the Source is back.
	if err := f.src.Delete("ns-0/pod-000000"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.src.Update(bumpPod(want["ns-1/pod-000001"], 1)); err != nil {
		t.Fatal(err)
	}
	f.src.SetDown(false)
	r.waitApplied()
	checkResumedByWatch(t, f.src, saved)
	if h := r.inf.Health(); !h.Resumed || h.Start != "warm" {
		t.Fatalf("health %+v", h)
	}
	if err := r.inf.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := r.inf.Indexer().SavedState().ResourceVersion; got != f.src.ResourceVersion() {
		t.Fatalf("saved resourceVersion %s, want %s", got, f.src.ResourceVersion())
	}
}

func newModelOf(t *testing.T, r *evRecorder) *model { return checkConsistent(t, r.name, r.events()) }

// TestFailedFinalFlushResumesFromLastCommit: the disk refuses every commit
// from some point on, through the final flush of Close; the next start
// resumes from the last commit that succeeded and the watch delivers again
// what was lost.
func TestFailedFinalFlushResumesFromLastCommit(t *testing.T) {
	f := newCacheFile(t, 10)
	saved := f.src.ResourceVersion()
	var fail atomic.Bool
	r := f.open(&boltinformer.Options{BeforeCommit: func() error {
		if fail.Load() {
			return errInjected
		}
		return nil
	}}, nil)
	r.run()
	r.waitSynced()
	fail.Store(true)
	objs := f.src.Objects()
	if _, err := f.src.Update(bumpPod(objs["ns-2/pod-000005"], 1)); err != nil {
		t.Fatal(err)
	}
	if err := f.src.Delete("ns-0/pod-000006"); err != nil {
		t.Fatal(err)
	}
	r.waitApplied()
	r.stop()
	if err := r.db.Close(); !errors.Is(err, errInjected) {
		t.Fatalf("Close: %v, want the final flush's error", err)
	}
	r.db = nil

	f.src.ResetCalls()
	r = f.open(nil, nil)
	if got := r.inf.Indexer().SavedState().ResourceVersion; got != saved {
		t.Fatalf("saved resourceVersion %s, want the last committed %s", got, saved)
	}
	if d := diffObjects(objs, r.inf.GetIndexer().List()); d != "" {
		t.Fatalf("the file is not the state as of %s: %s", saved, d)
	}
	r.run()
	r.waitApplied()
	checkResumedByWatch(t, f.src, saved)
}
