package fresh_test

import (
	"errors"
	"maps"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer/fresh"
)

func metaList(rv string, items map[string]string) *metav1.PartialObjectMetadataList {
	l := &metav1.PartialObjectMetadataList{ListMeta: metav1.ListMeta{ResourceVersion: rv}}
	for name, irv := range items {
		l.Items = append(l.Items, metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: irv}})
	}
	return l
}

func key(m *metav1.PartialObjectMetadata) (string, error) { return cache.MetaNamespaceKeyFunc(m) }

// TestCatchup: the plan names what changed, was created or deleted since
// the cache's state, and the catch-up is done exactly when the watch has
// brought each of them (in the watch's order), or passed R.
func TestCatchup(t *testing.T) {
	cached := map[string]string{"ns/a": "10", "ns/b": "11", "ns/c": "12", "ns/gone": "13", "ns/late": "31"}
	list := metaList("30", map[string]string{"a": "10", "b": "20", "c": "12", "new": "25"})
	c, err := fresh.Plan(list, key, "15", maps.All(cached))
	if err != nil {
		t.Fatal(err)
	}
	if c.Changed != 1 || c.Created != 1 || c.Gone != 1 || c.Unchanged != 2 || c.Pending() != 3 {
		t.Fatalf("plan: %+v pending %v", c, c.WantKeys())
	}
	steps := []struct {
		key, rv string
		deleted bool
		done    bool
	}{
		{"ns/b", "16", false, false},   // an older change of b
		{"ns/new", "17", false, false}, // an earlier incarnation of new
		{"ns/gone", "18", true, false}, // deleted: done for gone
		{"ns/new", "18", true, false},
		{"ns/b", "20", false, false},
		{"ns/x", "21", false, false}, // not listed: must be deleted before R
		{"ns/new", "25", false, false},
		{"ns/x", "26", true, true},
	}
	for i, s := range steps {
		if got := c.Observe(s.key, s.rv, s.deleted); got != s.done {
			t.Fatalf("step %d %+v: done %v, pending %v", i, s, got, c.WantKeys())
		}
	}
}

