package indexer_test

import (
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer/indexer"
)

// The namespace index (client-go's MetaNamespaceIndexFunc) after a warm
// start: its loaded values are checked against the keys, so that its
// reads need not wait for the pass that decodes every object (verify.go,
// checkByKey).

// namespaceReads are the reads of the namespace index, compared with ref:
// ListIndexFuncValues, IndexKeys of every namespace, and ByIndex of one
// (ByIndex decodes the objects it returns).
func namespaceReads(ref, x cache.Indexer, ns string) error {
	name := cache.NamespaceIndex
	wv, gv := sortedCopy(ref.ListIndexFuncValues(name)), sortedCopy(x.ListIndexFuncValues(name))
	if !slices.Equal(wv, gv) {
		return fmt.Errorf("ListIndexFuncValues(%q): want %q, got %q", name, wv, gv)
	}
	for _, v := range wv {
		wk, _ := ref.IndexKeys(name, v)
		gk, err := x.IndexKeys(name, v)
		if err != nil || !slices.Equal(wk, gk) {
			return fmt.Errorf("IndexKeys(%q, %q): want %v, got %v (%v)", name, v, wk, gk, err)
		}
	}
	want, _ := ref.ByIndex(name, ns)
	got, err := x.ByIndex(name, ns)
	if err != nil {
		return fmt.Errorf("ByIndex(%q, %q): %w", name, ns, err)
	}
	wm, wk, _ := byKey(want)
	if len(wk) == 0 {
		return fmt.Errorf("ByIndex(%q, %q): the reference has no objects", name, ns)
	}
	return (&comparer{}).compareObjects(fmt.Sprintf("ByIndex(%q, %q)", name, ns), wm, wk, got, false)
}

// TestRegressionNamespaceIndexReadWaitsForEveryDecode: after a warm start,
// the first read of the namespace index waited until the check of the
// loaded index values had decoded every object (at 100k Pods, the first
// ByIndex of a lister took the whole pass: 2-3 s became 24-28 s on a
// loaded machine). The namespace index's loaded values are now checked
// against the keys: its reads answer right away, decoding only the
// objects they return, with the pass held; the other indexes still wait
// for the pass. In both modes, loaded from the snapshot and from the
// records.
func TestRegressionNamespaceIndexReadWaitsForEveryDecode(t *testing.T) {
	for _, mode := range []indexer.Mode{indexer.Full, indexer.Bounded} {
		for _, snapshot := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/snapshot=%t", modeName(mode), snapshot), func(t *testing.T) {
				ref := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, testIndexers())
				sub := newSubject(t, subjectConfig{mode: mode, cacheSize: 7}, testIndexers())
				loadHistory(t, 300, ref, sub.x)
				sub.close()
				setSnapshot(t, sub.path, snapshot)
				release := indexer.HoldFill()
				defer release()
				sub.open(testIndexers())
				if err := namespaceReads(ref, sub.x, "ns-1"); err != nil {
					t.Fatal(err)
				}
				probe := &corev1.Pod{}
				probe.Namespace = "ns-1"
				want, _ := ref.Index(cache.NamespaceIndex, probe)
				got, err := sub.x.Index(cache.NamespaceIndex, probe)
				if err != nil {
					t.Fatal(err)
				}
				_, wk, _ := byKey(want)
				if _, gk, err := byKey(got); err != nil || !slices.Equal(wk, gk) {
					t.Fatalf("Index(namespace, ns-1): keys %v, want %v (%v)", gk, wk, err)
				}
				if isClosed(sub.x.IndexesVerified()) {
					t.Fatal("the namespace index's reads ran the whole check of the loaded index values")
				}
				if mode == indexer.Full && isClosed(sub.x.Decoded()) {
					t.Fatal("the namespace index's reads decoded every object")
				}
				// Another index waits for the pass (run by the read itself,
				// the background one being held).
				if err := sameIndexReads(ref, sub.x, "node"); err != nil {
					t.Fatal(err)
				}
				if !isClosed(sub.x.IndexesVerified()) {
					t.Fatal("a read of the node index did not wait for the check")
				}
				release()
				if err := diffIndexers(ref, sub.x, diffOpts{probes: defaultProbes()}); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// otherNamespaceIndexFunc is what a changed function under the name
// "namespace" may have stored: not the namespace.
func otherNamespaceIndexFunc(obj any) ([]string, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, fmt.Errorf("namespace index: %w", err)
	}
	if m.GetName() == "pod-000005" {
		return []string{"elsewhere"}, nil
	}
	return []string{m.GetNamespace()}, nil
}

