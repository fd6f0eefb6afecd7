package boltinformer_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/internal/testobj"
	"github.com/boltinformer/boltinformer/store"
)

// nodeIndexers index Pods by namespace and by node, with byNode as the
// "node" index function.
func nodeIndexers(byNode func(p *corev1.Pod) []string) cache.Indexers {
	return cache.Indexers{
		cache.NamespaceIndex: cache.MetaNamespaceIndexFunc,
		"node": func(obj any) ([]string, error) {
			p, ok := obj.(*corev1.Pod)
			if !ok {
				return nil, nil
			}
			return byNode(p), nil
		},
	}
}

// TestRegressionIndexFuncChangedAcrossRestart: an agent upgraded with
// another "node" index function restarts warm. Its listers answered
// ByIndex and IndexKeys with the values the old function stored in the
// file, in both memory modes, and kept them on disk; now they answer with
// the new function's values at once (before Run, before any call to the
// server) and the file is rewritten, so a third start reads them and the
// store's Check is clean.
func TestRegressionIndexFuncChangedAcrossRestart(t *testing.T) {
	oldFunc := func(p *corev1.Pod) []string { return []string{p.Spec.NodeName} }
	newFunc := func(p *corev1.Pod) []string { return []string{"rack-of-" + p.Spec.NodeName, "any"} }
	for _, mem := range []boltinformer.MemoryMode{boltinformer.FullMemory, boltinformer.BoundedMemory} {
		t.Run(fmt.Sprintf("bounded=%t", mem == boltinformer.BoundedMemory), func(t *testing.T) {
			src := newPodSource()
			want := map[string][]string{} // new function's value -> keys
			for i := range 40 {
				obj, err := src.Create(testobj.Pod(i, 3, 4, ""))
				if err != nil {
					t.Fatal(err)
				}
				p := obj.(*corev1.Pod)
				for _, v := range newFunc(p) {
					want[v] = append(want[v], p.Namespace+"/"+p.Name)
				}
			}
			for _, keys := range want {
				sort.Strings(keys)
			}
			path := filepath.Join(t.TempDir(), "cache.db")
			// start opens the file, calls opened (if set) and makes the
			// informer.
			start := func(byNode func(*corev1.Pod) []string, opened func(*boltinformer.DB)) (*boltinformer.DB, *boltinformer.Informer) {
				db, err := boltinformer.Open(path, &boltinformer.Options{Logger: &quietLogger})
				if err != nil {
					t.Fatal(err)
				}
				if opened != nil {
					opened(db)
				}
				inf, err := db.NewInformer("pods", src, &corev1.Pod{}, 0, nodeIndexers(byNode), &boltinformer.InformerOptions{Memory: mem})
				if err != nil {
					t.Fatal(err)
				}
				return db, inf
			}
			check := func(when string, inf *boltinformer.Informer) {
				t.Helper()
				ix := inf.GetIndexer()
				values := ix.ListIndexFuncValues("node")
				sort.Strings(values)
				if w := sortedKeys(want); !slices.Equal(values, w) {
					t.Fatalf("%s: ListIndexFuncValues(node) = %q, want %q", when, values, w)
				}
				for v, keys := range want {
					got, err := ix.IndexKeys("node", v)
					if err != nil || !slices.Equal(got, keys) {
						t.Fatalf("%s: IndexKeys(node, %q) = %v (%v), want %v", when, v, got, err, keys)
					}
					objs, err := ix.ByIndex("node", v)
					if err != nil || len(objs) != len(keys) {
						t.Fatalf("%s: ByIndex(node, %q): %d objects (%v), want %d", when, v, len(objs), err, len(keys))
					}
				}
			}

			db, inf := start(oldFunc, nil)
			stop := runInformer(t, inf)
			waitFor(t, "the cold start to sync", inf.HasSynced)
			stop()
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}

			db, inf = start(newFunc, nil)
			if !inf.Decision().Warm {
				t.Fatalf("second start not warm: %+v", inf.Decision())
			}
			check("warm start with the new function, before Run", inf)
			stop = runInformer(t, inf)
			waitFor(t, "the warm start to sync", inf.HasSynced)
			check("after HasSynced", inf)
			stop()
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}

			// The file the second start closed holds the new values.
			db, inf = start(newFunc, func(db *boltinformer.DB) {
				if probs, err := db.Store().Check(nil); err != nil || len(probs) > 0 {
					t.Fatalf("Check after the rewrite: %v %v", probs, err)
				}
				err := db.Store().View(func(tx *store.Tx) error {
					for v, keys := range want {
						if got := tx.IndexKeys("pods", "node", v); !slices.Equal(got, keys) {
							return fmt.Errorf("index node value %q on disk: %v, want %v", v, got, keys)
						}
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			})
			check("third start", inf)
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}
