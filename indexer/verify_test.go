package indexer_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"

	bolt "go.etcd.io/bbolt"

	"github.com/boltinformer/boltinformer/indexer"
)

// Index functions changed between two runs under the same names
// (verify.go): the values the file holds were computed by the old ones.

// zoneIndexFunc replaces nodeIndexFunc under the name "node": other
// values, and two (out of order) for the Pods moved by loadHistory.
func zoneIndexFunc(obj any) ([]string, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok || p.Spec.NodeName == "" {
		return nil, nil
	}
	zone := "zone-" + p.Spec.NodeName[len(p.Spec.NodeName)-1:]
	if p.Spec.NodeName == "node-moved" {
		return []string{zone, "moved"}, nil
	}
	return []string{zone}, nil
}

// tierPairIndexFunc replaces labelPairsIndexFunc under the name "labels":
// a subset of its values.
func tierPairIndexFunc(obj any) ([]string, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, fmt.Errorf("tier pair index: %w", err)
	}
	if v, ok := m.GetLabels()["tier"]; ok {
		return []string{"tier=" + v}, nil
	}
	return nil, nil
}

// changedIndexers are testIndexers with three functions changed: "node"
// and "labels" give other values, "none" gives values where the old one
// gave none; "namespace" and "app-twice" are unchanged.
func changedIndexers() cache.Indexers {
	ix := testIndexers()
	ix["node"] = zoneIndexFunc
	ix["labels"] = tierPairIndexFunc
	ix["none"] = phaseIndexFunc
	return ix
}

// setSnapshot keeps (want) or deletes the envelope snapshot the last
// Close wrote into the closed file at path (a file without one is what a
// crash leaves).
func setSnapshot(t *testing.T, path string, want bool) {
	t.Helper()
	updateInformer(t, path, func(inf *bolt.Bucket) error {
		if inf.Get([]byte("snapshot")) == nil {
			return errors.New("Close wrote no envelope snapshot")
		}
		if want {
			return nil
		}
		return inf.Delete([]byte("snapshot"))
	})
}

// TestRegressionIndexFuncChangedUnderSameName: a file written with some
// index functions is opened with other functions under the same names. A
// warm load trusted the stored index values: ByIndex, IndexKeys, Index
// and ListIndexFuncValues kept answering with the old functions' values,
// and the file's index buckets kept them too. Now the warm start checks
// every object's values against the current functions (reads wait for
// it), fixes what differs in memory and rewrites those records and their
// index entries: in both modes, loaded from the envelope snapshot or from
// the records, and the file then says the same to a third start.
func TestRegressionIndexFuncChangedUnderSameName(t *testing.T) {
	for _, mode := range []indexer.Mode{indexer.Full, indexer.Bounded} {
		for _, snapshot := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/snapshot=%t", modeName(mode), snapshot), func(t *testing.T) {
				t.Parallel()
				ref := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, changedIndexers())
				sub := newSubject(t, subjectConfig{mode: mode, cacheSize: 7}, testIndexers())
				loadHistory(t, 300, ref, sub.x)
				sub.close()
				setSnapshot(t, sub.path, snapshot)
				sub.open(changedIndexers())
				// At once, before anything else was read.
				for _, name := range []string{"node", "labels", "none"} {
					if w, g := sortedCopy(ref.ListIndexFuncValues(name)), sortedCopy(sub.x.ListIndexFuncValues(name)); !slices.Equal(w, g) {
						t.Fatalf("ListIndexFuncValues(%q) right after the warm start: want %q, got %q", name, w, g)
					}
				}
				wk, _ := ref.IndexKeys("node", "moved")
				if gk, err := sub.x.IndexKeys("node", "moved"); err != nil || !slices.Equal(wk, gk) {
					t.Fatalf("IndexKeys(node, moved): want %v, got %v (%v)", wk, gk, err)
				}
				if err := diffIndexers(ref, sub.x, diffOpts{probes: defaultProbes()}); err != nil {
					t.Fatalf("after the warm start: %v", err)
				}
				// The fixed values reach the file: records and buckets.
				sub.flush()
				mustCheck(t, sub.db)
				assertDiskIndexes(t, sub.db, ref)
				// A third start reads them (with the snapshot the second
				// start's Close wrote, or from the records).
				sub.close()
				setSnapshot(t, sub.path, snapshot)
				sub.open(changedIndexers())
				if err := diffIndexers(ref, sub.x, diffOpts{probes: defaultProbes()}); err != nil {
					t.Fatalf("after a third start: %v", err)
				}
				assertDiskIndexes(t, sub.db, ref)
			})
		}
	}
}

// lenient makes f what a client-go reference can hold: no values where f
// fails (what our indexer applies when an index function fails).
func lenient(f cache.IndexFunc) cache.IndexFunc {
	return func(obj any) ([]string, error) {
		v, err := f(obj)
		if err != nil {
			return nil, nil
		}
		return v, nil
	}
}