func TestCatchupPassesR(t *testing.T) {
	c, err := fresh.Plan(metaList("30", map[string]string{"a": "20"}), key, "15", maps.All(map[string]string{"ns/a": "10"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.ObserveProgress("29") || !c.ObserveProgress("30") {
		t.Fatal("a bookmark at R must complete the catch-up, and only at R")
	}
	c, _ = fresh.Plan(metaList("30", map[string]string{"a": "20"}), key, "15", maps.All(map[string]string{"ns/a": "10"}))
	if !c.Observe("ns/other", "31", false) {
		t.Fatal("an event past R must complete the catch-up")
	}
}

func TestPlanErrors(t *testing.T) {
	_, err := fresh.Plan(metaList("5", nil), key, "15", maps.All(map[string]string{}))
	if !errors.Is(err, fresh.ErrOtherTimeline) {
		t.Fatalf("a list behind the cache: %v", err)
	}
	_, err = fresh.Plan(metaList("abc", nil), key, "15", maps.All(map[string]string{}))
	if !errors.Is(err, fresh.ErrNotComparable) {
		t.Fatalf("a list rv that does not parse: %v", err)
	}
	_, err = fresh.Plan(metaList("30", map[string]string{"a": "x1"}), key, "15", maps.All(map[string]string{}))
	if !errors.Is(err, fresh.ErrNotComparable) {
		t.Fatalf("an item rv that does not parse: %v", err)
	}
	c, err := fresh.Plan(metaList("30", nil), key, "30", maps.All(map[string]string{}))
	if err != nil || !c.Done() {
		t.Fatalf("an empty diff: %v %+v", err, c)
	}
}

// TestPlanResume: a resumed watch's plan checks the timeline against the
// resourceVersion the watch resumed from, and a cache that has applied an
// event past the list is caught up (it was taken for another timeline).
func TestPlanResume(t *testing.T) {
	list := metaList("30", map[string]string{"a": "20"})
	c, err := fresh.PlanResume(list, key, "15", "31", maps.All(map[string]string{"ns/a": "20", "ns/b": "31"}))
	if err != nil || !c.Done() || c.ResourceVersion != "31" {
		t.Fatalf("applied past the list: %+v, %v", c, err)
	}
	if _, err := fresh.PlanResume(list, key, "35", "35", maps.All(map[string]string{})); !errors.Is(err, fresh.ErrOtherTimeline) {
		t.Fatalf("a list behind the resume point: %v", err)
	}
	c, err = fresh.PlanResume(list, key, "15", "18", maps.All(map[string]string{"ns/a": "10"}))
	if err != nil || c.Done() || c.Changed != 1 {
		t.Fatalf("a plan: %+v, %v", c, err)
	}
}

// TestRegressionCatchupRecreatedBeforeR: a key to be deleted that the
// watch deletes, then creates again before R (and deletes again before R),
// is not caught up at its first delete; nor is a key the list does not
// have that the watch creates: until their last deletes, the cache holds
// objects the server's state at R does not. The catch-up was done at the
// first delete, and Fresh came with the re-created object in the cache.
func TestRegressionCatchupRecreatedBeforeR(t *testing.T) {
	c, err := fresh.Plan(metaList("20", map[string]string{"j": "11"}), key, "4", maps.All(map[string]string{"ns/j": "2", "ns/k": "3"}))
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		key, rv string
		deleted bool
		done    bool
	}{
		{"ns/k", "5", true, false},   // deleted: as planned
		{"ns/k", "6", false, false},  // created again: must go again
		{"ns/x", "7", false, false},  // not listed, not cached: must go
		{"ns/j", "11", false, false}, // j as listed: k and x still in the cache
		{"ns/x", "12", true, false},
		{"ns/z", "13", false, false}, // not planned, created
		{"ns/k", "14", true, false},
		{"ns/z", "15", true, true},
	}
	for i, s := range steps {
		if got := c.Observe(s.key, s.rv, s.deleted); got != s.done {
			t.Fatalf("step %d %+v: done %v, pending %v", i, s, got, c.WantKeys())
		}
	}
}

// TestRegressionPlanObjectOlderThanCache: an object listed at an older
// resourceVersion than the cache's, by a list not older than the cache, is
// another history (a restored cluster that has passed the cache's
// resourceVersion since): the plan took it for unchanged.
func TestRegressionPlanObjectOlderThanCache(t *testing.T) {
	_, err := fresh.Plan(metaList("100", map[string]string{"a": "3"}), key, "30", maps.All(map[string]string{"ns/a": "12"}))
	if !errors.Is(err, fresh.ErrOtherTimeline) {
		t.Fatalf("an object older on the server than in the cache: %v", err)
	}
}

// TestRegressionPlanResumeListedNotCached: a resumed watch's plan fails
// with ErrOtherTimeline when the list has an object at a resourceVersion
// the cache has applied that the cache does not hold at that version (the
// watch would never bring it: its event is before the resume point); a
// partial relist's Plan reads it instead.
func TestRegressionPlanResumeListedNotCached(t *testing.T) {
	for _, cached := range []map[string]string{{}, {"ns/a": "3"}} {
		list := metaList("40", map[string]string{"a": "6"})
		if _, err := fresh.PlanResume(list, key, "22", "22", maps.All(cached)); !errors.Is(err, fresh.ErrOtherTimeline) {
			t.Fatalf("cached %v: %v", cached, err)
		}
		c, err := fresh.Plan(list, key, "22", maps.All(cached))
		if err != nil || len(c.ChangedKeys()) != 1 {
			t.Fatalf("Plan, cached %v: %+v, %v", cached, c, err)
		}
	}
	// After the cache's resourceVersion: the watch brings it.
	c, err := fresh.PlanResume(metaList("40", map[string]string{"a": "30"}), key, "22", "22", maps.All(map[string]string{"ns/a": "3"}))
	if err != nil || c.Changed != 1 {
		t.Fatalf("a change after the resume point: %+v, %v", c, err)
	}
}

// TestRegressionCatchupMissed: the watch passing R (an event or a
// bookmark at or after it) while keys the list named were never brought
// is not one history: Missed names them (the catch-up was done, silently,
// and the informer fresh without them).
func TestRegressionCatchupMissed(t *testing.T) {
	plan := func() *fresh.Catchup {
		c, err := fresh.PlanResume(metaList("30", map[string]string{"a": "25", "b": "30"}), key, "20", "20", maps.All(map[string]string{"ns/gone": "5", "ns/a": "4"}))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := plan()
	if c.Observe("ns/a", "25", false) || !c.Observe("ns/c", "31", false) {
		t.Fatal("an event past R must complete the catch-up")
	}
	if m := c.Missed(); len(m) != 2 || m[0] != "ns/b" || m[1] != "ns/gone" {
		t.Fatalf("missed %v, want ns/b and ns/gone", m)
	}
	c = plan()
	if !c.ObserveProgress("30") || len(c.Missed()) != 3 {
		t.Fatalf("a bookmark at R with 3 keys pending: missed %v", c.Missed())
	}
	// The write at R is in the list: its own key is not missed.
	c = plan()
	c.Observe("ns/a", "25", false)
	c.Observe("ns/gone", "29", true)
	if !c.Observe("ns/b", "30", false) || len(c.Missed()) != 0 {
		t.Fatalf("the event at R brought the last key: missed %v", c.Missed())
	}
}
