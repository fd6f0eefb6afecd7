package indexer_test

import (
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer/indexer"
	"github.com/boltinformer/boltinformer/internal/testobj"
	"github.com/boltinformer/boltinformer/store"
)

// applyBoth runs fn on client-go's indexer and on ours, failing on the
// first error.
func applyBoth(t *testing.T, fn func(ix cache.Indexer) error, ixs ...cache.Indexer) {
	t.Helper()
	for _, ix := range ixs {
		if err := fn(ix); err != nil {
			t.Fatalf("%T: %v", ix, err)
		}
	}
}

// loadHistory gives both indexers the same history: a list of n Pods,
// updates that move Pods between index values, deletes (some by
// tombstone) and a bookmark. It returns the last resourceVersion.
func loadHistory(t *testing.T, n int, ixs ...cache.Indexer) string {
	t.Helper()
	var list []any
	for i := range n {
		list = append(list, testobj.Pod(i, 4, 3, "100"))
	}
	applyBoth(t, func(ix cache.Indexer) error { return ix.Replace(append([]any(nil), list...), "100") }, ixs...)
	rv := 100
	for i := 0; i < n; i += 7 {
		rv++
		p := testobj.Pod(i, 4, 3, strconv.Itoa(rv))
		p.Spec.NodeName = "node-moved"
		p.Labels["tier"] = "moved"
		p.Status.Phase = corev1.PodSucceeded
		applyBoth(t, func(ix cache.Indexer) error { return ix.Update(p) }, ixs...)
	}
	for i := 3; i < n; i += 11 {
		rv++
		p := testobj.Pod(i, 4, 3, strconv.Itoa(rv))
		var obj any = p
		if i%2 == 0 {
			obj = cache.DeletedFinalStateUnknown{Key: keyOf(p), Obj: p}
		}
		applyBoth(t, func(ix cache.Indexer) error { return ix.Delete(obj) }, ixs...)
	}
	rv++
	applyBoth(t, func(ix cache.Indexer) error { ix.Bookmark(strconv.Itoa(rv)); return nil }, ixs...)
	return strconv.Itoa(rv)
}

// TestPersistenceReopen writes, flushes, closes and reopens the file (a new
// store.Open), in both modes and across modes, and compares everything.
func TestPersistenceReopen(t *testing.T) {
	for _, c := range []struct {
		write, read indexer.Mode
		// verify: the Full load reads the records, not the snapshot.
		verify bool
	}{
		{indexer.Full, indexer.Full, false},
		{indexer.Full, indexer.Full, true},
		{indexer.Bounded, indexer.Bounded, false},
		{indexer.Full, indexer.Bounded, false},
		{indexer.Bounded, indexer.Full, false},
		{indexer.Bounded, indexer.Full, true},
	} {
		t.Run(fmt.Sprintf("write=%s/read=%s/verify=%t", modeName(c.write), modeName(c.read), c.verify), func(t *testing.T) {
			t.Parallel()
			ref := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, testIndexers())
			sub := newSubject(t, subjectConfig{mode: c.write, cacheSize: 7, verifyRecords: c.verify}, testIndexers())
			rv := loadHistory(t, 200, ref, sub.x)
			sub.flush()
			if got := sub.x.SavedState().ResourceVersion; got != rv {
				t.Fatalf("saved resourceVersion %q after Flush, want %q", got, rv)
			}
			sub.close()
			sub.cfg.mode = c.read
			sub.open(testIndexers())
			if err := diffIndexers(ref, sub.x, diffOpts{probes: defaultProbes()}); err != nil {
				t.Fatal(err)
			}
			st := sub.x.SavedState()
			if st.ResourceVersion != rv || !st.Synced || st.Objects != int64(len(ref.ListKeys())) {
				t.Fatalf("state after reopen: rv %q synced %v objects %d; want %q true %d",
					st.ResourceVersion, st.Synced, st.Objects, rv, len(ref.ListKeys()))
			}
			if want := indexNames(testIndexers()); !slices.Equal(st.Indexes, want) {
				t.Fatalf("state indexes %v, want %v", st.Indexes, want)
			}
			if sub.x.ResourceVersion() != rv || !sub.x.Synced() {
				t.Fatalf("ResourceVersion %q Synced %v after reopen", sub.x.ResourceVersion(), sub.x.Synced())
			}
			// The file's index buckets say what memory says.
			assertDiskIndexes(t, sub.db, ref)
		})
	}
}