// failingAppIndexFunc replaces labelPairsIndexFunc under the name
// "labels": it fails for the Pods of namespace ns-1 and gives the app
// label of the others.
func failingAppIndexFunc(obj any) ([]string, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, fmt.Errorf("app index: %w", err)
	}
	if m.GetNamespace() == "ns-1" {
		return nil, errors.New("app index: ns-1 is not indexed")
	}
	return []string{"app=" + m.GetLabels()["app"]}, nil
}

// sameIndexReads compares the index reads that take no probe object,
// index by index: values, keys per value, and the keys of ByIndex.
func sameIndexReads(want, got cache.Indexer, names ...string) error {
	for _, name := range names {
		wv, gv := sortedCopy(want.ListIndexFuncValues(name)), sortedCopy(got.ListIndexFuncValues(name))
		if !slices.Equal(wv, gv) {
			return fmt.Errorf("ListIndexFuncValues(%q): want %q, got %q", name, wv, gv)
		}
		for _, v := range wv {
			wk, _ := want.IndexKeys(name, v)
			gk, err := got.IndexKeys(name, v)
			if err != nil || !slices.Equal(wk, gk) {
				return fmt.Errorf("IndexKeys(%q, %q): want %v, got %v (%v)", name, v, wk, gk, err)
			}
			objs, err := got.ByIndex(name, v)
			if err != nil {
				return fmt.Errorf("ByIndex(%q, %q): %w", name, v, err)
			}
			_, bk, err := byKey(objs)
			if err != nil || !slices.Equal(sortedCopy(wk), bk) {
				return fmt.Errorf("ByIndex(%q, %q): keys %v, want %v (%v)", name, v, bk, wk, err)
			}
		}
	}
	return nil
}

// TestRegressionIndexFuncChangedToFailing: the function changed under the
// same name fails for some of the loaded objects. They have no values for
// that index, in memory and in the file, instead of the old function's.
func TestRegressionIndexFuncChangedToFailing(t *testing.T) {
	for _, mode := range []indexer.Mode{indexer.Full, indexer.Bounded} {
		t.Run(modeName(mode), func(t *testing.T) {
			t.Parallel()
			failing := func() cache.Indexers {
				ix := testIndexers()
				ix["labels"] = failingAppIndexFunc
				return ix
			}
			refIx := testIndexers()
			refIx["labels"] = lenient(failingAppIndexFunc)
			ref := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, refIx)
			sub := newSubject(t, subjectConfig{mode: mode, cacheSize: 7}, testIndexers())
			loadHistory(t, 200, ref, sub.x)
			sub.close()
			sub.open(failing())
			names := indexNames(refIx)
			if err := sameIndexReads(ref, sub.x, names...); err != nil {
				t.Fatal(err)
			}
			for _, v := range sub.x.ListIndexFuncValues("labels") {
				keys, _ := sub.x.IndexKeys("labels", v)
				for _, k := range keys {
					if strings.HasPrefix(k, "ns-1/") {
						t.Fatalf("IndexKeys(labels, %q) has %s: the function fails for ns-1", v, k)
					}
				}
			}
			sub.flush()
			mustCheck(t, sub.db)
			assertDiskIndexes(t, sub.db, ref)
			sub.reopenWith(failing())
			if err := sameIndexReads(ref, sub.x, names...); err != nil {
				t.Fatalf("after a third start: %v", err)
			}
		})
	}
}

