package boltcr

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
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

// TestQueueCheckpointPositionsBeforeRequests: an event that adds a
// request while the queue writes its checkpoint (between its two reads)
// is either after the checkpoint's position (handed over again at the
// next start) or in its Due list; never behind the position and missing
// from the list (it would be lost by a kill). The positions must be read
// before the requests.
func TestQueueCheckpointPositionsBeforeRequests(t *testing.T) {
	db, err := boltinformer.Open(filepath.Join(t.TempDir(), "cache.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	fw := watch.NewFake()
	lw := listThenWatch{&toolscache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			return &corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "10"}}, nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) { return fw, nil },
	}}
	inf, err := db.NewInformer("cms", lw, &corev1.ConfigMap{}, 0, nil, &boltinformer.InformerOptions{ClusterID: "test"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { inf.RunWithContext(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	if !toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("not synced")
	}
	q := newTestQueue(t, db, "c2")
	defer q.ShutDown()
	add := func(obj any) {
		if m, err := meta.Accessor(obj); err == nil {
			q.Add(req(m.GetNamespace(), m.GetName()))
		}
	}
	reg, err := inf.AddEventHandlerSince(toolscache.ResourceEventHandlerFuncs{AddFunc: func(obj any) { add(obj) }}, "", toolscache.HandlerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	q.track("cms", reg)
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for range 500 {
			if cond() {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("timed out waiting for %s", what)
	}
	waitFor("the handler's first position", func() bool { return boltinformer.HandlerPosition(reg) == "10" })
	q.testBetween = func() {
		q.testBetween = nil
		fw.Add(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", ResourceVersion: "11"}})
		waitFor("the handler to return from the event", func() bool { return boltinformer.HandlerPosition(reg) == "11" })
	}
	q.checkpoint()
	cp, _ := db.Checkpoint(QueueCheckpoint("c2"))
	inDue := slices.ContainsFunc(cp.Due, func(d boltinformer.Due) bool { return d.Key == "ns/a" })
	if pos := cp.Positions["cms"]; pos == "11" && !inDue {
		t.Fatalf("the checkpoint's position %s covers the event that added ns/a, and its Due list lacks it: %+v", pos, cp)
	}
}

// listThenWatch is a ListerWatcher that lists, then watches (no WatchList).
type listThenWatch struct{ *toolscache.ListWatch }

func (listThenWatch) IsWatchListSemanticsUnSupported() bool { return true }
