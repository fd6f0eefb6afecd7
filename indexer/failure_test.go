package indexer_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer/indexer"
	"github.com/boltinformer/boltinformer/internal/testobj"
	"github.com/boltinformer/boltinformer/store"
)

var errInjected = errors.New("injected commit failure")

// failingDB returns store options whose BeforeCommit hook fails every
// commit while *fail is set.
func failingDB(fail *atomic.Bool) *store.Options {
	return &store.Options{BeforeCommit: func() error {
		if fail.Load() {
			return errInjected
		}
		return nil
	}}
}

// mutateDuringOutage applies, to both indexers, updates that move Pods,
// deletes, adds, an added index and a bookmark, starting at rv.
func mutateDuringOutage(t *testing.T, rv int, ixs ...cache.Indexer) int {
	t.Helper()
	for i := 0; i < 40; i += 4 {
		rv++
		p := testobj.Pod(i, 4, 3, strconv.Itoa(rv))
		p.Spec.NodeName = "node-outage"
		p.Status.Phase = corev1.PodFailed
		applyBoth(t, func(ix cache.Indexer) error { return ix.Update(p) }, ixs...)
	}
	for i := 1; i < 40; i += 8 {
		rv++
		p := testobj.Pod(i, 4, 3, strconv.Itoa(rv))
		applyBoth(t, func(ix cache.Indexer) error { return ix.Delete(p) }, ixs...)
	}
	for i := 100; i < 105; i++ {
		rv++
		p := testobj.Pod(i, 4, 3, strconv.Itoa(rv))
		applyBoth(t, func(ix cache.Indexer) error { return ix.Add(p) }, ixs...)
	}
	applyBoth(t, func(ix cache.Indexer) error {
		if _, ok := ix.GetIndexers()["phase"]; ok {
			return nil
		}
		return ix.AddIndexers(cache.Indexers{"phase": phaseIndexFunc})
	}, ixs...)
	rv++
	applyBoth(t, func(ix cache.Indexer) error { ix.Bookmark(strconv.Itoa(rv)); return nil }, ixs...)
	return rv
}

func fillPods(t *testing.T, n int, rv string, ixs ...cache.Indexer) {
	t.Helper()
	var list []any
	for i := range n {
		list = append(list, testobj.Pod(i, 4, 3, rv))
	}
	applyBoth(t, func(ix cache.Indexer) error { return ix.Replace(append([]any(nil), list...), rv) }, ixs...)
}

// TestCommitFailure fails every commit for a while: memory keeps serving
// the applied state, the saved resourceVersion does not advance and
// CommitError reports the failure (while the committer's own retries fail
// too); once commits succeed again, Flush writes everything and the file
// matches memory.
func TestCommitFailure(t *testing.T) {
	for _, mode := range []indexer.Mode{indexer.Full, indexer.Bounded} {
		t.Run(modeName(mode), func(t *testing.T) {
			t.Parallel()
			var fail atomic.Bool
			ref := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, testIndexers())
			sub := newSubject(t, subjectConfig{
				mode: mode, cacheSize: 4, dbOpts: failingDB(&fail),
				committer: &store.CommitterOptions{MaxOps: 5, MaxDelay: time.Millisecond, MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond},
			}, testIndexers())
			fillPods(t, 60, "10", ref, sub.x)
			sub.flush()
			if rv := sub.x.SavedState().ResourceVersion; rv != "10" {
				t.Fatalf("saved rv %q, want 10", rv)
			}

			fail.Store(true)
			rv := mutateDuringOutage(t, 10, ref, sub.x)
			err := sub.x.Flush(context.Background())
			if !errors.Is(err, errInjected) {
				t.Fatalf("Flush during the outage: %v, want the injected error", err)
			}
			time.Sleep(30 * time.Millisecond) // background retries fail too
			rv = mutateDuringOutage(t, rv, ref, sub.x)
			if err := sub.x.Flush(context.Background()); !errors.Is(err, errInjected) {
				t.Fatalf("second Flush during the outage: %v", err)
			}
			if err := sub.x.CommitError(); !errors.Is(err, errInjected) {
				t.Fatalf("CommitError during the outage: %v", err)
			}
			if got := sub.x.SavedState().ResourceVersion; got != "10" {
				t.Fatalf("saved rv advanced to %q during the outage", got)
			}
			if got := sub.x.ResourceVersion(); got != strconv.Itoa(rv) {
				t.Fatalf("applied rv %q, want %d", got, rv)
			}
			if err := diffIndexers(ref, sub.x, diffOpts{probes: defaultProbes()}); err != nil {
				t.Fatalf("memory during the outage: %v", err)
			}
			// The file still holds exactly the state as of rv 10.
			checkFileState(t, sub.db, "10", 60)

			fail.Store(false)
			sub.flush()
			if err := sub.x.CommitError(); err != nil {
				t.Fatalf("CommitError after recovery: %v", err)
			}
			if got := sub.x.SavedState().ResourceVersion; got != strconv.Itoa(rv) {
				t.Fatalf("saved rv %q after recovery, want %d", got, rv)
			}
			mustCheck(t, sub.db)
			sub.reopen()
			if err := diffIndexers(ref, sub.x, diffOpts{probes: defaultProbes()}); err != nil {
				t.Fatalf("file after recovery: %v", err)
			}
			assertDiskIndexes(t, sub.db, ref)
		})
	}
}

