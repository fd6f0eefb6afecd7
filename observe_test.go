package boltinformer_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/internal/testobj"
)

// observedModel replays an observer's changes over the state Observe returned.
type observedModel struct {
	mu      sync.Mutex
	objs    map[string]string // key -> resourceVersion
	rv      string
	synced  bool
	changes []boltinformer.Change
}

func newObservedModel(st boltinformer.ObservedState) *observedModel {
	m := &observedModel{objs: map[string]string{}, rv: st.ResourceVersion, synced: st.Synced}
	for _, o := range st.Objects {
		m.objs[keyOf(o)] = rvOf(o)
	}
	return m
}

func (m *observedModel) apply(c boltinformer.Change) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.changes = append(m.changes, c)
	switch c.Type {
	case boltinformer.ChangeUpsert:
		m.objs[c.Key] = rvOf(c.Object)
	case boltinformer.ChangeDelete:
		delete(m.objs, c.Key)
	case boltinformer.ChangeReplace:
		m.objs = map[string]string{}
		for _, o := range c.Objects {
			m.objs[keyOf(o)] = rvOf(o)
		}
		m.synced = true
	}
	m.rv = c.ResourceVersion
}

// currentRV is the resourceVersion the model is at.
func (m *observedModel) currentRV() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rv
}

// equals compares the model with the indexer once the model has reached
// rv (the observer runs just after the indexer has applied a change).
func (m *observedModel) equals(t *testing.T, inf *boltinformer.Informer, rv string) {
	t.Helper()
	waitFor(t, "the observer at "+rv, func() bool { return m.currentRV() == rv })
	m.mu.Lock()
	defer m.mu.Unlock()
	if got := inf.Indexer().ResourceVersion(); got != m.rv {
		t.Fatalf("observed resourceVersion %q, indexer has %q", m.rv, got)
	}
	keys := inf.GetIndexer().ListKeys()
	if len(keys) != len(m.objs) {
		t.Fatalf("observed %d objects, indexer has %d", len(m.objs), len(keys))
	}
	for _, k := range keys {
		obj, _, _ := inf.GetIndexer().GetByKey(k)
		if m.objs[k] != rvOf(obj) {
			t.Fatalf("%s: observed rv %q, indexer has %q", k, m.objs[k], rvOf(obj))
		}
	}
}

