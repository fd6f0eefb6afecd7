package indexer_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer/indexer"
	"github.com/boltinformer/boltinformer/store"
)

var errRefused = errors.New("refused by the test transform")

// stripTransform drops managedFields and annotations from Pods (on a
// copy) and refuses Pods labelled refuse=yes.
func stripTransform(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	if p.Labels["refuse"] == "yes" {
		return nil, errRefused
	}
	p = p.DeepCopy()
	p.ManagedFields, p.Annotations = nil, nil
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	p.Labels["transformed"] = "yes"
	return p, nil
}

// transformedIndexFunc indexes by the label the transform sets.
func transformedIndexFunc(obj any) ([]string, error) {
	if p, ok := obj.(*corev1.Pod); ok {
		return []string{p.Labels["transformed"]}, nil
	}
	return nil, nil
}

// TestRegressionIndexerTransform: Options.Transform is client-go's
// cache.WithTransformer for the persisted indexer: every object stored
// (Add, Update, Replace, Transaction) passes it before it is indexed and
// written; an error refuses the object (Replace: the whole list) with
// client-go's wording; the file holds the transformed objects.
func TestRegressionIndexerTransform(t *testing.T) {
	for _, mode := range []indexer.Mode{indexer.Full, indexer.Bounded} {
		t.Run(map[indexer.Mode]string{indexer.Full: "full", indexer.Bounded: "bounded"}[mode], func(t *testing.T) {
			testTransform(t, mode)
		})
	}
}

func testTransform(t *testing.T, mode indexer.Mode) {
	path := filepath.Join(t.TempDir(), "cache.db")
	indexers := func() cache.Indexers { return cache.Indexers{"transformed": transformedIndexFunc} }
	open := func() (*store.DB, *indexer.Indexer) {
		db, err := store.Open(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		x, err := indexer.Open(db, informerName, indexers(), &indexer.Options{Example: &corev1.Pod{}, Mode: mode, CacheSize: 1, Transform: stripTransform})
		if err != nil {
			t.Fatal(err)
		}
		return db, x
	}
	db, x := open()
	ref := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, indexers(), cache.WithTransformer(stripTransform))

	annotated := func(p *corev1.Pod) { p.Annotations = map[string]string{"big": strings.Repeat("x", 100)} }
	listed := []any{newPod("ns-a", "a", "1", annotated), newPod("ns-a", "b", "2", annotated)}
	for name, s := range map[string]cache.Store{"ours": x, "client-go": ref} {
		if err := s.Replace(listed, "2"); err != nil {
			t.Fatalf("%s: Replace: %v", name, err)
		}
		if err := s.Add(newPod("ns-a", "c", "3", annotated)); err != nil {
			t.Fatalf("%s: Add: %v", name, err)
		}
		if err := s.Update(newPod("ns-a", "a", "4", annotated)); err != nil {
			t.Fatalf("%s: Update: %v", name, err)
		}
	}
	if listed[0].(*corev1.Pod).Annotations == nil {
		t.Fatal("Replace rewrote the caller's list")
	}
	if terr := x.Transaction(cache.Transaction{Type: cache.TransactionTypeAdd, Object: newPod("ns-a", "d", "5", annotated)}); terr != nil {
		t.Fatalf("Transaction: %v", terr)
	}
	if err := ref.Add(newPod("ns-a", "d", "5", annotated)); err != nil { // client-go's Transaction skips the transform
		t.Fatal(err)
	}

	// Refusals: the error has client-go's wording and nothing changes.
	refused := newPod("ns-a", "e", "6", labeled("refuse", "yes"))
	for name, s := range map[string]cache.Store{"ours": x, "client-go": ref} {
		err := s.Add(refused)
		if !errors.Is(err, errRefused) || !strings.HasPrefix(err.Error(), "transforming: ") {
			t.Errorf("%s: Add of a refused object: %v", name, err)
		}
		err = s.Replace([]any{newPod("ns-a", "a", "4"), refused}, "6")
		if !errors.Is(err, errRefused) {
			t.Errorf("%s: Replace with a refused object: %v", name, err)
		}
	}
	if terr := x.Transaction(cache.Transaction{Type: cache.TransactionTypeUpdate, Object: refused}); terr == nil || len(terr.SuccessfulIndices) != 0 || !errors.Is(terr.Errors[0], errRefused) {
		t.Errorf("Transaction of a refused object: %v", terr)
	}

	check := func(when string, x *indexer.Indexer) {
		t.Helper()
		if d := diffStores(ref, x); d != "" {
			t.Errorf("%s: differs from client-go's indexer with WithTransformer: %s", when, d)
		}
		got, err := x.ByIndex("transformed", "yes")
		if err != nil || len(got) != 4 {
			t.Errorf("%s: ByIndex(transformed, yes): %d objects (%v), want 4", when, len(got), err)
		}
		for _, o := range got {
			if o.(*corev1.Pod).Annotations != nil {
				t.Errorf("%s: %s stored with its annotations", when, keyOf(o))
			}
		}
	}
	check("in memory", x)
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	mustCheck(t, db)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, x = open()
	defer db.Close()
	defer x.Close()
	check("after reopening", x)
}

// diffStores compares two stores' objects by key ("" when equal).
func diffStores(want, got cache.Store) string {
	var diffs []string
	for _, k := range sortedCopy(want.ListKeys()) {
		w, _, _ := want.GetByKey(k)
		g, ok, err := got.GetByKey(k)
		if err != nil || !ok {
			diffs = append(diffs, "missing "+k)
			continue
		}
		if !apiequality.Semantic.DeepEqual(w, g) {
			diffs = append(diffs, "differs "+k)
		}
	}
	if len(got.ListKeys()) != len(want.ListKeys()) {
		diffs = append(diffs, "extra keys")
	}
	return strings.Join(diffs, ", ")
}
