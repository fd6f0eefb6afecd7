package indexer_test

import (
	"context"
	"fmt"
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer/indexer"
	"github.com/boltinformer/boltinformer/store"
)

// checkReadConsistency reads from ix the way listers do and checks what
// holds at any instant: an object is returned under its own key and under
// index values it has.
func checkReadConsistency(ix cache.Indexer, r *rand.Rand) error {
	for _, k := range ix.ListKeys() {
		if r.Intn(4) > 0 {
			continue
		}
		obj, ok, err := ix.GetByKey(k)
		if err != nil {
			return fmt.Errorf("GetByKey(%q): %w", k, err)
		}
		if ok && keyOf(obj) != k {
			return fmt.Errorf("GetByKey(%q) returned %s", k, describe(obj))
		}
	}
	for _, v := range ix.ListIndexFuncValues("node") {
		objs, err := ix.ByIndex("node", v)
		if err != nil {
			return err
		}
		for _, o := range objs {
			if n := o.(*corev1.Pod).Spec.NodeName; n != v {
				return fmt.Errorf("ByIndex(node, %q) returned %s on node %q", v, describe(o), n)
			}
		}
	}
	for _, ns := range histNamespaces {
		objs, err := ix.Index(cache.NamespaceIndex, &corev1.Pod{})
		if ns != "" {
			objs, err = ix.ByIndex(cache.NamespaceIndex, ns)
		}
		if err != nil {
			return err
		}
		for _, o := range objs {
			if m, _ := meta.Accessor(o); m.GetNamespace() != ns {
				return fmt.Errorf("namespace %q query returned %s", ns, describe(o))
			}
		}
	}
	if l := ix.List(); len(l) > 4*histNames*len(histNamespaces) {
		return fmt.Errorf("List returned %d objects", len(l))
	}
	return nil
}

// TestConcurrentReadersAndWriters applies a random history from one
// goroutine (as the informer loop does) while readers query, a flusher
// flushes and the committer commits in the background; readers check
// per-instant consistency, and the end state (and the reopened file) must
// equal client-go's after the same history. Run it with -race.
func TestConcurrentReadersAndWriters(t *testing.T) {
	ops := 1500
	if raceEnabled || testing.Short() {
		ops = 400
	}
	for _, mode := range []indexer.Mode{indexer.Full, indexer.Bounded} {
		t.Run(modeName(mode), func(t *testing.T) {
			t.Parallel()
			ref := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, testIndexers())
			sub := newSubject(t, subjectConfig{
				mode: mode, cacheSize: 5, dbOpts: &store.Options{NoSync: true},
				committer: &store.CommitterOptions{MaxOps: 8, MaxDelay: time.Millisecond},
			}, testIndexers())
			x := sub.x
			var done atomic.Bool
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for g := range 3 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := rand.New(rand.NewSource(int64(g)))
					for !done.Load() {
						if err := checkReadConsistency(x, r); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !done.Load() {
					if err := x.Flush(context.Background()); err != nil {
						errs <- err
						return
					}
					time.Sleep(time.Millisecond)
				}
			}()
			h := &history{r: rand.New(rand.NewSource(42)), ref: ref, last: map[string]*corev1.Pod{}}
			for i := range ops {
				s, _ := h.next()
				if want, got := s.do(ref), s.do(x); want != got {
					t.Errorf("step %d (%s): client-go returned %q, ours %q", i, s.name, want, got)
					break
				}
			}
			done.Store(true)
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if err := diffIndexers(ref, x, diffOpts{probes: defaultProbes()}); err != nil {
				t.Fatal(err)
			}
			sub.reopen()
			if err := diffIndexers(ref, sub.x, diffOpts{probes: defaultProbes()}); err != nil {
				t.Fatalf("after reopen: %v", err)
			}
		})
	}
}

