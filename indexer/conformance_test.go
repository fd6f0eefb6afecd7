package indexer_test

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer/indexer"
	"github.com/boltinformer/boltinformer/store"
)

// A step is one call (or a few) made on both indexers; its result must be
// the same for both.
type step struct {
	name string
	do   func(ix cache.Indexer) string
}

func add(obj any) step {
	return step{"Add " + describe(obj), func(ix cache.Indexer) string { return errResult(ix.Add(obj)) }}
}

func update(obj any) step {
	return step{"Update " + describe(obj), func(ix cache.Indexer) string { return errResult(ix.Update(obj)) }}
}

func del(obj any) step {
	return step{"Delete " + describe(obj), func(ix cache.Indexer) string { return errResult(ix.Delete(obj)) }}
}

func tombstone(key string, last any) step {
	t := cache.DeletedFinalStateUnknown{Key: key, Obj: last}
	return step{"Delete tombstone " + key, func(ix cache.Indexer) string { return errResult(ix.Delete(t)) }}
}

func replace(rv string, objs ...any) step {
	return step{fmt.Sprintf("Replace %d objects rv=%q", len(objs), rv), func(ix cache.Indexer) string {
		return errResult(ix.Replace(append([]any(nil), objs...), rv))
	}}
}

func addIndexers(ixs cache.Indexers) step {
	return step{fmt.Sprintf("AddIndexers %v", indexNames(ixs)), func(ix cache.Indexer) string {
		return errResult(ix.AddIndexers(copyIndexers(ixs)))
	}}
}

func transaction(txns ...cache.Transaction) step {
	return step{fmt.Sprintf("Transaction of %d", len(txns)), func(ix cache.Indexer) string {
		return txnResult(ix.(cache.TransactionStore).Transaction(append([]cache.Transaction(nil), txns...)...))
	}}
}

func bookmark(rv string) step {
	return step{"Bookmark " + rv, func(ix cache.Indexer) string { ix.Bookmark(rv); return "ok" }}
}

var resync = step{"Resync", func(ix cache.Indexer) string { return errResult(ix.Resync()) }}

func getObj(obj any) step {
	return step{"Get " + describe(obj), func(ix cache.Indexer) string {
		o, ok, err := ix.Get(obj)
		if o != nil {
			return fmt.Sprintf("%v %s %s", ok, errResult(err), describe(o))
		}
		return fmt.Sprintf("%v %s", ok, errResult(err))
	}}
}

func txAdd(o any) cache.Transaction {
	return cache.Transaction{Type: cache.TransactionTypeAdd, Object: o}
}
func txUpdate(o any) cache.Transaction {
	return cache.Transaction{Type: cache.TransactionTypeUpdate, Object: o}
}
func txDelete(o any) cache.Transaction {
	return cache.Transaction{Type: cache.TransactionTypeDelete, Object: o}
}

type conformanceCase struct {
	name    string
	example runtime.Object // default *corev1.Pod
	steps   []step
}

