package boltinformer_test

import (
	"path/filepath"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/internal/testobj"
	"github.com/boltinformer/boltinformer/recovery/crashtest"
)

// durableRun is one start of informer "pods" on path with a durable
// handler "h" (added before Run, or once synced when late) and a plain
// handler beside it.
type durableRun struct {
	db      *boltinformer.DB
	inf     *boltinformer.Informer
	durable *evRecorder
	reg     cache.ResourceEventHandlerRegistration
	plain   *evRecorder
	stop    func()
}

func startDurable(t *testing.T, path string, src *crashtest.Source, late bool) *durableRun {
	t.Helper()
	db, err := boltinformer.Open(path, &boltinformer.Options{NoSync: true, Logger: &quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	inf, err := db.NewInformer("pods", src, &corev1.Pod{}, 0, podIndexers(), &boltinformer.InformerOptions{Resource: "pods"})
	if err != nil {
		t.Fatal(err)
	}
	r := &durableRun{db: db, inf: inf, durable: newEvRecorder("durable"), plain: newEvRecorder("plain")}
	if _, err := inf.AddEventHandler(r.plain); err != nil {
		t.Fatal(err)
	}
	if !late {
		if r.reg, err = inf.AddDurableEventHandler("h", r.durable, cache.HandlerOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	stopRun := runInformer(t, inf)
	r.stop = func() {
		stopRun()
		if err := db.Close(); err != nil {
			t.Error(err)
		}
	}
	waitFor(t, "sync", inf.HasSynced)
	waitFor(t, "the informer at the source's resourceVersion", func() bool { return inf.Indexer().ResourceVersion() == src.ResourceVersion() })
	if late {
		if r.reg, err = inf.AddDurableEventHandler("h", r.durable, cache.HandlerOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the durable handler at the informer's resourceVersion", func() bool {
		return boltinformer.HandlerPosition(r.reg) == src.ResourceVersion()
	})
	return r
}

// TestDurableHandlerGetsOnlyWhatChanged (issue 24, item 3): a durable
// handler's position is kept in the file; at the next start it gets only
// what changed, appeared or vanished since (2 updates, 1 create, 1 delete
// of 30 Pods), added before Run (the warm start's initial adds held back)
// or after sync (a replay of the kept deletes and the changed objects),
// while a plain handler gets every object again.
func TestDurableHandlerGetsOnlyWhatChanged(t *testing.T) {
	for _, late := range []bool{false, true} {
		t.Run(map[bool]string{false: "before Run", true: "after sync"}[late], func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "cache.db")
			src := newPodSource()
			for i := range 30 {
				src.Create(testobj.Pod(i, 3, 2, ""))
			}
			first := startDurable(t, path, src, late)
			if n := first.durable.len(); n != 30 {
				t.Fatalf("first start: durable handler got %d notifications, want the 30 objects", n)
			}
			first.stop()
			if cp, ok := first.db.Checkpoint(boltinformer.DurableHandlerCheckpoint("pods", "h")); !ok || cp.Positions["pods"] != src.ResourceVersion() {
				t.Fatalf("checkpoint after the stop: %+v, %v; want position %s", cp, ok, src.ResourceVersion())
			}

			keys := sortedKeys(src.Objects())
			for _, i := range []int{3, 7} {
				p := src.Objects()[keys[i]].(*corev1.Pod).DeepCopy()
				p.Labels["changed"] = "yes"
				src.Update(p)
			}
			if err := src.Delete(keys[11]); err != nil {
				t.Fatal(err)
			}
			src.Create(testobj.Pod(100, 3, 2, ""))

			second := startDurable(t, path, src, late)
			defer second.stop()
			waitFor(t, "the plain handler's 30 initial adds and the changes", func() bool { return second.plain.len() >= 30 })
			got := map[string][]string{}
			for _, e := range second.durable.events() {
				got[e.Kind] = append(got[e.Kind], e.Key)
				if e.Kind == "add" && e.Initial {
					t.Errorf("durable handler got %s as an initial add: changed objects come as plain adds", e.Key)
				}
			}
			for _, k := range []string{"add", "update", "delete"} {
				slices.Sort(got[k])
			}
			changed := []string{keys[3], keys[7], keyOf(testobj.Pod(100, 3, 2, ""))}
			slices.Sort(changed)
			var touched []string
			touched = append(append(touched, got["add"]...), got["update"]...)
			slices.Sort(touched)
			if !slices.Equal(touched, changed) || !slices.Equal(got["delete"], []string{keys[11]}) {
				t.Fatalf("durable handler at the second start: %v, want adds or updates of %v and the delete of %s", got, changed, keys[11])
			}
		})
	}
}

// TestChangedFirstLateHandler (issue 24, item 2): with ChangedFirst, a
// handler added after a warm start's sync gets the objects changed or
// created while the informer was down first, as adds not in the initial
// list, then the unchanged ones as initial adds; its HasSynced waits for
// the changed ones only (controller-runtime starts its workers on it).
// Without it, every object is an initial add, as in client-go.
func TestChangedFirstLateHandler(t *testing.T) {
	for _, first := range []bool{true, false} {
		t.Run(map[bool]string{true: "ChangedFirst", false: "client-go's order"}[first], func(t *testing.T) {
			f := newCacheFile(t, 50)
			keys := sortedKeys(f.src.Objects())
			for _, i := range []int{5, 20, 40} {
				p := f.src.Objects()[keys[i]].(*corev1.Pod).DeepCopy()
				p.Labels["changed"] = "yes"
				f.src.Update(p)
			}
			f.src.Create(testobj.Pod(100, 3, 2, ""))
			r := f.open(nil, &boltinformer.InformerOptions{ChangedFirst: first})
			r.run()
			r.waitSynced()
			waitFor(t, "the changes applied", func() bool { return r.inf.Indexer().ResourceVersion() == f.src.ResourceVersion() })
			late := newEvRecorder("late")
			reg, err := r.inf.AddEventHandler(late)
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the late handler's sync", reg.HasSynced)
			waitFor(t, "every object", func() bool { return late.len() == 51 })
			evs := late.events()
			if len(evs) != 51 {
				t.Fatalf("late handler got %d notifications, want 51", len(evs))
			}
			changed := map[string]bool{keys[5]: true, keys[20]: true, keys[40]: true, keyOf(testobj.Pod(100, 3, 2, "")): true}
			for i, e := range evs {
				isChanged := changed[e.Key]
				switch {
				case first && i < 4 && (!isChanged || e.Initial):
					t.Fatalf("notification %d: %+v; want the 4 changed objects first, not as initial adds", i, e)
				case first && i >= 4 && (isChanged || !e.Initial):
					t.Fatalf("notification %d: %+v; want the unchanged objects after, as initial adds", i, e)
				case !first && !e.Initial:
					t.Fatalf("notification %d: %+v; want every object as an initial add", i, e)
				}
			}
			r.close()
		})
	}
}
