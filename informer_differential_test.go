package boltinformer_test

// The differential test of invariant 3 (docs/ARCHITECTURE.md): the same
// random stream of adds, updates, deletes, bookmarks, watch closures and
// 410s is fed to client-go's shared informer and to ours (full and bounded
// memory), and the final stores and every handler's event sequence must be
// equal.

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/internal/testobj"
	"github.com/boltinformer/boltinformer/recovery/crashtest"
)

// diffSeeds is how many seeds the differential tests run:
// BOLTINFORMER_DIFF_SEEDS, default 20.
func diffSeeds(t *testing.T) int {
	n := 20
	if s := os.Getenv("BOLTINFORMER_DIFF_SEEDS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			t.Fatalf("BOLTINFORMER_DIFF_SEEDS=%q: want a positive integer", s)
		}
		n = v
	}
	if testing.Short() {
		n = min(n, 4)
	}
	return n
}

// runSeeds runs f for every seed, all at once: the runs mostly wait (for
// client-go's relist backoff), so t.Parallel's GOMAXPROCS limit would only
// make them slower.
func runSeeds(t *testing.T, f func(*testing.T, int64)) {
	var wg sync.WaitGroup
	for seed := range diffSeeds(t) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { f(t, int64(seed)) })
		}()
	}
	wg.Wait()
}

// podIndexers returns a new namespace index (client-go's AddIndexers adds
// to the map it was given).
func podIndexers() cache.Indexers {
	return cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
}

// target is one informer fed by the stream, with its own gate and two
// handlers: early (added before Run) and late (added after sync).
type target struct {
	name        string
	inf         cache.SharedIndexInformer
	gate        *gateLW
	early, late *evRecorder
	stop        func()
}

// stream drives a Source from a seeded random generator. Every step is a
// function of the generator only; where an effect would depend on timing
// (which events a relist folds, which objects a late handler's initial
// list holds), the stream first waits until every target has caught up.
type stream struct {
	t       *testing.T
	rng     *rand.Rand
	src     *crashtest.Source
	targets []*target
	next    int      // number of the next Pod to create
	rev     int      // number of the next update
	fresh   bool     // a watch (re)started and has carried no event yet
	deleted []string // keys deleted and not created again
	expires int
}

func newStream(t *testing.T, seed int64) *stream {
	// The first watch starts fresh, after the initial list.
	return &stream{t: t, rng: rand.New(rand.NewSource(seed)), src: newPodSource(), fresh: true}
}

func (s *stream) create() (key, rv string) {
	s.t.Helper()
	obj, err := s.src.Create(testobj.Pod(s.next, 3, 2, ""))
	if err != nil {
		s.t.Fatal(err)
	}
	s.next++
	return keyOf(obj), rvOf(obj)
}

func (s *stream) pick() (string, bool) {
	keys := sortedKeys(s.src.Objects())
	if len(keys) == 0 {
		return "", false
	}
	return keys[s.rng.Intn(len(keys))], true
}

func (s *stream) update() (key, rv string) {
	s.t.Helper()
	key, ok := s.pick()
	if !ok {
		return s.create()
	}
	s.rev++
	obj, err := s.src.Update(bumpPod(s.src.Objects()[key], s.rev))
	if err != nil {
		s.t.Fatal(err)
	}
	return key, rvOf(obj)
}

func (s *stream) delete() {
	s.t.Helper()
	if key, ok := s.pick(); ok {
		if err := s.src.Delete(key); err != nil {
			s.t.Fatal(err)
		}
		s.deleted = append(s.deleted, key)
	}
}

func (s *stream) mutate() {
	switch r := s.rng.Intn(10); {
	case r < 3:
		s.create()
	case r < 7:
		s.update()
	case r < 9:
		s.delete()
	default:
		s.recreate()
	}
}

// recreate creates again an object deleted before: same key, new UID.
func (s *stream) recreate() {
	s.t.Helper()
	if len(s.deleted) == 0 {
		s.create()
		return
	}
	i := s.rng.Intn(len(s.deleted))
	key := s.deleted[i]
	s.deleted = append(s.deleted[:i], s.deleted[i+1:]...)
	var ns string
	var n int
	if _, err := fmt.Sscanf(key, "ns-%1s/pod-%06d", &ns, &n); err != nil {
		s.t.Fatalf("key %s: %v", key, err)
	}
	p := testobj.Pod(n, 3, 2, "")
	p.UID = "" // the Source gives it a new one
	if _, err := s.src.Create(p); err != nil {
		s.t.Fatal(err)
	}
}