func conformanceCases() []conformanceCase {
	p := newPod
	return []conformanceCase{
		{name: "add-update-get", steps: []step{
			add(p("ns-a", "p1", "1")),
			add(p("ns-a", "p2", "2")),
			add(p("ns-b", "p1", "3")),
			add(p("", "solo", "4")), // cluster-scoped key "solo"
			update(p("ns-a", "p1", "5", labeled("app", "db", "tier", "back"))),
			add(p("ns-a", "p2", "2")), // Add of an existing key is an update
			getObj(p("ns-b", "p1", "whatever")),
			getObj(p("ns-z", "absent", "1")),
			getObj(p("", "solo", "4")),
			update(p("ns-c", "new-by-update", "6")), // Update of an absent key adds
		}},
		{name: "objects-move-between-index-values", steps: []step{
			add(p("ns-a", "p1", "1", onNode("node-a"), labeled("app", "web", "tier", "front"))),
			update(p("ns-a", "p1", "2", onNode("node-b"))),
			update(p("ns-a", "p1", "3", onNode(""), labeled())), // no node, no labels: no values
			update(p("ns-a", "p1", "4", onNode("node-a"), labeled("app", "db", "tier", "back", "extra", "1"))),
			add(p("ns-a", "p2", "5", labeled("app", "db"))),
			update(p("ns-a", "p2", "6", labeled("app", "web"))),
			update(p("ns-a", "p2", "7", labeled("app", "web", "tier", "back"))),
			del(p("ns-a", "p1", "8")),
			update(p("ns-a", "p2", "9", onNode("node-c"), labeled("tier", "back"))),
		}},
		{name: "delete", steps: []step{
			add(p("ns-a", "p1", "1")),
			add(p("ns-a", "p2", "2", onNode("node-b"))),
			add(p("ns-b", "p3", "3")),
			add(p("", "solo", "4")),
			del(p("ns-a", "p1", "1")),
			tombstone("ns-a/p2", p("ns-a", "p2", "1")), // stale final state
			tombstone("ns-a/ghost", p("ns-a", "ghost", "1")),
			del(p("ns-z", "absent", "99")), // absent; its resourceVersion still counts
			tombstone("solo", nil),
			del(p("ns-b", "p3", "2")), // a stale object deletes the key too
			add(p("ns-a", "p1", "10")),
		}},
		{name: "replace", steps: []step{
			add(p("ns-a", "p1", "1")),
			add(p("ns-a", "p2", "2")),
			add(p("ns-b", "p3", "3")),
			add(p("ns-b", "p4", "4", onNode("node-b"))),
			add(p("", "p5", "5")),
			replace("100",
				p("ns-a", "p1", "1"),                        // unchanged
				p("ns-a", "p2", "20", onNode("node-c")),     // changed
				p("ns-c", "p6", "21", labeled("app", "x"))), // new; p3, p4, p5 go
			replace("101", p("ns-c", "p6", "21", labeled("app", "x")), p("ns-c", "p6", "22")), // duplicate key: last wins
			replace("102"),
			replace("", p("", "p7", "30")),
			add(p("ns-a", "p8", "31")),
			replace("103", p("ns-a", "p8", "31"), p("", "p7", "30")),
		}},
		{name: "resync-bookmark", steps: []step{
			add(p("ns-a", "p1", "1")),
			resync,
			bookmark("50"),
			resync,
			add(p("ns-a", "p2", "51")),
			bookmark(""),
			bookmark("60"),
		}},
		{name: "add-indexers", steps: []step{
			add(p("ns-a", "p1", "1", inPhase(corev1.PodRunning))),
			add(p("ns-a", "p2", "2", onNode("node-b"), inPhase(corev1.PodPending))),
			add(p("", "solo", "3")),
			addIndexers(cache.Indexers{"phase": phaseIndexFunc}),                        // backfill
			addIndexers(cache.Indexers{"node": nodeIndexFunc}),                          // conflict
			addIndexers(cache.Indexers{"tier": tierIndexFunc, "phase": phaseIndexFunc}), // conflict: tier not added
			update(p("ns-a", "p1", "4", inPhase(corev1.PodSucceeded))),
			add(p("ns-b", "p3", "5", inPhase(corev1.PodPending))),
			addIndexers(cache.Indexers{"tier": tierIndexFunc}),
			update(p("ns-b", "p3", "6", labeled("tier", "back"))),
			del(p("ns-a", "p2", "7")),
			replace("8", p("ns-a", "p1", "4", inPhase(corev1.PodSucceeded)), p("ns-b", "p3", "9", inPhase(corev1.PodFailed))),
		}},
		{name: "add-indexers-empty", steps: []step{
			addIndexers(cache.Indexers{"phase": phaseIndexFunc, "tier": tierIndexFunc}),
			add(p("ns-a", "p1", "1")),
			addIndexers(cache.Indexers{}),
			update(p("ns-a", "p1", "2", labeled("tier", "db"), inPhase(corev1.PodFailed))),
		}},
		{name: "transaction", steps: []step{
			add(p("ns-a", "p1", "1")),
			transaction(
				txAdd(p("ns-a", "p2", "2")),
				txUpdate(p("ns-a", "p1", "3", onNode("node-b"))),
				txDelete(p("ns-a", "ghost", "4")),
				txAdd(p("ns-b", "p3", "5")),
				txDelete(p("ns-a", "p2", "6")),
				txAdd("not an object"), // key error
				txDelete(cache.DeletedFinalStateUnknown{Key: "ns-b/p3", Obj: p("ns-b", "p3", "5")}),
			),
			transaction(
				txUpdate(p("ns-a", "p1", "9", labeled("app", "db"))),
				txAdd(p("", "solo", "10")),
			),
			transaction(),
			transaction(txAdd(42)),
			transaction(
				txAdd(p("ns-c", "p4", "11")),
				txUpdate(p("ns-c", "p4", "12", onNode(""))),
				txDelete(p("ns-a", "p1", "13")),
			),
		}},
		{name: "key-errors", steps: []step{
			add(p("ns-a", "p1", "1")),
			add("not an object"),
			update(42),
			del(struct{}{}),
			getObj("not an object"),
			replace("5", p("ns-a", "p2", "2"), "not an object"), // rejected as a whole
		}},
		{name: "cluster-scoped-nodes", example: &corev1.Node{}, steps: []step{
			add(newNode("node-1", "1", "zone", "a")),
			add(newNode("node-2", "2", "zone", "b", "role", "edge")),
			update(newNode("node-1", "3", "zone", "b")),
			getObj(newNode("node-2", "x")),
			tombstone("node-2", newNode("node-2", "2")),
			replace("10", newNode("node-1", "3", "zone", "b"), newNode("node-3", "4")),
			del(newNode("node-1", "11")),
		}},
	}
}

