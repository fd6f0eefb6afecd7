package indexer_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer/indexer"
	"github.com/boltinformer/boltinformer/store"
)

var errIndexBroken = errors.New("index function broken for this object")

// flakyIndex indexes Pods by their app label, and fails for Pods labelled
// fail=yes, or for every object while broken is set.
type flakyIndex struct{ broken atomic.Bool }

func (f *flakyIndex) fn(obj any) ([]string, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, nil
	}
	if p.Labels["fail"] == "yes" || f.broken.Load() {
		return nil, errIndexBroken
	}
	return []string{p.Labels["app"]}, nil
}

// TestRegressionIndexFuncErrorStoresObject: an index function's error
// never loses an object: Add, Update, Replace, Patch and Transaction store
// it without values in that index (the other indexes have theirs) and
// return an error wrapping ErrIndexFunc; IndexErrors counts such objects
// until a write indexes them; the file holds what memory holds. AddIndexers
// refuses a function that fails; a rebuild at Open does not fail on one.
func TestRegressionIndexFuncErrorStoresObject(t *testing.T) {
	for _, mode := range []indexer.Mode{indexer.Full, indexer.Bounded} {
		t.Run(map[indexer.Mode]string{indexer.Full: "full", indexer.Bounded: "bounded"}[mode], func(t *testing.T) {
			testIndexFuncError(t, mode)
		})
	}
}