// waitStores waits until every target's store holds key at rv: since a
// store applies events in order, everything before is applied and handed
// to the handlers too.
func (s *stream) waitStores(key, rv string) {
	s.t.Helper()
	for _, tg := range s.targets {
		waitFor(s.t, fmt.Sprintf("%s to apply %s at rv %s", tg.name, key, rv), func() bool {
			return storeHas(tg.inf.GetStore(), key, rv)
		})
	}
	s.fresh = false
}

// barrier makes a change and waits until every target has applied it.
func (s *stream) barrier() {
	s.t.Helper()
	s.waitStores(s.update())
}

// closeWatches ends every watch, as a server does on a timeout: each
// reflector watches again from its last resourceVersion. A watch closed
// within a second of its start without an event counts as a failure in
// client-go (and makes it relist), so a fresh watch first gets one.
func (s *stream) closeWatches() {
	s.t.Helper()
	if s.fresh {
		s.barrier()
	}
	s.src.CloseWatches()
	s.fresh = true
}

// expire makes every reflector watch again from a resourceVersion the
// Source has compacted: 410, then one relist each, which all see the same
// state because nothing changes until every target has applied it.
func (s *stream) expire() {
	s.t.Helper()
	if s.fresh {
		s.barrier()
	}
	// A relist is a LIST through the gate, or a partial relist (a
	// metadata list and exact reads, straight from the Source).
	relists := func(tg *target) int64 {
		n := tg.gate.lists.Load()
		if b, ok := tg.inf.(*boltinformer.Informer); ok {
			n += b.WatchStats().PartialRelists
		}
		return n
	}
	lists := make([]int64, len(s.targets))
	for i, tg := range s.targets {
		tg.gate.holdWatches()
		lists[i] = relists(tg)
	}
	s.src.CloseWatches()
	for range s.rng.Intn(4) {
		s.mutate()
	}
	// The last change is a new object: a store holding it has applied the
	// relist (no watch can deliver it).
	key, rv := s.create()
	s.src.Compact()
	for _, tg := range s.targets {
		tg.gate.release()
	}
	s.waitStores(key, rv)
	for i, tg := range s.targets {
		if n := relists(tg) - lists[i]; n != 1 {
			s.t.Fatalf("%s: %d lists after a 410, want 1", tg.name, n)
		}
	}
	s.fresh = true
	s.expires++
}

// step does one random step.
func (s *stream) step(maxExpires int) {
	s.t.Helper()
	switch r := s.rng.Intn(100); {
	case r < 72:
		s.mutate()
	case r < 80:
		s.src.Bookmark()
	case r < 92:
		s.closeWatches()
	case r < 96 && s.expires < maxExpires:
		s.expire()
	default:
		s.mutate()
	}
}

// settle ends the stream with a new object and waits until every target
// and every handler has it and every reflector is at the Source's
// resourceVersion.
func (s *stream) settle() {
	s.t.Helper()
	key, rv := s.create()
	s.waitStores(key, rv)
	for _, tg := range s.targets {
		for _, r := range []*evRecorder{tg.early, tg.late} {
			if r == nil {
				continue
			}
			waitFor(s.t, fmt.Sprintf("%s handler %s to get %s", tg.name, r.name, key), func() bool { return r.saw(key) })
		}
		waitFor(s.t, tg.name+" LastSyncResourceVersion", func() bool {
			return tg.inf.LastSyncResourceVersion() == s.src.ResourceVersion()
		})
	}
}

func (s *stream) addLate() {
	s.t.Helper()
	s.barrier()
	for _, tg := range s.targets {
		tg.late = newEvRecorder(tg.name + "/late")
		if _, err := tg.inf.AddEventHandler(tg.late); err != nil {
			s.t.Fatal(err)
		}
	}
}

func (s *stream) start(tg *target) {
	s.t.Helper()
	tg.early = newEvRecorder(tg.name + "/early")
	if _, err := tg.inf.AddEventHandler(tg.early); err != nil {
		s.t.Fatal(err)
	}
	tg.stop = runInformer(s.t, tg.inf)
	s.targets = append(s.targets, tg)
}

func TestDifferentialAgainstClientGo(t *testing.T) {
	runSeeds(t, differential)
}