// TestRelistBeforeIndexCheck: a relist before the warm start's check has
// reached the objects (the fill held) finds them unchanged (same
// resourceVersion and UID) but with other index values under the changed
// functions: their records are rewritten (a relist used to swap them in
// memory only; section 8.2 of docs/RELIABILITY.md fixed that), and the
// check, released after, agrees.
func TestRelistBeforeIndexCheck(t *testing.T) {
	for _, mode := range []indexer.Mode{indexer.Full, indexer.Bounded} {
		t.Run(modeName(mode), func(t *testing.T) {
			ref := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, changedIndexers())
			sub := newSubject(t, subjectConfig{mode: mode, cacheSize: 7}, testIndexers())
			rv := loadHistory(t, 150, ref, sub.x)
			sub.close()
			release := indexer.HoldFill()
			defer release()
			sub.open(changedIndexers())
			if err := sub.x.Replace(ref.List(), rv); err != nil {
				t.Fatal(err)
			}
			sub.flush()
			mustCheck(t, sub.db)
			assertDiskIndexes(t, sub.db, ref)
			release()
			if err := diffIndexers(ref, sub.x, diffOpts{probes: defaultProbes()}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestIndexCheckWithAddIndexers: AddIndexers right after a warm start with
// changed functions (the background check held) backfills the new index
// and leaves every index right, in memory and on disk.
func TestIndexCheckWithAddIndexers(t *testing.T) {
	for _, mode := range []indexer.Mode{indexer.Full, indexer.Bounded} {
		t.Run(modeName(mode), func(t *testing.T) {
			ref := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, changedIndexers())
			sub := newSubject(t, subjectConfig{mode: mode, cacheSize: 7}, testIndexers())
			loadHistory(t, 150, ref, sub.x)
			sub.close()
			release := indexer.HoldFill()
			defer release()
			sub.open(changedIndexers())
			extra := cache.Indexers{"phase2": phaseIndexFunc}
			applyBoth(t, func(ix cache.Indexer) error { return ix.AddIndexers(extra) }, ref, sub.x)
			if !isClosed(sub.x.IndexesVerified()) {
				t.Fatal("IndexesVerified not closed after AddIndexers")
			}
			release()
			if err := diffIndexers(ref, sub.x, diffOpts{probes: defaultProbes()}); err != nil {
				t.Fatal(err)
			}
			sub.flush()
			mustCheck(t, sub.db)
			assertDiskIndexes(t, sub.db, ref)
			sub.reopen()
			if err := diffIndexers(ref, sub.x, diffOpts{probes: defaultProbes()}); err != nil {
				t.Fatalf("after reopen: %v", err)
			}
		})
	}
}

// TestIndexCheckConcurrent: writers and index readers race the check of
// changed functions (run with -race); the end state, in memory and on
// disk, equals client-go's with the new functions.
func TestIndexCheckConcurrent(t *testing.T) {
	for _, mode := range []indexer.Mode{indexer.Full, indexer.Bounded} {
		t.Run(modeName(mode), func(t *testing.T) {
			ref := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, changedIndexers())
			sub := newSubject(t, subjectConfig{mode: mode, cacheSize: 7}, testIndexers())
			loadHistory(t, 600, ref, sub.x)
			sub.close()
			release := indexer.HoldFill()
			defer release()
			sub.open(changedIndexers())
			x := sub.x
			keys := sortedCopy(ref.ListKeys())
			var wg sync.WaitGroup
			for r := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := r; i < 40; i += 2 {
						if _, err := x.IndexKeys("node", fmt.Sprintf("zone-%d", i%3)); err != nil {
							t.Error(err)
							return
						}
						if _, err := x.ByIndex("labels", "tier=web"); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < len(keys); i += 9 {
					obj, _, _ := ref.GetByKey(keys[i])
					p := obj.(*corev1.Pod).DeepCopy()
					p.ResourceVersion = fmt.Sprint(30000 + i)
					p.Spec.NodeName = "node-raced"
					if strings.HasSuffix(keys[i], "5") {
						applyBoth(t, func(ix cache.Indexer) error { return ix.Delete(p) }, ref, x)
					} else {
						applyBoth(t, func(ix cache.Indexer) error { return ix.Update(p) }, ref, x)
					}
				}
			}()
			release()
			wg.Wait()
			<-x.IndexesVerified()
			if err := diffIndexers(ref, x, diffOpts{shallow: true}); err != nil {
				t.Fatal(err)
			}
			sub.flush()
			mustCheck(t, sub.db)
			assertDiskIndexes(t, sub.db, ref)
		})
	}
}

// TestIndexCheckBoundedInitialList: a Bounded indexer's InitialList takes
// over the check from the background pass (held here) and answers with
// every object; the check is done when it returns, the decoded objects
// are not kept, and the values are right, in memory and on disk.
func TestIndexCheckBoundedInitialList(t *testing.T) {
	ref := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, changedIndexers())
	sub := newSubject(t, subjectConfig{mode: indexer.Bounded, cacheSize: 7}, testIndexers())
	loadHistory(t, 700, ref, sub.x)
	sub.close()
	release := indexer.HoldFill()
	defer release()
	sub.open(changedIndexers())
	got := initialList(sub.x)
	if !isClosed(sub.x.IndexesVerified()) {
		t.Fatal("IndexesVerified not closed after InitialList")
	}
	wm, wk, err := byKey(ref.List())
	if err != nil {
		t.Fatal(err)
	}
	if err := (&comparer{}).compareObjects("InitialList", wm, wk, got, false); err != nil {
		t.Fatal(err)
	}
	if n := sub.x.CachedObjects(); n > 7 {
		t.Fatalf("CachedObjects %d after InitialList, want at most the cache size", n)
	}
	release()
	if err := diffIndexers(ref, sub.x, diffOpts{probes: defaultProbes()}); err != nil {
		t.Fatal(err)
	}
	sub.flush()
	mustCheck(t, sub.db)
	assertDiskIndexes(t, sub.db, ref)
}
