package boltinformer_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/boltinformer/boltinformer"
)

// TestRegressionDownDeletesReplayedAfterKillBeforeFresh: a warm start
// whose catch-up applied a delete (an object deleted while the informer
// was down) is killed before it is fresh; the next start's late handler
// (controller-runtime's) must still get the OnDelete (ReplayDownDeletes).
// The kill is the file as the first process left it: copied while the
// first informer runs, once its committer has committed what it would
// (DB.Flush), without Close. Before the fix the delete was committed at
// once, and the next start neither had the object nor heard of its delete.
func TestRegressionDownDeletesReplayedAfterKillBeforeFresh(t *testing.T) {
	f := newCacheFile(t, 10)
	keys := sortedKeys(f.src.Objects())
	gone := keys[0]
	if err := f.src.Delete(gone); err != nil {
		t.Fatal(err)
	}

	// The first start: its metadata list never answers, so it is never
	// fresh, while its resumed watch applies the delete.
	db, err := boltinformer.Open(f.path, &boltinformer.Options{Logger: &quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	blocked := boltinformer.MetadataListerFunc(func(ctx context.Context, _ metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	inf, err := db.NewInformer("pods", f.src, &corev1.Pod{}, 0, podIndexers(), &boltinformer.InformerOptions{
		SyncPolicy: boltinformer.SyncAfterFresh, Metadata: blocked, ReplayDownDeletes: true})
	if err != nil {
		t.Fatal(err)
	}
	if !inf.Decision().Warm {
		t.Fatalf("not a warm start: %+v", inf.Decision())
	}
	stop := runInformer(t, inf)
	waitFor(t, "the catch-up's delete", func() bool {
		_, ok, _ := inf.GetStore().GetByKey(gone)
		return !ok
	})
	if inf.Health().Fresh {
		t.Fatal("fresh without a metadata list")
	}
	if err := db.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if h := inf.Health(); !h.CommitsHeld {
		t.Fatalf("commits not held before fresh: %+v", h)
	}
	if err := inf.Flush(context.Background()); !errors.Is(err, boltinformer.ErrCommitsHeld) {
		t.Fatalf("Flush before fresh: %v, want ErrCommitsHeld", err)
	}
	killed := filepath.Join(t.TempDir(), "killed.db")
	raw, err := os.ReadFile(f.path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(killed, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	stop()

	// The next start, from the file the kill left.
	db2, err := boltinformer.Open(killed, &boltinformer.Options{Logger: &quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db2.Close() })
	inf2, err := db2.NewInformer("pods", f.src, &corev1.Pod{}, 0, podIndexers(), &boltinformer.InformerOptions{
		SyncPolicy: boltinformer.SyncAfterFresh, Metadata: f.src, ReplayDownDeletes: true})
	if err != nil {
		t.Fatal(err)
	}
	if !inf2.Decision().Warm {
		t.Fatalf("the next start is not warm: %+v", inf2.Decision())
	}
	runInformer(t, inf2)
	waitFor(t, "HasSynced", inf2.HasSynced)
	late := newEvRecorder("late")
	reg, err := inf2.AddEventHandler(late)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the late handler's sync", reg.HasSynced)
	var deletes []string
	for _, e := range late.events() {
		if e.Kind == "delete" {
			deletes = append(deletes, e.Key)
		}
	}
	if !slices.Equal(deletes, []string{gone}) {
		t.Fatalf("late handler after the kill: deletes %v, want [%s]", deletes, gone)
	}
	// Fresh ends the hold: the file catches up.
	if err := inf2.Flush(context.Background()); err != nil {
		t.Fatalf("Flush once fresh: %v", err)
	}
	if h := inf2.Health(); h.CommitsHeld || h.SavedResourceVersion != f.src.ResourceVersion() {
		t.Fatalf("once fresh: held %t, saved resourceVersion %s, server at %s", h.CommitsHeld, h.SavedResourceVersion, f.src.ResourceVersion())
	}
}

// TestReplayDownDeletesHoldEndsWhenStale: the hold of a warm start's
// commits (ReplayDownDeletes) ends when FreshTimeout makes the informer
// synced without being fresh, so that a server that never answers does
// not keep the file behind for good.
func TestReplayDownDeletesHoldEndsWhenStale(t *testing.T) {
	f := newCacheFile(t, 5)
	if err := f.src.Delete(sortedKeys(f.src.Objects())[0]); err != nil {
		t.Fatal(err)
	}
	db, err := boltinformer.Open(f.path, &boltinformer.Options{Logger: &quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	blocked := boltinformer.MetadataListerFunc(func(ctx context.Context, _ metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	inf, err := db.NewInformer("pods", f.src, &corev1.Pod{}, 0, podIndexers(), &boltinformer.InformerOptions{
		SyncPolicy: boltinformer.SyncAfterFresh, Metadata: blocked, ReplayDownDeletes: true, FreshTimeout: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runInformer(t, inf)
	waitFor(t, "HasSynced (stale)", inf.HasSynced)
	waitFor(t, "the catch-up", func() bool { return len(inf.GetStore().ListKeys()) == 4 })
	if err := inf.Flush(context.Background()); err != nil {
		t.Fatalf("Flush once stale: %v", err)
	}
	if h := inf.Health(); h.Fresh || !h.Stale || h.CommitsHeld || h.SavedResourceVersion != f.src.ResourceVersion() {
		t.Fatalf("once stale: %+v; server at %s", h, f.src.ResourceVersion())
	}
}
