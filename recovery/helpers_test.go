package recovery_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/recovery/crashtest"
)

// smallHistory is the truth of the fault and damage tests.
func smallHistory(seed uint64) *crashtest.History {
	return crashtest.NewHistory(seed, &crashtest.HistoryOptions{Keys: 120, Growth: 40, MaxKeys: 600, MaxPadding: 1500})
}

// waitBound bounds every wait of these tests: it is a hang detector, not
// a timing requirement.
const waitBound = 60 * time.Second

// waitFor polls cond until it holds, failing the test after waitBound.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitBound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up after %s waiting for %s", waitBound, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// agent is a DB with one running Pod informer.
type agent struct {
	db       *boltinformer.DB
	inf      *boltinformer.Informer
	stopOnce sync.Once
	cancel   context.CancelFunc
	done     chan struct{}
}

// startAgent opens path and runs an informer over src. The test's cleanup
// stops it (if stop was not called).
func startAgent(t testing.TB, path string, src cache.ListerWatcher, opts *boltinformer.Options) *agent {
	t.Helper()
	db, err := boltinformer.Open(path, opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	inf, err := db.NewInformer(informerName, src, &corev1.Pod{}, 0, crashIndexers(true), &boltinformer.InformerOptions{Resource: "pods"})
	if err != nil {
		_ = db.Close()
		t.Fatalf("new informer: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &agent{db: db, inf: inf, cancel: cancel, done: make(chan struct{})}
	go func() { defer close(a.done); inf.RunWithContext(ctx) }()
	t.Cleanup(func() { _ = a.stop() })
	return a
}

// stop stops the informer and closes the DB.
func (a *agent) stop() error {
	var err error
	a.stopOnce.Do(func() {
		a.cancel()
		<-a.done
		err = a.db.Close()
	})
	return err
}

// caughtUp waits until the informer has applied src's resourceVersion
// and holds exactly src's objects.
func (a *agent) caughtUp(t testing.TB, src *crashtest.Source) {
	t.Helper()
	want := src.ResourceVersion()
	// A damaged record the background fill finds (a warm start from the
	// envelope snapshot reads records only then) makes the informer relist:
	// caught up means that relist is done too.
	waitFor(t, "the informer to apply resourceVersion "+want, func() bool {
		x := a.inf.Indexer()
		select {
		case <-x.Decoded():
		default:
			return false
		}
		return a.inf.HasSynced() && x.ResourceVersion() == want && x.Undecodable() == 0
	})
	objs := src.Objects()
	if err := crashtest.Compare(a.inf.GetIndexer().List(), objs); err != nil {
		t.Fatal(err)
	}
	// The keys too: an object stored under a wrong key would pass the
	// comparison of objects above.
	keys := a.inf.GetIndexer().ListKeys()
	for _, k := range keys {
		if _, ok := objs[k]; !ok {
			t.Fatalf("the informer holds key %q, which the source does not have", k)
		}
	}
	if len(keys) != len(objs) {
		t.Fatalf("the informer holds %d keys, the source %d objects", len(keys), len(objs))
	}
}

// saved is the resourceVersion of the informer's committed state.
func (a *agent) saved() string { return a.inf.Indexer().SavedState().ResourceVersion }

// feed applies events from+1..to of h to src.
func feed(t testing.TB, h *crashtest.History, src *crashtest.Source, from, to int64) {
	t.Helper()
	for _, e := range h.Events(from, to) {
		if err := src.Apply(e); err != nil {
			t.Fatal(err)
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func rvOf(t testing.TB, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("resourceVersion %q: %v", s, err)
	}
	return n
}
