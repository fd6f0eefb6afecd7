package indexer_test

import (
	"context"
	"math/rand"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"

	"github.com/boltinformer/boltinformer/indexer"
	"github.com/boltinformer/boltinformer/internal/testobj"
	"github.com/boltinformer/boltinformer/store"
)

// TestPendingEncodesInKeyOrder: Pending's batch, encoded by several
// workers in the background, has one op per key in key order, each the
// record Encode and EncodeRecord would write, with the object's index
// values.
func TestPendingEncodesInKeyOrder(t *testing.T) {
	const n = 777 // several work chunks per worker, and a ragged last one
	s := newSubject(t, subjectConfig{shared: func(db *store.DB) *store.Committer { return store.NewCommitter(db, nil) }}, testIndexers())
	var list []any
	want := map[string]*corev1.Pod{}
	for i := range n {
		p := testobj.Pod(i, 7, 5, "1")
		if i%3 == 0 {
			p.Labels = map[string]string{"app": "a" + strconv.Itoa(i%4), "tier": "t", "zone": "z"}
		}
		want[keyOf(p)] = p
		list = append(list, p)
	}
	rand.New(rand.NewSource(1)).Shuffle(len(list), func(i, j int) { list[i], list[j] = list[j], list[i] })
	if err := s.x.Replace(list, "1"); err != nil {
		t.Fatal(err)
	}
	b, err := s.x.Pending()
	if err != nil || b == nil {
		t.Fatalf("Pending: %v, %v", b, err)
	}
	if b.Encoding == nil {
		t.Fatal("a large batch is not encoded in the background")
	}
	b.Encoding.Wait()
	if len(b.Ops) != n {
		t.Fatalf("%d ops, want %d", len(b.Ops), n)
	}
	if !slices.IsSortedFunc(b.Ops, func(a, b store.Op) int { return strings.Compare(a.Key, b.Key) }) {
		t.Fatal("ops not in key order")
	}
	c := s.x.Codec()
	indexers := s.x.GetIndexers()
	for i, op := range b.Ops {
		p := want[op.Key]
		if p == nil {
			t.Fatalf("op %d: unexpected key %q", i, op.Key)
		}
		r, err := c.Encode(op.Key, p)
		if err != nil {
			t.Fatal(err)
		}
		vals := map[string][]string{}
		for name, f := range indexers {
			v, err := f(p)
			if err != nil {
				t.Fatal(err)
			}
			vals[name] = v
		}
		r.SetIndexed(vals)
		exp, err := store.EncodeRecord(op.Key, r)
		if err != nil {
			t.Fatal(err)
		}
		if string(op.Raw) != string(exp) {
			t.Fatalf("op %d (%s): not the record Encode writes", i, op.Key)
		}
		if !apiequality.Semantic.DeepEqual(op.Record.Indexed, r.Indexed) {
			t.Fatalf("op %d (%s): Indexed %v, want %v", i, op.Key, op.Record.Indexed, r.Indexed)
		}
	}
	s.x.Committed(b, s.db.Commit(b))
	s.reopen()
	if got := len(s.x.ListKeys()); got != n {
		t.Fatalf("%d objects after reopening, want %d", got, n)
	}
}

// TestPendingBufferReuseAfterFailedCommit: a failed commit hands its
// batch's record buffers back for reuse, and the retry, encoded into
// reused memory together with newer mutations, writes every object as it
// is in memory; so do the commits after a successful one.
func TestPendingBufferReuseAfterFailedCommit(t *testing.T) {
	for _, mode := range []indexer.Mode{indexer.Full, indexer.Bounded} {
		t.Run(modeName(mode), func(t *testing.T) {
			var fail atomic.Bool
			s := newSubject(t, subjectConfig{
				mode:   mode,
				dbOpts: failingDB(&fail),
				shared: func(db *store.DB) *store.Committer { return store.NewCommitter(db, nil) },
			}, testIndexers())
			const n = 400
			want := map[string]*corev1.Pod{}
			var list []any
			for i := range n {
				p := testobj.Pod(i, 4, 3, "1")
				want[keyOf(p)] = p
				list = append(list, p)
			}
			if err := s.x.Replace(list, "1"); err != nil {
				t.Fatal(err)
			}
			fail.Store(true)
			for range 3 { // each failure releases the batch's buffers
				if err := s.x.Flush(context.Background()); err == nil {
					t.Fatal("Flush succeeded with the failing hook")
				}
			}
			// Newer mutations, merged with the failed ones: every other Pod
			// moves (and grows), some are deleted.
			rv := 1
			for i := 0; i < n; i += 2 {
				rv++
				p := testobj.Pod(i, 4, 3, strconv.Itoa(rv))
				p.Spec.NodeName = "node-moved"
				p.Annotations = map[string]string{"note": string(make([]byte, 100+i))}
				if i%10 == 0 {
					if err := s.x.Delete(p); err != nil {
						t.Fatal(err)
					}
					delete(want, keyOf(p))
					continue
				}
				if err := s.x.Update(p); err != nil {
					t.Fatal(err)
				}
				want[keyOf(p)] = p
			}
			fail.Store(false)
			s.flush()
			for round := range 2 { // and reuse after a successful commit
				for i := 1; i < n; i += 3 {
					rv++
					p := testobj.Pod(i, 4, 3, strconv.Itoa(rv))
					p.Status.Phase = corev1.PodSucceeded
					p.Labels = map[string]string{"round": strconv.Itoa(round)}
					if err := s.x.Update(p); err != nil {
						t.Fatal(err)
					}
					want[keyOf(p)] = p
				}
				s.flush()
			}
			s.reopen()
			keys := s.x.ListKeys()
			sort.Strings(keys)
			if len(keys) != len(want) {
				t.Fatalf("%d objects after reopening, want %d", len(keys), len(want))
			}
			for _, k := range keys {
				got, ok, err := s.x.GetByKey(k)
				if err != nil || !ok {
					t.Fatalf("%s: %v, %v", k, ok, err)
				}
				if err := sameObject(want[k], got); err != nil {
					t.Fatalf("%s: %v", k, err)
				}
			}
		})
	}
}