func differential(t *testing.T, seed int64) {
	s := newStream(t, seed)
	if s.rng.Intn(2) == 0 {
		s.src.SetMaxPageSize(int64(2 + s.rng.Intn(6)))
	}
	// At least one object: a Source that never changed answers lists
	// with resourceVersion "0", and its watch from "0" starts at the
	// current revision without the synthetic adds of kube-apiserver, so
	// changes between that list and the watch would be lost.
	for range 1 + s.rng.Intn(20) {
		s.create()
	}
	db, err := boltinformer.Open(filepath.Join(t.TempDir(), "cache.db"), &boltinformer.Options{NoSync: true, Logger: &quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	})
	cg := &target{name: "client-go", gate: newGate(s.src)}
	cg.inf = cache.NewSharedIndexInformer(cg.gate, &corev1.Pod{}, 0, podIndexers())
	full := &target{name: "full", gate: newGate(s.src)}
	bounded := &target{name: "bounded", gate: newGate(s.src)}
	if full.inf, err = db.NewInformer("full", full.gate, &corev1.Pod{}, 0, podIndexers(), nil); err != nil {
		t.Fatal(err)
	}
	if bounded.inf, err = db.NewInformer("bounded", bounded.gate, &corev1.Pod{}, 0, podIndexers(),
		&boltinformer.InformerOptions{Memory: boltinformer.BoundedMemory, CacheSize: 5}); err != nil {
		t.Fatal(err)
	}
	for _, tg := range []*target{cg, full, bounded} {
		s.start(tg)
	}
	for _, tg := range s.targets {
		waitFor(t, tg.name+" HasSynced", tg.inf.HasSynced)
	}
	steps := 40 + s.rng.Intn(80)
	lateAt := s.rng.Intn(steps)
	maxExpires := s.rng.Intn(3)
	for i := range steps {
		if i == lateAt {
			s.addLate()
		}
		s.step(maxExpires)
	}
	s.settle()

	truth := s.src.Objects()
	for _, tg := range s.targets {
		if d := diffObjects(truth, tg.inf.GetStore().List()); d != "" {
			t.Errorf("%s store differs from the Source: %s", tg.name, d)
		}
		for _, r := range []*evRecorder{tg.early, tg.late} {
			m := checkConsistent(t, r.name, r.events())
			if d := diffObjects(truth, m.list()); d != "" {
				t.Errorf("handler %s ends with objects other than the Source's: %s", r.name, d)
			}
		}
	}
	for _, ours := range []*target{full, bounded} {
		if d := diffEvents(cg.early.events(), ours.early.events()); d != "" {
			t.Errorf("%s: handler added before Run: %s", ours.name, d)
		}
		if d := diffEvents(cg.late.events(), ours.late.events()); d != "" {
			t.Errorf("%s: handler added after sync: %s", ours.name, d)
		}
	}
	t.Logf("seed %d: %d steps, %d expiries, %d events to the early handler, %d objects", seed, steps, s.expires, cg.early.len(), len(truth))
}

// TestDifferentialWithRestarts runs the stream against ours alone, stopping
// it at random points (cancel, DB.Close), changing the Source while it is
// down (and sometimes compacting, so that the resume gets 410), and
// reopening. After every restart the file must hold exactly the Source's
// state as of the saved resourceVersion, which never goes back; every
// handler's sequence must be consistent (the warm start's disk objects as
// initial adds, then the changes); and at the end the store and the
// handlers must hold the Source's objects.
func TestDifferentialWithRestarts(t *testing.T) {
	runSeeds(t, withRestarts)
}