// TestObserve follows an informer through a cold list, watch events, a
// bookmark, a relist after 410 and a warm restart: replaying the changes
// over the state Observe returned always gives the indexer's content and
// resourceVersion.
func TestObserve(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache.db")
	src := newPodSource()
	for i := range 20 {
		src.Create(testobj.Pod(i, 2, 2, ""))
	}
	open := func() (*boltinformer.DB, *boltinformer.Informer) {
		db, err := boltinformer.Open(path, &boltinformer.Options{NoSync: true, Logger: &quietLogger})
		if err != nil {
			t.Fatal(err)
		}
		inf, err := db.NewInformer("pods", src, &corev1.Pod{}, 0, nil, &boltinformer.InformerOptions{Resource: "pods"})
		if err != nil {
			t.Fatal(err)
		}
		return db, inf
	}

	db, inf := open()
	if inf.Resource() != "pods" || fmt.Sprintf("%T", inf.ObjectType()) != "*v1.Pod" {
		t.Fatalf("Resource %q, ObjectType %T", inf.Resource(), inf.ObjectType())
	}
	if got := db.Informers(); len(got) != 1 || got[0] != inf {
		t.Fatalf("Informers() = %v", got)
	}
	st, stop := inf.Observe(func(boltinformer.Change) {})
	stop() // stop before any change: a no-op registration
	if st.Synced || len(st.Objects) != 0 || st.ResourceVersion != "" {
		t.Fatalf("cold state before Run: %+v", st)
	}
	st, stop = inf.Observe(func(boltinformer.Change) {})
	stop()
	m := newObservedModel(st)
	_, stopObserving := inf.Observe(m.apply)
	stopRun := runInformer(t, inf)
	waitFor(t, "sync", inf.HasSynced)
	for i := range 10 {
		p := testobj.Pod(i, 2, 2, "")
		p.Labels["changed"] = "yes"
		src.Update(p)
	}
	src.Delete(keyOf(testobj.Pod(3, 2, 2, "")))
	src.Create(testobj.Pod(100, 2, 2, ""))
	src.Bookmark()
	m.equals(t, inf, src.ResourceVersion())
	kinds := map[boltinformer.ChangeType]int{}
	waitFor(t, "the bookmark", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		clear(kinds)
		for _, c := range m.changes {
			kinds[c.Type]++
		}
		return kinds[boltinformer.ChangeBookmark] > 0
	})
	if kinds[boltinformer.ChangeReplace] != 1 || kinds[boltinformer.ChangeUpsert] != 11 || kinds[boltinformer.ChangeDelete] != 1 || kinds[boltinformer.ChangeBookmark] != 1 {
		t.Fatalf("changes by type: %v", kinds)
	}

	// A relist after 410: one Replace with the server's objects.
	stopRun()
	src.Delete(keyOf(testobj.Pod(4, 2, 2, "")))
	src.Create(testobj.Pod(101, 2, 2, ""))
	src.Compact()
	_ = db.Close()
	db, inf = open()
	defer db.Close()
	if !inf.Decision().Warm {
		t.Fatalf("not warm: %s", inf.Decision().Detail)
	}
	stopObserving() // an old informer's stop after its DB closed: harmless
	st, stopObserving = inf.Observe(func(boltinformer.Change) {})
	stopObserving()
	if !st.Synced || len(st.Objects) != 20 {
		t.Fatalf("warm state: synced %v, %d objects", st.Synced, len(st.Objects))
	}
	m = newObservedModel(st)
	_, stopObserving = inf.Observe(m.apply)
	defer stopObserving()
	runInformer(t, inf)
	waitFor(t, "the relist", func() bool { return inf.Indexer().ResourceVersion() == src.ResourceVersion() })
	m.equals(t, inf, src.ResourceVersion())
	if last := m.changes[len(m.changes)-1]; last.Type != boltinformer.ChangeReplace || len(last.Objects) != 20 {
		t.Fatalf("last change %v with %d objects, want a Replace with 20", last.Type, len(last.Objects))
	}
}