// assertDiskIndexes checks the index buckets on disk against want's
// indexes, entry by entry, and that there are no others.
func assertDiskIndexes(t *testing.T, db *store.DB, want cache.Indexer) {
	t.Helper()
	err := db.View(func(tx *store.Tx) error {
		names := indexNames(want.GetIndexers())
		var withValues []string
		for _, name := range names {
			if len(want.ListIndexFuncValues(name)) > 0 {
				withValues = append(withValues, name)
			}
		}
		// An index without any value may or may not have a bucket.
		for _, name := range tx.Indexes(informerName) {
			if !slices.Contains(names, name) {
				return fmt.Errorf("index bucket %q on disk, want only %v", name, names)
			}
		}
		for _, name := range withValues {
			if !tx.HasIndex(informerName, name) {
				return fmt.Errorf("no index bucket %q on disk", name)
			}
			disk, err := tx.IndexValues(informerName, name)
			if err != nil {
				return err
			}
			for _, v := range want.ListIndexFuncValues(name) {
				wk, _ := want.IndexKeys(name, v)
				if dk := tx.IndexKeys(informerName, name, v); !slices.Equal(wk, dk) {
					return fmt.Errorf("index %q value %q: disk has %v, want %v", name, v, dk, wk)
				}
				delete(disk, v)
			}
			if len(disk) > 0 {
				return fmt.Errorf("index %q: extra values on disk %v", name, disk)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestReopenWithAddedIndex reopens a file with one more index than it was
// written with: the index is rebuilt from the objects, written with the
// next commit, and then loaded from disk like the others.
func TestReopenWithAddedIndex(t *testing.T) {
	for _, mode := range []indexer.Mode{indexer.Full, indexer.Bounded} {
		t.Run(modeName(mode), func(t *testing.T) {
			t.Parallel()
			more := func() cache.Indexers {
				ix := testIndexers()
				ix["phase"] = phaseIndexFunc
				return ix
			}
			ref := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, more())
			sub := newSubject(t, subjectConfig{mode: mode, cacheSize: 5}, testIndexers())
			loadHistory(t, 150, ref, sub.x)
			sub.reopenWith(more())
			if err := diffIndexers(ref, sub.x, diffOpts{probes: defaultProbes()}); err != nil {
				t.Fatalf("after reopen with an added index: %v", err)
			}
			sub.flush()
			mustCheck(t, sub.db)
			assertDiskIndexes(t, sub.db, ref)
			if st := sub.x.SavedState(); !slices.Contains(st.Indexes, "phase") {
				t.Fatalf("state indexes %v lack phase", st.Indexes)
			}
			sub.reopen()
			if err := diffIndexers(ref, sub.x, diffOpts{probes: defaultProbes()}); err != nil {
				t.Fatalf("after a second reopen: %v", err)
			}
		})
	}
}

// TestReopenWithRemovedIndex reopens a file with one index fewer: its
// bucket is dropped with the next commit and the file stays consistent;
// adding the index back later (even with another function under the same
// name) rebuilds it from the objects.
func TestReopenWithRemovedIndex(t *testing.T) {
	for _, mode := range []indexer.Mode{indexer.Full, indexer.Bounded} {
		t.Run(modeName(mode), func(t *testing.T) {
			t.Parallel()
			fewer := func() cache.Indexers {
				ix := testIndexers()
				delete(ix, "labels")
				return ix
			}
			ref := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, fewer())
			sub := newSubject(t, subjectConfig{mode: mode, cacheSize: 5}, testIndexers())
			loadHistory(t, 150, ref, sub.x)
			sub.reopenWith(fewer())
			if err := diffIndexers(ref, sub.x, diffOpts{probes: defaultProbes()}); err != nil {
				t.Fatalf("after reopen with a removed index: %v", err)
			}
			sub.flush()
			mustCheck(t, sub.db)
			err := sub.db.View(func(tx *store.Tx) error {
				if tx.HasIndex(informerName, "labels") {
					return fmt.Errorf("index bucket labels still on disk: %v", tx.Indexes(informerName))
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			assertDiskIndexes(t, sub.db, ref)
			if st := sub.x.SavedState(); slices.Contains(st.Indexes, "labels") {
				t.Fatalf("state indexes %v still name labels", st.Indexes)
			}
			// Writes after the drop keep the file consistent (records still
			// carry the dropped index's values until rewritten).
			p := testobj.Pod(1, 4, 3, "900")
			p.Labels = map[string]string{"tier": "new"}
			applyBoth(t, func(ix cache.Indexer) error { return ix.Update(p) }, ref, sub.x)
			applyBoth(t, func(ix cache.Indexer) error { return ix.Delete(testobj.Pod(2, 4, 3, "901")) }, ref, sub.x)
			sub.reopen()
			if err := diffIndexers(ref, sub.x, diffOpts{probes: defaultProbes()}); err != nil {
				t.Fatalf("after writes and reopen: %v", err)
			}
			// The name comes back, with another function: rebuilt from the
			// objects, not from the values old records still carry.
			again := func() cache.Indexers {
				ix := fewer()
				ix["labels"] = tierIndexFunc
				return ix
			}
			ref2 := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, again())
			if err := ref2.Replace(ref.List(), ref.LastStoreSyncResourceVersion()); err != nil {
				t.Fatal(err)
			}
			sub.reopenWith(again())
			if err := diffIndexers(ref2, sub.x, diffOpts{probes: defaultProbes()}); err != nil {
				t.Fatalf("after re-adding the index: %v", err)
			}
			sub.flush()
			assertDiskIndexes(t, sub.db, ref2)
			sub.reopen()
			if err := diffIndexers(ref2, sub.x, diffOpts{probes: defaultProbes()}); err != nil {
				t.Fatalf("after re-adding the index and reopening: %v", err)
			}
		})
	}
}

// TestBoundedCacheStaysBounded loads 2000 Pods with CacheSize 50, reads them
// all, and checks that memory holds at most 50 decoded objects once the
// writes are committed, before and after a reopen.
func TestBoundedCacheStaysBounded(t *testing.T) {
	t.Parallel()
	const n, size = 2000, 50
	sub := newSubject(t, subjectConfig{mode: indexer.Bounded, cacheSize: size}, cache.Indexers{
		cache.NamespaceIndex: cache.MetaNamespaceIndexFunc, "node": nodeIndexFunc,
	})
	pods := make(map[string]*corev1.Pod, n)
	var list []any
	for i := range n {
		p := testobj.Pod(i, 10, 5, "1")
		pods[keyOf(p)] = p
		list = append(list, p)
	}
	if err := sub.x.Replace(list, "1"); err != nil {
		t.Fatal(err)
	}
	if got := sub.x.CachedObjects(); got > size+n {
		t.Fatalf("CachedObjects %d before Flush, want <= %d (cache + pending writes)", got, size+n)
	}
	sub.flush()
	readAll := func(when string) {
		t.Helper()
		if got := sub.x.CachedObjects(); got > size {
			t.Fatalf("%s: CachedObjects %d before reads, want <= %d", when, got, size)
		}
		for i, k := range sub.x.ListKeys() {
			obj, ok, err := sub.x.GetByKey(k)
			if err != nil || !ok {
				t.Fatalf("%s: GetByKey(%q): %v %v", when, k, ok, err)
			}
			if i%97 == 0 {
				if err := sameObject(pods[k], obj); err != nil {
					t.Fatalf("%s: %s: %v", when, k, err)
				}
			}
		}
		if got := sub.x.CachedObjects(); got > size {
			t.Fatalf("%s: CachedObjects %d after reading %d objects, want <= %d", when, got, n, size)
		}
		if l := sub.x.List(); len(l) != n {
			t.Fatalf("%s: List returned %d", when, len(l))
		}
		if objs, err := sub.x.ByIndex(cache.NamespaceIndex, "ns-3"); err != nil || len(objs) != n/10 {
			t.Fatalf("%s: ByIndex: %d %v", when, len(objs), err)
		}
		if got := sub.x.CachedObjects(); got > size {
			t.Fatalf("%s: CachedObjects %d after List and ByIndex, want <= %d", when, got, size)
		}
	}
	readAll("after Flush")
	sub.reopen()
	readAll("after reopen")
}

// heapInUse returns the live heap after a full collection.
func heapInUse() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestHeapPerObject measures the heap a warm start (Open of a written
// file) costs per object in both modes, against client-go's indexer
// holding the same (decoded) objects. It only logs, except for a generous
// bound: the bounded mode must cost under 25% of the full mode.
func TestHeapPerObject(t *testing.T) {
	// Not parallel: it measures the whole process's heap.
	n := 3000
	if testing.Short() {
		n = 1000
	}
	ixs := func() cache.Indexers {
		return cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc, "node": nodeIndexFunc}
	}
	sub := newSubject(t, subjectConfig{}, ixs())
	var list []any
	for i := range n {
		list = append(list, testobj.Pod(i, 30, 10, "1"))
	}
	if err := sub.x.Replace(list, "1"); err != nil {
		t.Fatal(err)
	}
	sub.close()
	list = nil

	per := map[string]float64{}
	for _, mode := range []indexer.Mode{indexer.Full, indexer.Bounded} {
		sub.cfg.mode = mode
		before := heapInUse()
		sub.open(ixs())
		// A Full warm load decodes in the background; both modes check
		// the loaded index values in the background.
		<-sub.x.Decoded()
		<-sub.x.IndexesVerified()
		after := heapInUse()
		if sub.x.Len() != n {
			t.Fatalf("%s: %d objects", modeName(mode), sub.x.Len())
		}
		per[modeName(mode)] = (float64(after) - float64(before)) / float64(n)
		sub.close()
	}
	// client-go holding the objects as a reflector would hand them over:
	// decoded from the wire (here, from the file) after the baseline.
	raw := make([]*store.Record, 0, n)
	if err := func() error {
		db, err := store.Open(sub.path, &store.Options{ReadOnly: true})
		if err != nil {
			return err
		}
		defer db.Close()
		return db.View(func(tx *store.Tx) error {
			return tx.ForEach(informerName, func(_ string, r *store.Record) error {
				raw = append(raw, r)
				return nil
			})
		})
	}(); err != nil {
		t.Fatal(err)
	}
	sub.cfg.mode = indexer.Full
	sub.open(ixs()) // for its codec
	c := sub.x.Codec()
	before := heapInUse()
	ref := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, ixs())
	for _, r := range raw {
		obj, err := c.Decode("", r)
		if err != nil {
			t.Fatal(err)
		}
		if err := ref.Add(obj); err != nil {
			t.Fatal(err)
		}
	}
	after := heapInUse()
	per["client-go"] = (float64(after) - float64(before)) / float64(n)
	runtime.KeepAlive(ref)
	runtime.KeepAlive(raw)

	t.Logf("heap per object, %d Pods (~2 KB protobuf each): client-go %.0f B, full %.0f B (%.2fx), bounded %.0f B (%.3fx of client-go, %.3fx of full)",
		n, per["client-go"], per["full"], per["full"]/per["client-go"],
		per["bounded"], per["bounded"]/per["client-go"], per["bounded"]/per["full"])
	if per["bounded"] >= 0.25*per["full"] {
		t.Errorf("bounded mode costs %.0f B per object, not under 25%% of full mode's %.0f B", per["bounded"], per["full"])
	}
}