// TestSharedCommitter runs two informers (Pods and Nodes) in one file with
// one committer: one Flush commits both, each keeps its own state record,
// and both reopen intact.
func TestSharedCommitter(t *testing.T) {
	for _, mode := range []indexer.Mode{indexer.Full, indexer.Bounded} {
		t.Run(modeName(mode), func(t *testing.T) {
			t.Parallel()
			path := t.TempDir() + "/cache.db"
			open := func() (*store.DB, *store.Committer, func(), *indexer.Indexer, *indexer.Indexer) {
				db, err := store.Open(path, nil)
				if err != nil {
					t.Fatal(err)
				}
				c := store.NewCommitter(db, &store.CommitterOptions{MaxOps: 10, MaxDelay: 5 * time.Millisecond})
				ctx, cancel := context.WithCancel(context.Background())
				stopped := make(chan struct{})
				go func() { defer close(stopped); c.Run(ctx) }()
				pods, err := indexer.Open(db, "pods", testIndexers(), &indexer.Options{Example: &corev1.Pod{}, Mode: mode, CacheSize: 3, Committer: c})
				if err != nil {
					t.Fatal(err)
				}
				nodes, err := indexer.Open(db, "nodes", testIndexers(), &indexer.Options{Example: &corev1.Node{}, Mode: mode, CacheSize: 3, Committer: c})
				if err != nil {
					t.Fatal(err)
				}
				return db, c, func() { cancel(); <-stopped }, pods, nodes
			}
			refPods := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, testIndexers())
			refNodes := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, testIndexers())
			db, _, stop, pods, nodes := open()
			for i := range 30 {
				applyBoth(t, func(ix cache.Indexer) error { return ix.Add(newPod("ns-a", fmt.Sprintf("p%d", i), fmt.Sprint(100+i))) }, refPods, pods)
				applyBoth(t, func(ix cache.Indexer) error {
					return ix.Add(newNode(fmt.Sprintf("n%d", i), fmt.Sprint(500+i), "zone", fmt.Sprint(i%3)))
				}, refNodes, nodes)
			}
			applyBoth(t, func(ix cache.Indexer) error { return ix.Delete(newNode("n3", "600")) }, refNodes, nodes)
			if err := pods.Flush(context.Background()); err != nil { // commits both
				t.Fatal(err)
			}
			if p, n := pods.SavedState().ResourceVersion, nodes.SavedState().ResourceVersion; p != "129" || n != "600" {
				t.Fatalf("saved rvs: pods %q nodes %q", p, n)
			}
			for _, x := range []*indexer.Indexer{pods, nodes} {
				if err := x.Close(); err != nil {
					t.Fatal(err)
				}
			}
			stop()
			mustCheck(t, db)
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			db, _, stop, pods, nodes = open()
			defer func() { _ = pods.Close(); _ = nodes.Close(); stop(); _ = db.Close() }()
			mustCheck(t, db)
			if err := diffIndexers(refPods, pods, diffOpts{probes: defaultProbes()}); err != nil {
				t.Fatalf("pods: %v", err)
			}
			if err := diffIndexers(refNodes, nodes, diffOpts{probes: defaultProbes()}); err != nil {
				t.Fatalf("nodes: %v", err)
			}
		})
	}
}

// TestFreshStart opens a file holding old data with Options.Fresh: the
// indexer starts empty, the old data stays on disk until the first Replace
// commits, and then only the new list is there.
func TestFreshStart(t *testing.T) {
	for _, mode := range []indexer.Mode{indexer.Full, indexer.Bounded} {
		t.Run(modeName(mode), func(t *testing.T) {
			t.Parallel()
			old := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, testIndexers())
			sub := newSubject(t, subjectConfig{mode: mode, cacheSize: 3}, testIndexers())
			fillPods(t, 40, "10", old, sub.x)
			sub.close()

			openFresh := func() {
				db, err := store.Open(sub.path, nil)
				if err != nil {
					t.Fatal(err)
				}
				sub.db = db
				x, err := indexer.Open(db, informerName, testIndexers(), &indexer.Options{Example: &corev1.Pod{}, Mode: mode, CacheSize: 3, Fresh: true})
				if err != nil {
					t.Fatal(err)
				}
				sub.x = x
			}
			openFresh()
			empty := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, testIndexers())
			if err := diffIndexers(empty, sub.x, diffOpts{}); err != nil {
				t.Fatalf("fresh indexer: %v", err)
			}
			// Events before the first list are served but not written.
			applyBoth(t, func(ix cache.Indexer) error { return ix.Add(newPod("ns-new", "early", "11")) }, empty, sub.x)
			if err := diffIndexers(empty, sub.x, diffOpts{}); err != nil {
				t.Fatal(err)
			}
			sub.close()
			sub.open(testIndexers())
			if err := diffIndexers(old, sub.x, diffOpts{probes: defaultProbes()}); err != nil {
				t.Fatalf("old data must survive until a list replaces it: %v", err)
			}
			sub.close()

			openFresh()
			ref := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, testIndexers())
			var list []any
			for i := 20; i < 50; i++ { // overlaps the old data, with the same rv
				list = append(list, newPod(fmt.Sprintf("ns-%d", i%4), fmt.Sprintf("pod-%06d", i), "10"))
			}
			applyBoth(t, func(ix cache.Indexer) error { return ix.Replace(append([]any(nil), list...), "20") }, ref, sub.x)
			sub.flush()
			mustCheck(t, sub.db)
			sub.reopen()
			if err := diffIndexers(ref, sub.x, diffOpts{probes: defaultProbes()}); err != nil {
				t.Fatalf("after the first list: %v", err)
			}
		})
	}
}