// TestObserveConcurrent adds observers while events flow: each one's
// snapshot plus its changes is the final content, with no change missed or
// seen twice.
func TestObserveConcurrent(t *testing.T) {
	db, err := boltinformer.Open(filepath.Join(t.TempDir(), "cache.db"), &boltinformer.Options{NoSync: true, Logger: &quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	src := newPodSource()
	inf, err := db.NewInformer("pods", src, &corev1.Pod{}, 0, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	runInformer(t, inf)
	waitFor(t, "sync", inf.HasSynced)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 2000 {
			p := testobj.Pod(i%300, 3, 3, "")
			if i%7 == 6 {
				src.Delete(keyOf(p))
				continue
			}
			src.Upsert(p)
		}
	}()
	var models []*observedModel
	for range 20 {
		var m *observedModel
		var mu sync.Mutex
		mu.Lock()
		st, stop := inf.Observe(func(c boltinformer.Change) {
			mu.Lock()
			defer mu.Unlock()
			m.apply(c)
		})
		m = newObservedModel(st)
		mu.Unlock()
		defer stop()
		models = append(models, m)
	}
	<-done
	waitFor(t, "the last event", func() bool { return inf.Indexer().ResourceVersion() == src.ResourceVersion() })
	for _, m := range models {
		m.equals(t, inf, src.ResourceVersion())
	}
}

// TestRegressionPartialRelistObserved: a relist after 410 that reads only
// what changed (InformerOptions.Getter: a Factory's default) changed the
// cache without telling the observers: the local API, which keeps its
// view from them, went on serving the objects changed and deleted while
// the agent was down. Observers get it as the relist it is: a Replace
// with the whole content.
func TestRegressionPartialRelistObserved(t *testing.T) {
	f := newCacheFile(t, 100)
	churn(t, f.src, 2) // 4 of 100 to read: under DefaultPartialRelistRatio
	f.src.Compact()
	f.src.ResetCalls()
	r := f.open(nil, &boltinformer.InformerOptions{SyncPolicy: boltinformer.SyncAfterFresh, Metadata: f.src, Getter: f.src,
		PartialRelistRatio: 1})
	st, stop := r.inf.Observe(func(boltinformer.Change) {})
	stop()
	m := newObservedModel(st)
	_, stop = r.inf.Observe(m.apply)
	defer stop()
	r.run()
	r.waitSynced()
	r.waitApplied()
	if n := r.inf.WatchStats().PartialRelists; n != 1 {
		t.Fatalf("%d partial relists, want 1 (calls %v)", n, f.src.Calls().Log)
	}
	m.equals(t, r.inf, f.src.ResourceVersion())
}

// TestRegressionObserveOnlyDurable (issue 23, item 6): an observer (the
// local API) got each change as the informer applied it, before the group
// commit wrote it, so after a kill -9 the file resumed behind what its
// clients had seen. An observer gets a change once it is on disk: here
// commits wait an hour (CommitMaxDelay) until Flush, and a failing commit
// (BeforeCommit) delivers nothing.
func TestRegressionObserveOnlyDurable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache.db")
	src := newPodSource()
	for i := range 10 {
		src.Create(testobj.Pod(i, 2, 2, ""))
	}
	var failCommits atomic.Bool
	db, err := boltinformer.Open(path, &boltinformer.Options{NoSync: true, Logger: &quietLogger, CommitMaxDelay: time.Hour, CommitMaxOps: 1 << 20,
		BeforeCommit: func() error {
			if failCommits.Load() {
				return errors.New("test: commit fails")
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	inf, err := db.NewInformer("pods", src, &corev1.Pod{}, 0, nil, &boltinformer.InformerOptions{Resource: "pods"})
	if err != nil {
		t.Fatal(err)
	}
	st, stop := inf.Observe(func(boltinformer.Change) {})
	stop()
	m := newObservedModel(st)
	_, stopObserving := inf.Observe(m.apply)
	defer stopObserving()
	runInformer(t, inf)
	waitFor(t, "sync", inf.HasSynced)
	if err := inf.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	m.equals(t, inf, src.ResourceVersion())
	saved := src.ResourceVersion()
	for i := range 5 {
		p := testobj.Pod(i, 2, 2, "")
		p.Labels["changed"] = "yes"
		src.Update(p)
	}
	waitFor(t, "the updates applied", func() bool { return inf.Indexer().ResourceVersion() == src.ResourceVersion() })
	if got := m.currentRV(); got != saved {
		t.Fatalf("the observer is at %s before the updates are committed, want %s (the file's)", got, saved)
	}
	failCommits.Store(true)
	if err := inf.Flush(t.Context()); err == nil {
		t.Fatal("Flush succeeded with a failing commit")
	}
	if got := m.currentRV(); got != saved {
		t.Fatalf("the observer is at %s after a failed commit, want %s (the file's)", got, saved)
	}
	failCommits.Store(false)
	if err := inf.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	m.equals(t, inf, src.ResourceVersion())
	if got := inf.Indexer().SavedState().ResourceVersion; got != src.ResourceVersion() {
		t.Fatalf("saved at %s, want %s", got, src.ResourceVersion())
	}
	// An observer added while changes are not on disk starts from the
	// file's content.
	p := testobj.Pod(7, 2, 2, "")
	p.Labels["late"] = "yes"
	src.Update(p)
	waitFor(t, "the update applied", func() bool { return inf.Indexer().ResourceVersion() == src.ResourceVersion() })
	st2, stop2 := inf.Observe(func(boltinformer.Change) {})
	defer stop2()
	if saved := inf.Indexer().SavedState().ResourceVersion; st2.ResourceVersion != saved {
		t.Fatalf("observed from %s, want the file's %s", st2.ResourceVersion, saved)
	}
}
