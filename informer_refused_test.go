package boltinformer_test

// Refused calls touch nothing (issue 14, item 2): a NewInformer refused
// with ErrInformerExists or ErrClosed must not join the file's group
// commit, read-modify its buckets or keep a copy of the file.

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/internal/testobj"
)

// byNode indexes Pods by node name.
func byNode(obj any) ([]string, error) {
	if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName != "" {
		return []string{p.Spec.NodeName}, nil
	}
	return nil, nil
}

// checkFile fails the test if store Check finds a problem in db's file.
func checkFile(t testing.TB, db *boltinformer.DB) {
	t.Helper()
	probs, err := db.Store().Check(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range probs {
		t.Errorf("store check: %v", p)
	}
}

func TestRegressionRefusedDuplicateInformerTouchesNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache.db")
	src := newPodSource()
	for i := 0; i < 20; i++ {
		src.Create(testobj.Pod(i, 2, 3, ""))
	}
	indexers := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc, "byNode": byNode}
	db, err := boltinformer.Open(path, &boltinformer.Options{Logger: &quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	live, err := db.NewInformer("pods", src, &corev1.Pod{}, 0, indexers, &boltinformer.InformerOptions{Logger: &quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	stop := runInformer(t, live)
	waitFor(t, "sync", live.HasSynced)
	if err := db.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}

	// The same name with another index set (and a cold identity): refused.
	for _, other := range []cache.Indexers{
		{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
		{},
	} {
		_, err := db.NewInformer("pods", src, &corev1.Pod{}, 0, other, &boltinformer.InformerOptions{Logger: &quietLogger})
		if !errors.Is(err, boltinformer.ErrInformerExists) {
			t.Fatalf("duplicate NewInformer: %v, want ErrInformerExists", err)
		}
		_, err = db.NewInformer("pods", src, &corev1.Pod{}, 0, other, &boltinformer.InformerOptions{ClusterID: "another", Logger: &quietLogger})
		if !errors.Is(err, boltinformer.ErrInformerExists) {
			t.Fatalf("duplicate NewInformer (another cluster): %v, want ErrInformerExists", err)
		}
	}

	// The live informer goes on; its commits and its file stay whole.
	created, err := src.Create(testobj.Pod(100, 2, 3, ""))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new pod", func() bool { return storeHas(live.GetStore(), keyOf(created), rvOf(created)) })
	if err := db.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkFile(t, db)
	if got, err := live.GetIndexer().ByIndex("byNode", "node-1"); err != nil || len(got) != 8 {
		t.Errorf("byNode node-1: %d objects (%v), want 8", len(got), err)
	}
	stop()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	// A warm restart finds the live informer's indexes as it left them.
	db, err = boltinformer.Open(path, &boltinformer.Options{Logger: &quietLogger, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if r := db.Recovery(); r.Quarantined != "" {
		t.Fatalf("file quarantined: %+v", r)
	}
	checkFile(t, db)
	st, _ := fileState(t, db)
	if len(st.Indexes) != 2 {
		t.Errorf("state record names indexes %v, want byNode and namespace", st.Indexes)
	}
	inf, err := db.NewInformer("pods", src, &corev1.Pod{}, 0, indexers, &boltinformer.InformerOptions{Logger: &quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	if !inf.Decision().Warm {
		t.Fatalf("cold restart: %+v", inf.Decision())
	}
	if got, err := inf.GetIndexer().ByIndex("byNode", "node-1"); err != nil || len(got) != 8 {
		t.Errorf("after restart, byNode node-1: %d objects (%v), want 8", len(got), err)
	}
}

func TestRegressionNewInformerAfterCloseTouchesNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache.db")
	db, err := boltinformer.Open(path, &boltinformer.Options{Logger: &quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = db.NewInformer("pods", newPodSource(), &corev1.Pod{}, 0, nil, &boltinformer.InformerOptions{Logger: &quietLogger})
	if !errors.Is(err, boltinformer.ErrClosed) {
		t.Fatalf("NewInformer after Close: %v, want ErrClosed", err)
	}
	copies, _ := filepath.Glob(path + ".corrupt-*")
	if len(copies) > 0 {
		t.Errorf("NewInformer after Close kept copies of the file: %v", copies)
	}
}