// TestNamespaceIndexStoredByAnotherFunction: the file's "namespace" values
// were written by another function (one object under another value); the
// indexer opened with MetaNamespaceIndexFunc finds the key check failing
// and its reads wait for the pass, which fixes the value: the reads are
// right at once, with the pass held. The other way round (the file
// written by MetaNamespaceIndexFunc, opened with another function under
// that name), the key check does not apply: the reads wait too.
func TestNamespaceIndexStoredByAnotherFunction(t *testing.T) {
	other := func() cache.Indexers {
		ix := testIndexers()
		ix[cache.NamespaceIndex] = otherNamespaceIndexFunc
		return ix
	}
	for _, c := range []struct {
		name          string
		written, read func() cache.Indexers
	}{
		{"stored-by-another", other, testIndexers},
		{"read-by-another", testIndexers, other},
	} {
		for _, mode := range []indexer.Mode{indexer.Full, indexer.Bounded} {
			t.Run(c.name+"/"+modeName(mode), func(t *testing.T) {
				ref := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, c.read())
				sub := newSubject(t, subjectConfig{mode: mode, cacheSize: 7}, c.written())
				loadHistory(t, 100, ref, sub.x)
				sub.close()
				release := indexer.HoldFill()
				defer release()
				sub.open(c.read())
				if err := sameIndexReads(ref, sub.x, cache.NamespaceIndex); err != nil {
					t.Fatal(err)
				}
				if !isClosed(sub.x.IndexesVerified()) {
					t.Fatal("the namespace index answered before the check of the loaded values")
				}
				release()
				sub.flush()
				mustCheck(t, sub.db)
				assertDiskIndexes(t, sub.db, ref)
			})
		}
	}
}

// TestNamespaceIndexClusterScoped: cluster-scoped objects have the
// namespace "" under MetaNamespaceIndexFunc, which the keys (without a
// '/') confirm.
func TestNamespaceIndexClusterScoped(t *testing.T) {
	ix := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
	ref := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, ix)
	sub := newSubject(t, subjectConfig{example: &corev1.Node{}}, ix)
	for i := range 50 {
		n := newNode(fmt.Sprintf("node-%d", i), "10")
		if err := ref.Add(n); err != nil {
			t.Fatal(err)
		}
		if err := sub.x.Add(n); err != nil {
			t.Fatal(err)
		}
	}
	sub.close()
	release := indexer.HoldFill()
	defer release()
	sub.open(ix)
	// ByIndex would decode them all: the reads that decode nothing.
	if w, g := ref.ListIndexFuncValues(cache.NamespaceIndex), sub.x.ListIndexFuncValues(cache.NamespaceIndex); !slices.Equal(w, g) {
		t.Fatalf("ListIndexFuncValues: want %q, got %q", w, g)
	}
	wk, _ := ref.IndexKeys(cache.NamespaceIndex, "")
	if gk, err := sub.x.IndexKeys(cache.NamespaceIndex, ""); err != nil || !slices.Equal(wk, gk) {
		t.Fatalf("IndexKeys(namespace, \"\"): want %v, got %v (%v)", wk, gk, err)
	}
	if isClosed(sub.x.IndexesVerified()) {
		t.Fatal("the namespace index's reads ran the whole check of the loaded index values")
	}
}
