package boltinformer_test

// Review findings on handler positions (issue 24's durable handlers and
// checkpoints): a position must never cover a notification the handler
// has not returned from.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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

// openCommitOnFlush opens path with group commits made only by Flush (and
// Close), so that a test decides what one commit holds.
func openCommitOnFlush(t *testing.T, path string) *boltinformer.DB {
	t.Helper()
	db, err := boltinformer.Open(path, &boltinformer.Options{NoSync: true, Logger: &quietLogger, CommitMaxDelay: time.Hour, CommitMaxOps: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// TestReviewKeptDeleteLostWhenRecreatedInOneCommit: while a checkpoint
// names the informer, each delete keeps the object's last state in the
// file (store format v5), for a consumer resuming from a position behind
// it ("a key deleted and created again gets the delete, then the add",
// deletesAfter). The indexer keeps one pending op per key
// (queueLocked): a delete whose key is created again before the group
// commit (a StatefulSet's Pod, deleted and recreated under its name within
// the 100 ms commit delay) loses its tombstone to the put, so the file
// never keeps the delete. A consumer resuming from a position before it
// gets the new object as an add and never hears that the old one (its
// UID) is gone; the plain delete beside it is kept.
func TestReviewKeptDeleteLostWhenRecreatedInOneCommit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache.db")
	src := newPodSource()
	for i := range 10 {
		if _, err := src.Create(testobj.Pod(i, 3, 2, "")); err != nil {
			t.Fatal(err)
		}
	}
	db := openCommitOnFlush(t, path)
	inf, err := db.NewInformer("pods", src, &corev1.Pod{}, 0, podIndexers(), &boltinformer.InformerOptions{Resource: "pods"})
	if err != nil {
		t.Fatal(err)
	}
	stop := runInformer(t, inf)
	waitFor(t, "sync", inf.HasSynced)
	if err := db.Flush(context.Background()); err != nil { // the cold start's list
		t.Fatal(err)
	}
	p := src.ResourceVersion()
	if err := db.SetCheckpoint("consumer", boltinformer.Checkpoint{Positions: map[string]string{"pods": p}}); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	keys := sortedKeys(src.Objects())
	plain, recreated := keys[3], keys[2]
	old := src.Objects()[recreated].(*corev1.Pod).DeepCopy()
	for _, k := range []string{plain, recreated} {
		if err := src.Delete(k); err != nil {
			t.Fatal(err)
		}
	}
	again := old.DeepCopy()
	again.UID, again.ResourceVersion = "recreated-uid", ""
	if _, err := src.Create(again); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the informer at the source", func() bool { return inf.Indexer().ResourceVersion() == src.ResourceVersion() })
	if err := db.Flush(context.Background()); err != nil { // one commit: both deletes and the create
		t.Fatal(err)
	}
	stop()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db2 := openCommitOnFlush(t, path)
	defer db2.Close()
	inf2, err := db2.NewInformer("pods", src, &corev1.Pod{}, 0, podIndexers(), &boltinformer.InformerOptions{Resource: "pods"})
	if err != nil {
		t.Fatal(err)
	}
	rec := newEvRecorder("resumed")
	if _, err := inf2.AddEventHandlerSince(rec, p, cache.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}
	runInformer(t, inf2)
	waitFor(t, "sync", inf2.HasSynced)
	waitFor(t, "the resumed handler's add of the new object", func() bool { return rec.saw(recreated) && rec.len() >= 2 })
	var deleted []string
	for _, e := range rec.events() {
		if e.Kind == "delete" {
			deleted = append(deleted, e.Key)
		}
	}
	if !slices.Contains(deleted, plain) {
		t.Fatalf("the plain delete of %s was not replayed (%v): the kept deletes do not work at all", plain, rec.events())
	}
	if !slices.Contains(deleted, recreated) {
		t.Fatalf("the handler resuming from %s never got the delete of %s (UID %s), only the add of its new incarnation: %v", p, recreated, old.UID, rec.events())
	}
}

// TestReviewDeletesNotKeptWhenFirstAskedBeforeColdListCommitted: the
// first KeepDeletes of an indexer sets DeletesFrom to its resourceVersion
// only when !reset; a cold start's reset is cleared when its first batch
// is taken for commit, and Replace sets DeletesFrom only while it is
// still "". A checkpoint set (or a durable handler added: controller-
// runtime adds its handlers once synced) after a cold start's list but
// before its first commit (the 100 ms commit delay) leaves DeletesFrom ""
// for the whole run: the file keeps tombstones, yet the next start cannot
// serve the checkpoint's position (ErrNotKept) and hands the consumer
// every object, without the deletes made after its position.
func TestReviewDeletesNotKeptWhenFirstAskedBeforeColdListCommitted(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache.db")
	src := newPodSource()
	for i := range 10 {
		if _, err := src.Create(testobj.Pod(i, 3, 2, "")); err != nil {
			t.Fatal(err)
		}
	}
	db := openCommitOnFlush(t, path)
	inf, err := db.NewInformer("pods", src, &corev1.Pod{}, 0, podIndexers(), &boltinformer.InformerOptions{Resource: "pods"})
	if err != nil {
		t.Fatal(err)
	}
	stop := runInformer(t, inf)
	waitFor(t, "sync", inf.HasSynced)
	p := src.ResourceVersion()
	// Before the cold start's first commit.
	if err := db.SetCheckpoint("consumer", boltinformer.Checkpoint{Positions: map[string]string{"pods": p}}); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	gone := sortedKeys(src.Objects())[3]
	if err := src.Delete(gone); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the informer at the source", func() bool { return inf.Indexer().ResourceVersion() == src.ResourceVersion() })
	stop()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	from := inf.Indexer().DeletesFrom()

	db2 := openCommitOnFlush(t, path)
	defer db2.Close()
	inf2, err := db2.NewInformer("pods", src, &corev1.Pod{}, 0, podIndexers(), &boltinformer.InformerOptions{Resource: "pods"})
	if err != nil {
		t.Fatal(err)
	}
	rec := newEvRecorder("resumed")
	if _, err := inf2.AddEventHandlerSince(rec, p, cache.HandlerOptions{}); err != nil {
		t.Fatal(err)
	}
	runInformer(t, inf2)
	waitFor(t, "sync", inf2.HasSynced)
	waitFor(t, "the informer at the source", func() bool { return inf2.Indexer().ResourceVersion() == src.ResourceVersion() })
	if !rec.saw(gone) {
		t.Fatalf("the consumer resuming from %s never got the delete of %s made after it (DeletesFrom of the first run %q): %v", p, gone, from, rec.events())
	}
}

// TestReviewPruneCommittedWithoutItsCheckpoint: SetCheckpoint raises the
// in-memory position and at once asks the informers to prune their kept
// deletes up to the new minimum (prunePositions), before the checkpoint
// is written. The committer calls its sources in the order they were
// added, the DB's checkpoints first: a group commit whose
// checkpoints.Pending ran just before SetCheckpoint and whose indexer's
// Pending ran just after writes the prune without the checkpoint. A kill
// -9 then leaves the file with the old position and without the deletes
// after it; a prune does not move DeletesFrom, so the consumer resuming
// from the old position is served from the pruned deletes and misses
// them, silently. The round is driven as Committer.Flush drives it
// (ReviewCommitRound), with SetCheckpoint in between.
func TestReviewPruneCommittedWithoutItsCheckpoint(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cache.db")
	src := newPodSource()
	for i := range 10 {
		if _, err := src.Create(testobj.Pod(i, 3, 2, "")); err != nil {
			t.Fatal(err)
		}
	}
	db := openCommitOnFlush(t, path)
	defer db.Close()
	inf, err := db.NewInformer("pods", src, &corev1.Pod{}, 0, podIndexers(), &boltinformer.InformerOptions{Resource: "pods"})
	if err != nil {
		t.Fatal(err)
	}
	runInformer(t, inf)
	waitFor(t, "sync", inf.HasSynced)
	if err := db.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	p0 := src.ResourceVersion()
	if err := db.SetCheckpoint("consumer", boltinformer.Checkpoint{Positions: map[string]string{"pods": p0}}); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	gone := sortedKeys(src.Objects())[3]
	if err := src.Delete(gone); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the delete applied", func() bool { return inf.Indexer().ResourceVersion() == src.ResourceVersion() })
	if err := db.Flush(context.Background()); err != nil { // the kept delete is in the file
		t.Fatal(err)
	}
	if err := boltinformer.ReviewCommitRound(db, inf, func() {
		if err := db.SetCheckpoint("consumer", boltinformer.Checkpoint{Positions: map[string]string{"pods": src.ResourceVersion()}}); err != nil {
			t.Error(err)
		}
	}); err != nil {
		t.Fatal(err)
	}
	// kill -9 here: the file is what that round committed.
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	crashed := filepath.Join(dir, "crashed.db")
	if err := os.WriteFile(crashed, raw, 0o600); err != nil {
		t.Fatal(err)
	}

	db2 := openCommitOnFlush(t, crashed)
	defer db2.Close()
	cp, _ := db2.Checkpoint("consumer")
	since := cp.Positions["pods"]
	if since != p0 {
		t.Fatalf("the crashed file's checkpoint is at %q, want the old position %s", since, p0)
	}
	inf2, err := db2.NewInformer("pods", src, &corev1.Pod{}, 0, podIndexers(), &boltinformer.InformerOptions{Resource: "pods"})
	if err != nil {
		t.Fatal(err)
	}
	rec := newEvRecorder("resumed")
	reg, err := inf2.AddEventHandlerSince(rec, since, cache.HandlerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	runInformer(t, inf2)
	waitFor(t, "sync", inf2.HasSynced)
	waitFor(t, "the handler's position", func() bool { return boltinformer.HandlerPosition(reg) == src.ResourceVersion() })
	if !rec.saw(gone) {
		t.Fatalf("the consumer resuming from its file's position %s never got the delete of %s made after it (events %v; DeletesFrom %q): the kept delete was pruned by a commit without the checkpoint that allowed it", since, gone, rec.events(), inf2.Indexer().DeletesFrom())
	}
}
