package boltinformer_test

// Review findings on handler positions (issue 24's durable handlers and
// checkpoints): a position must never cover a notification the handler
// has not returned from.

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/internal/testobj"
)

// positionChecker is a handler that records, at each call, whether its
// registration's position already covered the object it is handed: a
// position is what the handler has returned from, so it never may.
type positionChecker struct {
	reg atomic.Pointer[cache.ResourceEventHandlerRegistration]

	mu         sync.Mutex
	calls      int
	violations []string
}

func (c *positionChecker) check(kind string, obj any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	r := c.reg.Load()
	if r == nil {
		return
	}
	pos := boltinformer.HandlerPosition(*r)
	if pos == "" {
		return
	}
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	rv := rvOf(obj)
	var p, o int64
	if _, err := fmt.Sscan(pos, &p); err != nil {
		return
	}
	if _, err := fmt.Sscan(rv, &o); err != nil {
		return
	}
	if p >= o {
		c.violations = append(c.violations, fmt.Sprintf("%s %s at %s handed while the position is already %s", kind, keyOf(obj), rv, pos))
	}
}

func (c *positionChecker) OnAdd(obj any, _ bool) { c.check("add", obj) }
func (c *positionChecker) OnUpdate(_, obj any)   { c.check("update", obj) }
func (c *positionChecker) OnDelete(obj any)      { c.check("delete", obj) }
func (c *positionChecker) count() int            { c.mu.Lock(); defer c.mu.Unlock(); return c.calls }
func (c *positionChecker) found() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.violations...)
}
func (c *positionChecker) setReg(r cache.ResourceEventHandlerRegistration) { c.reg.Store(&r) }

// TestReviewDurablePositionAheadOfInitialAdds: a durable handler added
// before Run resumes from a position P behind the file's resourceVersion
// F (the previous run was killed while the handler lagged: its checkpoint
// said P, the file had committed up to F). The objects changed in (P, F]
// come to it from the warm start's initial list (distributeInitial,
// through the listener's Filter). The disk answer is applied beside that
// list (awaitInitial lets it through), and applyLocked ends with
// progressLocked: a ProgressNotification at F is queued to the handler
// before the initial adds that come after it. The handler's position is F
// while objects at or before F are still queued to it; a group commit then
// writes F into its checkpoint, and a kill -9 loses those objects for good
// (the next start replays only what is after F).
func TestReviewDurablePositionAheadOfInitialAdds(t *testing.T) {
	const n = 3000
	path := filepath.Join(t.TempDir(), "cache.db")
	src := newPodSource()
	for i := range n {
		if _, err := src.Create(testobj.Pod(i, 3, 2, "")); err != nil {
			t.Fatal(err)
		}
	}
	// First run: the handler's checkpoint at P, then every object changed
	// and committed (the file at F > P), as if the handler had lagged.
	db, err := boltinformer.Open(path, &boltinformer.Options{NoSync: true, Logger: &quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	inf, err := db.NewInformer("pods", src, &corev1.Pod{}, 0, podIndexers(), &boltinformer.InformerOptions{Resource: "pods"})
	if err != nil {
		t.Fatal(err)
	}
	stop := runInformer(t, inf)
	waitFor(t, "sync", inf.HasSynced)
	p := src.ResourceVersion()
	if err := db.SetCheckpoint(boltinformer.DurableHandlerCheckpoint("pods", "h"), boltinformer.Checkpoint{Positions: map[string]string{"pods": p}}); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, k := range sortedKeys(src.Objects()) {
		pod := src.Objects()[k].(*corev1.Pod).DeepCopy()
		pod.Labels["changed"] = "yes"
		if _, err := src.Update(pod); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the informer at the source", func() bool { return inf.Indexer().ResourceVersion() == src.ResourceVersion() })
	stop()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	// Second run: the durable handler resumes from P, added before Run.
	db2, err := boltinformer.Open(path, &boltinformer.Options{NoSync: true, Logger: &quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	inf2, err := db2.NewInformer("pods", src, &corev1.Pod{}, 0, podIndexers(), &boltinformer.InformerOptions{Resource: "pods"})
	if err != nil {
		t.Fatal(err)
	}
	h := &positionChecker{}
	reg, err := inf2.AddDurableEventHandler("h", h, cache.HandlerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	h.setReg(reg)
	stop2 := runInformer(t, inf2)
	defer stop2()
	waitFor(t, "the handler's adds of the changed objects", func() bool { return h.count() >= n })
	if v := h.found(); len(v) > 0 {
		t.Fatalf("the durable handler's position covered %d objects before it was handed them (a checkpoint written then loses them at a kill); first: %s", len(v), v[0])
	}
}