// checkFileState checks the saved state record and object count.
func checkFileState(t *testing.T, db *store.DB, rv string, objects int) {
	t.Helper()
	err := db.View(func(tx *store.Tx) error {
		st, err := tx.State(informerName)
		if err != nil {
			return err
		}
		n := 0
		if err := tx.ForEachRaw(informerName, func(string, []byte) error { n++; return nil }); err != nil {
			return err
		}
		if st == nil || st.ResourceVersion != rv || n != objects || st.Objects != int64(objects) {
			return errors.New("file state differs")
		}
		return nil
	})
	if err != nil {
		t.Fatalf("file: %v (want rv %s, %d objects)", err, rv, objects)
	}
}

// TestCommitFailureThenClose closes the indexer during an outage: Close
// reports the error and the file holds exactly the state of the last
// successful commit, which a reopen serves (the resumed watch would
// deliver the rest again).
func TestCommitFailureThenClose(t *testing.T) {
	for _, mode := range []indexer.Mode{indexer.Full, indexer.Bounded} {
		t.Run(modeName(mode), func(t *testing.T) {
			t.Parallel()
			var fail atomic.Bool
			before := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, testIndexers())
			sub := newSubject(t, subjectConfig{mode: mode, cacheSize: 4, dbOpts: failingDB(&fail)}, testIndexers())
			fillPods(t, 60, "10", before, sub.x)
			sub.flush()
			fail.Store(true)
			mutateDuringOutage(t, 10, sub.x)
			if err := sub.x.Close(); !errors.Is(err, errInjected) {
				t.Fatalf("Close during the outage: %v, want the injected error", err)
			}
			sub.x = nil
			fail.Store(false)
			mustCheck(t, sub.db)
			if err := sub.db.Close(); err != nil {
				t.Fatal(err)
			}
			sub.open(testIndexers())
			if err := diffIndexers(before, sub.x, diffOpts{probes: defaultProbes()}); err != nil {
				t.Fatalf("file after a failed close: %v", err)
			}
			if rv := sub.x.SavedState().ResourceVersion; rv != "10" {
				t.Fatalf("saved rv %q, want 10", rv)
			}
		})
	}
}

// TestCommitRacingAddIndexers runs AddIndexers between the committer
// taking a batch and the commit's outcome (a failure, or a success): the
// objects of the batch must reach the file, with the new index's values.
func TestCommitRacingAddIndexers(t *testing.T) {
	for _, outcome := range []error{errInjected, nil} {
		for _, mode := range []indexer.Mode{indexer.Full, indexer.Bounded} {
			t.Run(fmt.Sprintf("%s/commit-error=%v", modeName(mode), outcome), func(t *testing.T) {
				t.Parallel()
				var block atomic.Bool
				entered, release := make(chan struct{}), make(chan error)
				dbOpts := &store.Options{BeforeCommit: func() error {
					if block.Load() {
						entered <- struct{}{}
						return <-release
					}
					return nil
				}}
				ref := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, testIndexers())
				sub := newSubject(t, subjectConfig{
					mode: mode, cacheSize: 2, dbOpts: dbOpts,
					// Nothing commits in the background: only the test's Flush calls.
					shared: func(db *store.DB) *store.Committer { return store.NewCommitter(db, nil) },
				}, testIndexers())
				fillPods(t, 10, "10", ref, sub.x)
				sub.flush()
				for i := 10; i < 15; i++ { // new objects, and changed ones
					applyBoth(t, func(ix cache.Indexer) error { return ix.Add(testobj.Pod(i, 4, 3, "11")) }, ref, sub.x)
				}
				applyBoth(t, func(ix cache.Indexer) error { return ix.Update(testobj.Pod(3, 4, 3, "12")) }, ref, sub.x)

				block.Store(true)
				flushed := make(chan error, 1)
				go func() { flushed <- sub.x.Flush(context.Background()) }()
				<-entered // the batch is taken and being committed
				applyBoth(t, func(ix cache.Indexer) error {
					return ix.AddIndexers(cache.Indexers{"phase": phaseIndexFunc})
				}, ref, sub.x)
				block.Store(false)
				release <- outcome
				if err := <-flushed; !errors.Is(err, outcome) {
					t.Fatalf("Flush: %v, want %v", err, outcome)
				}
				if err := diffIndexers(ref, sub.x, diffOpts{probes: defaultProbes()}); err != nil {
					t.Fatalf("memory after the commit: %v", err)
				}
				sub.flush()
				sub.reopen()
				if err := diffIndexers(ref, sub.x, diffOpts{probes: defaultProbes()}); err != nil {
					t.Fatalf("file after recovery: %v", err)
				}
				assertDiskIndexes(t, sub.db, ref)
			})
		}
	}
}
