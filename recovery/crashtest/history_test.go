package crashtest_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/boltinformer/boltinformer/recovery/crashtest"
)

func objects(m map[string]runtime.Object) []any {
	out := make([]any, 0, len(m))
	for _, o := range m {
		out = append(out, o)
	}
	return out
}

// TestHistoryMatchesReplay checks that StateAt, computed directly, is the
// state a Source reaches by replaying the events one by one, and that a
// Source built at a base resourceVersion agrees with both.
func TestHistoryMatchesReplay(t *testing.T) {
	h := crashtest.NewHistory(7, &crashtest.HistoryOptions{Keys: 40, Growth: 10, MaxKeys: 90, MaxPadding: 64})
	const n = 1200
	src := crashtest.NewSource(func() runtime.Object { return &corev1.PodList{} })
	types := map[watch.EventType]int{}
	for _, e := range h.Events(0, n) {
		types[e.Type]++
		if err := src.Apply(e); err != nil {
			t.Fatal(err)
		}
	}
	if types[watch.Added] == 0 || types[watch.Modified] == 0 || types[watch.Deleted] == 0 {
		t.Fatalf("event types %v", types)
	}
	for _, rv := range []int64{0, 1, 39, 40, 41, 333, 777, n} {
		if err := crashtest.Compare(objects(src.StateAt(rv)), h.StateAt(rv)); err != nil {
			t.Fatalf("rv %d: %v", rv, err)
		}
	}
	// A fresh History (no cache) agrees with the first, in any order.
	h2 := crashtest.NewHistory(7, &crashtest.HistoryOptions{Keys: 40, Growth: 10, MaxKeys: 90, MaxPadding: 64})
	if err := crashtest.Compare(objects(h2.StateAt(900)), h.StateAt(900)); err != nil {
		t.Fatal(err)
	}
	if e, want := h2.Event(512), h.Events(511, 512)[0]; e.Key != want.Key || e.Type != want.Type {
		t.Fatalf("event 512: %v %s, want %v %s", e.Type, e.Key, want.Type, want.Key)
	}
	s := h.Source(500, 800)
	if s.ResourceVersion() != "800" {
		t.Fatalf("source at %s", s.ResourceVersion())
	}
	for _, rv := range []int64{500, 650, 800} {
		if err := crashtest.Compare(objects(s.StateAt(rv)), h.StateAt(rv)); err != nil {
			t.Fatalf("source rv %d: %v", rv, err)
		}
	}
	if s.StateAt(499) != nil {
		t.Fatal("state before the base is known")
	}
	if err := crashtest.Compare(objects(s.Objects()), h.StateAt(800)); err != nil {
		t.Fatal(err)
	}
	if other := crashtest.NewHistory(8, &crashtest.HistoryOptions{Keys: 40, Growth: 10, MaxKeys: 90, MaxPadding: 64}); crashtest.Compare(objects(other.StateAt(300)), h.StateAt(300)) == nil {
		t.Fatal("seeds 7 and 8 have the same history")
	}
}
