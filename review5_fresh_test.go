package boltinformer_test

// Review 5 of commit 18b6ff2 (Fresh at R ahead of the watch skips the
// watch's history up to R; a catch-up is judged at the end of its batch):
// tests staged as in informer_fresh_review23_test.go.

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/internal/testobj"
)

// stageListCatchup stages a warm start of a file at A holding two Pods,
// whose catch-up plan (the metadata list of every object, at once) is
// installed while the resumed watch is held. While down, the first Pod is
// labelled hold=yes, then down() makes its changes; R is the server's
// resourceVersion after them. The watch is then released: the loop is
// held on the first Pod's update until the reflector has taken the event
// at last (so the rest is queued and pops in batches); it returns the
// informer.
func stageListCatchup(t *testing.T, f *cacheFile, down func(keys []string), last func() string, opts *boltinformer.InformerOptions) (*boltinformer.Informer, *stagedServer, *evRecorder) {
	t.Helper()
	keys := sortedKeys(f.src.Objects())
	p := f.src.Objects()[keys[0]].(*corev1.Pod).DeepCopy()
	p.Labels["hold"] = "yes"
	if _, err := f.src.Update(p); err != nil {
		t.Fatal(err)
	}
	down(keys)
	lastRV := last()
	srv := &stagedServer{Source: f.src, held: true}
	release := make(chan struct{})
	if opts == nil {
		opts = &boltinformer.InformerOptions{SyncPolicy: boltinformer.SyncAfterFresh, FreshBookmarkWait: time.Hour, Metadata: srv}
	}
	inf := f.openStaged(srv, holdIndex(release), opts)
	rec := newEvRecorder("handler")
	if _, err := inf.AddEventHandler(rec); err != nil {
		t.Fatal(err)
	}
	stop := runInformer(t, inf)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
		stop()
	})
	waitFor(t, "the catch-up plan", func() bool { return inf.Health().CatchupPending > 0 })
	if inf.Health().Fresh {
		t.Fatal("fresh before the watch was released")
	}
	w := srv.watch(t, 0)
	w.open()
	w.taken(t, lastRV)
	close(release)
	return inf, srv, rec
}

// TestReview5BatchCatchupThenTransientCreate: the catch-up's last wanted
// key comes in a batch followed by the create of an object that was
// created and deleted while down (both before R). Catchup.Observe returns
// "caught up" at once for every later delta once its want map is empty,
// so the create does not re-open the plan: EndBatch marks Fresh at R with
// the transient object in the cache (its version < R), sets skipTo = R,
// and its delete (<= R) is then skipped: the object stays in the cache
// (and the file) for good, while the informer says it equals the server.
// With single deltas (no batch) the create would come after Fresh and be
// skipped too, so this is a batch-only divergence.
func TestReview5BatchCatchupThenTransientCreate(t *testing.T) {
	t.Skip("open: Catchup.Observe answers caught up for every delta once its want map is empty, so a later delta of the batch does not reopen the plan; reproduced, see the report")
	f := newCacheFile(t, 2)
	ghost := testobj.Pod(50, 3, 2, "")
	ghostKey := ghost.Namespace + "/" + ghost.Name
	inf, _, _ := stageListCatchup(t, f, func(keys []string) {
		p := f.src.Objects()[keys[1]].(*corev1.Pod).DeepCopy()
		p.Labels["changed"] = "yes"
		if _, err := f.src.Update(p); err != nil {
			t.Fatal(err)
		}
		if _, err := f.src.Create(ghost); err != nil {
			t.Fatal(err)
		}
		if err := f.src.Delete(ghostKey); err != nil {
			t.Fatal(err)
		}
	}, f.src.ResourceVersion, nil)
	waitFor(t, "HasSynced", inf.HasSynced)
	// An event past R: the watch has delivered everything up to R.
	after := testobj.Pod(60, 3, 2, "")
	if _, err := f.src.Create(after); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the event past R", func() bool {
		return inf.Health().AppliedResourceVersion == f.src.ResourceVersion()
	})
	h := inf.Health()
	if d := diffObjects(f.src.Objects(), inf.GetStore().List()); d != "" {
		t.Fatalf("fresh at %s; after the watch passed R the cache differs from the server:\n%s", h.FreshResourceVersion, d)
	}
}
