package boltcr

import (
	"path/filepath"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/boltinformer/boltinformer"
)

func req(ns, name string) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}
}

func newTestQueue(t *testing.T, db *boltinformer.DB, name string) *Queue {
	t.Helper()
	rl := workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](time.Millisecond, time.Second)
	return NewQueue(db, &QueueOptions{CheckpointInterval: time.Hour})(name, rl).(*Queue)
}

// TestQueueCheckpointKeepsWhatNeedsWork drives a durable queue as
// controller-runtime's controller does (Get, then Forget on success or an
// add again on failure, then Done) and checks its checkpoint: a request
// reconciled successfully is not in it; one pending, one whose reconcile
// ended in a terminal error (neither forgotten nor added again) and a
// RequeueAfter deadline are; a queue built again from the reopened file
// has them back.
func TestQueueCheckpointKeepsWhatNeedsWork(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache.db")
	db, err := boltinformer.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	q := newTestQueue(t, db, "c1")
	ok, terminal, retried, pending, later, cluster := req("ns", "ok"), req("ns", "terminal"), req("ns", "retried"), req("ns", "pending"), req("ns", "later"), req("", "cluster-scoped")
	q.Add(ok)
	q.Add(terminal)
	q.Add(retried)
	q.AddAfter(later, time.Hour)

	get := func(want reconcile.Request) {
		t.Helper()
		got, _, shutdown := q.GetWithPriority()
		if shutdown || got != want {
			t.Fatalf("Get: %v (shutdown %v), want %v", got, shutdown, want)
		}
	}
	get(ok)
	q.Forget(ok) // success
	q.Done(ok)
	get(terminal)
	q.Done(terminal) // a terminal error: neither forgotten nor added again
	get(retried)
	q.AddRateLimited(retried) // an error: added again before Done
	q.Done(retried)
	q.Add(pending)
	q.Add(cluster)
	if got, want := q.Busy(), 4; got != want {
		t.Fatalf("Busy() = %d, want %d (terminal, retried, pending, cluster-scoped)", got, want)
	}
	q.ShutDown()

	cp, found := db.Checkpoint(QueueCheckpoint("c1"))
	if !found {
		t.Fatal("no checkpoint after ShutDown")
	}
	var now, at []string
	for _, d := range cp.Due {
		if d.At.IsZero() {
			now = append(now, d.Key)
		} else {
			at = append(at, d.Key)
		}
	}
	if want := []string{"cluster-scoped", "ns/pending", "ns/retried", "ns/terminal"}; !slices.Equal(now, want) {
		t.Errorf("due now: %v, want %v", now, want)
	}
	if want := []string{"ns/later"}; !slices.Equal(at, want) {
		t.Errorf("due later: %v, want %v", at, want)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db, err = boltinformer.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	q2 := newTestQueue(t, db, "c1")
	defer q2.ShutDown()
	if got, want := q2.Busy(), 4; got != want {
		t.Errorf("resumed queue: Busy() = %d, want %d", got, want)
	}
	var got []string
	for range 4 {
		r, _, _ := q2.GetWithPriority()
		got = append(got, requestKey(r))
		q2.Forget(r)
		q2.Done(r)
	}
	slices.Sort(got)
	if want := []string{"cluster-scoped", "ns/pending", "ns/retried", "ns/terminal"}; !slices.Equal(got, want) {
		t.Errorf("resumed queue handed out %v, want %v", got, want)
	}
	if n := q2.Busy(); n != 0 {
		t.Errorf("after every request succeeded: Busy() = %d", n)
	}
}

// TestRequestKeyRoundTrip: a request's key in the checkpoint parses back;
// a key that does not parse is refused.
func TestRequestKeyRoundTrip(t *testing.T) {
	for _, r := range []reconcile.Request{req("ns", "a"), req("", "b")} {
		got, ok := parseRequest(requestKey(r))
		if !ok || got != r {
			t.Errorf("parseRequest(requestKey(%v)) = %v, %v", r, got, ok)
		}
	}
	for _, bad := range []string{"", "a/b/c", "ns/"} {
		if _, ok := parseRequest(bad); ok {
			t.Errorf("parseRequest(%q) succeeded", bad)
		}
	}
}
