package boltinformer_test

import (
	"strings"
	"testing"

	"github.com/boltinformer/boltinformer/internal/testobj"
)

// TestReviewFreshBeforeTheWatchReachesR: a warm start is declared fresh
// at R (Health.FreshResourceVersion) when a metadata read of the whole
// scope at R matches the cache's keys and resourceVersions (the new
// whole-scope branch of compareServerVersion; listAndPlan's plan.Done()
// and a catch-up whose keys all came before R do the same), while the
// resumed watch has not yet delivered the events between the file's
// resourceVersion and R. An object created and deleted while down (both
// before R) matches nothing in either, so it is not waited for: after
// Fresh (HasSynced, with SyncAfterFresh) the watch brings it into the
// cache and to the handlers as an add, then its delete: a state that was
// the server's at no resourceVersion at or after R, shown after the
// informer said it had R. (A ReplicaSet controller synced at Fresh counts
// such a Pod.)
func TestReviewFreshBeforeTheWatchReachesR(t *testing.T) {
	f := newCacheFile(t, 1)
	ghost := testobj.Pod(50, 3, 2, "")
	if _, err := f.src.Create(ghost); err != nil {
		t.Fatal(err)
	}
	ghostKey := ghost.Namespace + "/" + ghost.Name
	if err := f.src.Delete(ghostKey); err != nil {
		t.Fatal(err)
	}
	srv := &stagedServer{Source: f.src, held: true}
	inf := f.openStaged(srv, podIndexers(), nil)
	rec := newEvRecorder("handler")
	if _, err := inf.AddEventHandler(rec); err != nil {
		t.Fatal(err)
	}
	runInformer(t, inf)
	// The watch is held: nothing after the file is applied yet.
	waitFor(t, "R read", func() bool { h := inf.Health(); return h.Fresh || h.FreshTarget != "" })
	h := inf.Health()
	w := srv.watch(t, 0)
	w.open()
	f.src.Bookmark()
	waitFor(t, "the watch applied", func() bool { return inf.Health().AppliedResourceVersion == f.src.ResourceVersion() })
	waitFor(t, "HasSynced", inf.HasSynced)
	if h.Fresh && rec.saw(ghostKey) {
		var evs []string
		for _, e := range rec.events() {
			if e.Key == ghostKey {
				evs = append(evs, e.String())
			}
		}
		t.Fatalf("fresh at %s with the cache at %s (watch not there yet); then the handler got %s: an object that existed at no resourceVersion at or after R",
			h.FreshResourceVersion, h.AppliedResourceVersion, strings.Join(evs, ", "))
	}
}