func withRestarts(t *testing.T, seed int64) {
	s := newStream(t, 1000+seed)
	if s.rng.Intn(2) == 0 {
		s.src.SetMaxPageSize(int64(2 + s.rng.Intn(6)))
	}
	// At least one object: a Source that never changed answers lists
	// with resourceVersion "0", and its watch from "0" starts at the
	// current revision without the synthetic adds of kube-apiserver, so
	// changes between that list and the watch would be lost.
	for range 1 + s.rng.Intn(20) {
		s.create()
	}
	path := filepath.Join(t.TempDir(), "cache.db")
	var (
		db        *boltinformer.DB
		ours      *boltinformer.Informer
		appliedRV string // what the last run had applied when it stopped
		runs      int
	)
	t.Cleanup(func() {
		if db != nil {
			_ = db.Close()
		}
	})
	open := func() {
		t.Helper()
		name := fmt.Sprintf("run%d", runs)
		var err error
		if db, err = boltinformer.Open(path, &boltinformer.Options{NoSync: s.rng.Intn(2) == 0, Logger: &quietLogger}); err != nil {
			t.Fatal(err)
		}
		opts := &boltinformer.InformerOptions{}
		if runs%2 == 1 {
			opts.Memory, opts.CacheSize = boltinformer.BoundedMemory, 5
		}
		// Half the runs are fresh resumes: synced means the Source's state
		// (a metadata list diffed against the cache), and a 410 relists
		// only what changed.
		fresh := s.rng.Intn(2) == 0
		if fresh {
			opts.SyncPolicy, opts.Metadata, opts.Getter = boltinformer.SyncAfterFresh, s.src, s.src
		}
		tg := &target{name: name, gate: newGate(s.src)}
		if ours, err = db.NewInformer("pods", tg.gate, &corev1.Pod{}, 0, podIndexers(), opts); err != nil {
			t.Fatal(err)
		}
		tg.inf = ours
		var disk map[string]runtime.Object
		if runs > 0 {
			if !ours.Decision().Warm {
				t.Fatalf("%s: cold start after a restart: %+v", name, ours.Decision())
			}
			saved := ours.Indexer().SavedState().ResourceVersion
			if saved != appliedRV {
				t.Fatalf("%s: saved resourceVersion %s, the last run had applied %s", name, saved, appliedRV)
			}
			disk = s.src.StateAt(rvInt(t, saved))
			if d := diffObjects(disk, ours.GetIndexer().List()); d != "" {
				t.Fatalf("%s: the file does not hold the state as of its resourceVersion %s: %s", name, saved, d)
			}
		}
		s.targets = nil
		s.start(tg)
		waitFor(t, name+" HasSynced", ours.HasSynced)
		if fresh {
			// Nothing changes on the Source until open returns.
			if d := diffObjects(s.src.Objects(), ours.GetStore().List()); d != "" {
				t.Fatalf("%s: synced (SyncAfterFresh) but not the Source's state: %s", name, d)
			}
		}
		if runs > 0 {
			// The documented warm-start difference: the disk objects come
			// first, as initial adds; then the changes.
			waitFor(t, name+" initial adds", func() bool { return tg.early.len() >= len(disk) })
			var added []any
			for _, e := range tg.early.events()[:len(disk)] {
				if e.Kind != "add" || !e.Initial {
					t.Fatalf("%s: %s before all the disk objects were added", name, e)
				}
				added = append(added, e.Obj)
			}
			if d := diffObjects(disk, added); d != "" {
				t.Fatalf("%s: the initial adds are not the disk objects: %s", name, d)
			}
		}
		s.fresh = true
	}
	stop := func() {
		t.Helper()
		tg := s.targets[0]
		tg.stop()
		appliedRV = ours.Indexer().ResourceVersion()
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		db = nil
		checkConsistent(t, tg.early.name, tg.early.events())
		if tg.late != nil {
			checkConsistent(t, tg.late.name, tg.late.events())
		}
		runs++
	}

	open()
	steps := 40 + s.rng.Intn(80)
	lateAt := s.rng.Intn(steps)
	maxExpires := s.rng.Intn(3)
	for i := range steps {
		if i == lateAt || (i > lateAt && s.targets[0].late == nil) {
			s.addLate()
		}
		if s.rng.Intn(100) < 6 {
			stop()
			// While down: changes, and sometimes a compaction past the
			// saved resourceVersion (the resume gets 410 and relists).
			for range s.rng.Intn(6) {
				s.mutate()
			}
			// The last change is a new object: once the new run has it,
			// the resume (a watch, or a relist after 410) is done, and
			// every later change comes by watch.
			key, rv := s.create()
			if s.rng.Intn(2) == 0 {
				s.src.Compact()
			}
			open()
			s.waitStores(key, rv)
			s.fresh = true
			continue
		}
		s.step(maxExpires)
	}
	s.settle()
	truth := s.src.Objects()
	tg := s.targets[0]
	if d := diffObjects(truth, ours.GetStore().List()); d != "" {
		t.Errorf("store differs from the Source: %s", d)
	}
	for _, r := range []*evRecorder{tg.early, tg.late} {
		if r == nil {
			continue
		}
		m := checkConsistent(t, r.name, r.events())
		if d := diffObjects(truth, m.list()); d != "" {
			t.Errorf("handler %s ends with objects other than the Source's: %s", r.name, d)
		}
	}
	t.Logf("seed %d: %d steps, %d restarts, %d expiries, %d objects", seed, steps, runs, s.expires, len(truth))
}