type variant struct {
	name           string
	mode           indexer.Mode
	reopenEachStep bool
	committer      *store.CommitterOptions
}

func variants() []variant {
	// Committing after every mutation makes background commits race the
	// reads (objects in flight), besides the reopen variants.
	eager := &store.CommitterOptions{MaxOps: 1, MaxDelay: time.Millisecond}
	return []variant{
		{name: "full", mode: indexer.Full, committer: eager},
		{name: "bounded", mode: indexer.Bounded, committer: eager},
		{name: "full/reopen-each-step", mode: indexer.Full, reopenEachStep: true},
		{name: "bounded/reopen-each-step", mode: indexer.Bounded, reopenEachStep: true},
	}
}

// TestConformance runs each case against client-go's indexer and ours and
// compares every read method after every step, and after a final
// Flush+Close+reopen.
func TestConformance(t *testing.T) {
	for _, c := range conformanceCases() {
		for _, v := range variants() {
			t.Run(c.name+"/"+v.name, func(t *testing.T) {
				t.Parallel()
				ref := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, testIndexers())
				sub := newSubject(t, subjectConfig{mode: v.mode, cacheSize: 3, example: c.example, committer: v.committer}, testIndexers())
				o := diffOpts{probes: defaultProbes()}
				for i, s := range c.steps {
					want, got := s.do(ref), s.do(sub.x)
					if want != got {
						t.Fatalf("step %d (%s): client-go returned %q, ours %q", i, s.name, want, got)
					}
					if v.reopenEachStep {
						sub.reopen()
					}
					if err := diffIndexers(ref, sub.x, o); err != nil {
						t.Fatalf("after step %d (%s): %v", i, s.name, err)
					}
				}
				sub.reopen()
				if err := diffIndexers(ref, sub.x, o); err != nil {
					t.Fatalf("after reopen: %v", err)
				}
				if sub.x.Len() != len(ref.ListKeys()) {
					t.Fatalf("Len %d, want %d", sub.x.Len(), len(ref.ListKeys()))
				}
			})
		}
	}
}