func testIndexFuncError(t *testing.T, mode indexer.Mode) {
	path := filepath.Join(t.TempDir(), "cache.db")
	flaky := &flakyIndex{}
	indexers := func() cache.Indexers {
		return cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc, "app": flaky.fn}
	}
	var db *store.DB
	open := func(ix cache.Indexers) *indexer.Indexer {
		t.Helper()
		var err error
		if db, err = store.Open(path, nil); err != nil {
			t.Fatal(err)
		}
		x, err := indexer.Open(db, informerName, ix, &indexer.Options{Example: &corev1.Pod{}, Mode: mode, CacheSize: 2})
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	closeAll := func(x *indexer.Indexer) {
		t.Helper()
		if err := x.Close(); err != nil {
			t.Fatal(err)
		}
		mustCheck(t, db)
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	wantIndexErr := func(what string, err error, keys ...string) {
		t.Helper()
		if !errors.Is(err, indexer.ErrIndexFunc) || !errors.Is(err, errIndexBroken) || indexer.Refused(err) {
			t.Fatalf("%s: %v, want an index function error that stored the object", what, err)
		}
		var got []string
		for _, e := range indexer.IndexFuncErrors(err) {
			if e.Index != "app" {
				t.Errorf("%s: error on index %q, want app", what, e.Index)
			}
			got = append(got, e.Key)
		}
		slices.Sort(got)
		if !slices.Equal(got, keys) {
			t.Errorf("%s: errors for %v, want %v", what, got, keys)
		}
	}
	has := func(x *indexer.Indexer, key, rv string) {
		t.Helper()
		obj, ok, err := x.GetByKey(key)
		if err != nil || !ok || obj.(*corev1.Pod).ResourceVersion != rv {
			t.Fatalf("GetByKey(%s): %v %v, want rv %s", key, ok, err, rv)
		}
	}
	appKeys := func(x *indexer.Indexer, app string) []string {
		t.Helper()
		keys, err := x.IndexKeys("app", app)
		if err != nil {
			t.Fatal(err)
		}
		return keys
	}

	x := open(indexers())
	failing := labeled("app", "web", "fail", "yes")
	// Replace: every object stored, the failing one without an app value.
	err := x.Replace([]any{newPod("ns-a", "a", "1"), newPod("ns-a", "b", "2", failing)}, "2")
	wantIndexErr("Replace", err, "ns-a/b")
	has(x, "ns-a/b", "2")
	if got := appKeys(x, "web"); !slices.Equal(got, []string{"ns-a/a"}) {
		t.Errorf("app=web after Replace: %v", got)
	}
	if got, _ := x.IndexKeys(cache.NamespaceIndex, "ns-a"); len(got) != 2 {
		t.Errorf("the namespace index lost the object: %v", got)
	}
	// Add and Update.
	wantIndexErr("Add", x.Add(newPod("ns-a", "c", "3", failing)), "ns-a/c")
	has(x, "ns-a/c", "3")
	wantIndexErr("Update", x.Update(newPod("ns-a", "a", "4", failing)), "ns-a/a")
	has(x, "ns-a/a", "4")
	if got := x.ResourceVersion(); got != "4" {
		t.Errorf("resourceVersion %s after a stored update, want 4", got)
	}
	if n := x.IndexErrors(); n != 3 {
		t.Errorf("IndexErrors %d, want 3", n)
	}
	// Transaction: the failing update is among the successful ones.
	terr := x.Transaction(
		cache.Transaction{Type: cache.TransactionTypeUpdate, Object: newPod("ns-a", "c", "5")},
		cache.Transaction{Type: cache.TransactionTypeAdd, Object: newPod("ns-a", "d", "6", failing)},
	)
	if terr == nil || !slices.Equal(terr.SuccessfulIndices, []int{0, 1}) || len(terr.Errors) != 1 {
		t.Fatalf("Transaction: %+v, want both applied and one error", terr)
	}
	wantIndexErr("Transaction", terr.Errors[0], "ns-a/d")
	has(x, "ns-a/d", "6")
	// Patch.
	wantIndexErr("Patch", x.Patch([]any{newPod("ns-a", "e", "7", failing)}, []string{"ns-a/d"}, "7"), "ns-a/e")
	has(x, "ns-a/e", "7")
	if got := appKeys(x, "web"); !slices.Equal(got, []string{"ns-a/c"}) {
		t.Errorf("app=web: %v, want ns-a/c", got)
	}
	if n := x.IndexErrors(); n != 3 { // a, b and e; c indexed, d deleted
		t.Errorf("IndexErrors %d, want 3", n)
	}
	// The file holds what memory holds.
	closeAll(x)
	x = open(indexers())
	for key, rv := range map[string]string{"ns-a/a": "4", "ns-a/b": "2", "ns-a/c": "5", "ns-a/e": "7"} {
		has(x, key, rv)
	}
	if got := appKeys(x, "web"); !slices.Equal(got, []string{"ns-a/c"}) {
		t.Errorf("after reopening, app=web: %v, want ns-a/c", got)
	}

	// A function that failed and works again on an unchanged object (a
	// relist with the same resourceVersions) indexes it, on disk too.
	flaky.broken.Store(true)
	list := []any{newPod("ns-a", "a", "4"), newPod("ns-a", "c", "5")}
	wantIndexErr("Replace while broken", x.Replace(slices.Clone(list), "8"), "ns-a/a", "ns-a/c")
	if got := appKeys(x, "web"); len(got) != 0 {
		t.Errorf("app=web while broken: %v", got)
	}
	flaky.broken.Store(false)
	if err := x.Replace(slices.Clone(list), "9"); err != nil {
		t.Fatalf("Replace once fixed: %v", err)
	}
	if n := x.IndexErrors(); n != 0 {
		t.Errorf("IndexErrors %d once every object is indexed, want 0", n)
	}
	closeAll(x)
	x = open(indexers())
	if got := appKeys(x, "web"); !slices.Equal(got, []string{"ns-a/a", "ns-a/c"}) {
		t.Errorf("after reopening, app=web: %v, want both", got)
	}

	// AddIndexers refuses a function that fails, changing nothing.
	if err := x.Update(newPod("ns-a", "f", "10", failing)); !errors.Is(err, indexer.ErrIndexFunc) {
		t.Fatal(err)
	}
	err = x.AddIndexers(cache.Indexers{"app2": flaky.fn})
	if !errors.Is(err, indexer.ErrIndexFunc) {
		t.Errorf("AddIndexers of a failing function: %v, want ErrIndexFunc", err)
	}
	if _, ok := x.GetIndexers()["app2"]; ok {
		t.Error("AddIndexers added the failing index")
	}
	if err := x.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	closeAll(x)
	// A rebuild at Open (an index the file lacks) keeps the object
	// without that value instead of failing.
	ix := indexers()
	ix["app2"] = flaky.fn
	x = open(ix)
	if n := x.IndexErrors(); n != 1 { // ns-a/f, in app and app2
		t.Errorf("IndexErrors %d after a rebuild, want 1", n)
	}
	has(x, "ns-a/f", "10")
	closeAll(x)
}
