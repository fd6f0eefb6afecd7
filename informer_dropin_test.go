package boltinformer_test

// Drop-in (invariant 3 of docs/ARCHITECTURE.md): the
// cache.SharedIndexInformer API behaves like client-go's: every check runs
// against both.

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/internal/testobj"
	"github.com/boltinformer/boltinformer/recovery/crashtest"
)

// implementations build an informer of each kind on src; resync is the
// default handler resync period.
func implementations() map[string]func(t *testing.T, src cache.ListerWatcher, resync time.Duration) cache.SharedIndexInformer {
	ours := func(mode boltinformer.InformerOptions) func(t *testing.T, src cache.ListerWatcher, resync time.Duration) cache.SharedIndexInformer {
		return func(t *testing.T, src cache.ListerWatcher, resync time.Duration) cache.SharedIndexInformer {
			db, err := boltinformer.Open(filepath.Join(t.TempDir(), "cache.db"), &boltinformer.Options{NoSync: true, Logger: &quietLogger})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			inf, err := db.NewInformer("pods", src, &corev1.Pod{}, resync, podIndexers(), &mode)
			if err != nil {
				t.Fatal(err)
			}
			return inf
		}
	}
	return map[string]func(t *testing.T, src cache.ListerWatcher, resync time.Duration) cache.SharedIndexInformer{
		"client-go": func(_ *testing.T, src cache.ListerWatcher, resync time.Duration) cache.SharedIndexInformer {
			return cache.NewSharedIndexInformer(src, &corev1.Pod{}, resync, podIndexers())
		},
		"full":    ours(boltinformer.InformerOptions{}),
		"bounded": ours(boltinformer.InformerOptions{Memory: boltinformer.BoundedMemory, CacheSize: 2}),
	}
}

func podSource(t *testing.T, n int) *crashtest.Source {
	t.Helper()
	src := newPodSource()
	for i := range n {
		if _, err := src.Create(testobj.Pod(i, 3, 2, "")); err != nil {
			t.Fatal(err)
		}
	}
	return src
}

// forEach runs f as a subtest for each implementation (after the
// informers of the previous subtests are stopped).
func forEach(t *testing.T, f func(t *testing.T, build func(src cache.ListerWatcher, resync time.Duration) cache.SharedIndexInformer)) {
	for name, newInf := range implementations() {
		t.Run(name, func(t *testing.T) {
			f(t, func(src cache.ListerWatcher, resync time.Duration) cache.SharedIndexInformer {
				return newInf(t, src, resync)
			})
		})
	}
}

func TestDropInLifecycle(t *testing.T) {
	forEach(t, func(t *testing.T, build func(cache.ListerWatcher, time.Duration) cache.SharedIndexInformer) {
		src := podSource(t, 5)
		inf := build(src, 0)
		if inf.HasSynced() || inf.IsStopped() || inf.LastSyncResourceVersion() != "" {
			t.Fatalf("before Run: synced %v, stopped %v, rv %q", inf.HasSynced(), inf.IsStopped(), inf.LastSyncResourceVersion())
		}
		var errs atomic.Int64
		if err := inf.SetWatchErrorHandlerWithContext(func(context.Context, *cache.Reflector, error) { errs.Add(1) }); err != nil {
			t.Fatal(err)
		}
		src.SetDown(true)
		stop := runInformer(t, inf)
		waitFor(t, "the watch error handler", func() bool { return errs.Load() > 0 })
		if err := inf.SetTransform(func(o any) (any, error) { return o, nil }); err == nil {
			t.Error("SetTransform after Run: no error")
		}
		if err := inf.SetWatchErrorHandler(func(*cache.Reflector, error) {}); err == nil {
			t.Error("SetWatchErrorHandler after Run: no error")
		}
		src.SetDown(false)
		waitFor(t, "HasSynced", inf.HasSynced)
		if inf.LastSyncResourceVersion() != src.ResourceVersion() {
			t.Errorf("LastSyncResourceVersion %q, want %q", inf.LastSyncResourceVersion(), src.ResourceVersion())
		}
		if !inf.GetController().HasSynced() {
			t.Error("GetController().HasSynced false")
		}
		inf.GetController().Run(make(chan struct{})) // a no-op, as in client-go
		if err := inf.AddIndexers(cache.Indexers{"node": func(o any) ([]string, error) {
			return []string{o.(*corev1.Pod).Spec.NodeName}, nil
		}}); err != nil {
			t.Fatalf("AddIndexers while running: %v", err)
		}
		if keys, err := inf.GetIndexer().IndexKeys("node", "node-1"); err != nil || len(keys) != 2 {
			t.Fatalf("backfilled index: %v, %v; want 2 keys", keys, err)
		}
		stop()
		if !inf.IsStopped() {
			t.Error("IsStopped false after stop")
		}
		if _, err := inf.AddEventHandler(newEvRecorder("late")); err == nil {
			t.Error("AddEventHandler after stop: no error")
		}
		if err := inf.AddIndexers(cache.Indexers{"x": cache.MetaNamespaceIndexFunc}); err == nil {
			t.Error("AddIndexers after stop: no error")
		}
	})
}

// blocker is a handler whose OnAdd waits for release.
type blocker struct {
	*evRecorder
	release chan struct{}
	once    sync.Once
}

func (b *blocker) OnAdd(obj any, initial bool) {
	<-b.release
	b.evRecorder.OnAdd(obj, initial)
}

func (b *blocker) open() { b.once.Do(func() { close(b.release) }) }

func TestDropInHandlerHasSynced(t *testing.T) {
	forEach(t, func(t *testing.T, build func(cache.ListerWatcher, time.Duration) cache.SharedIndexInformer) {
		src := podSource(t, 4)
		inf := build(src, 0)
		early := &blocker{evRecorder: newEvRecorder("early"), release: make(chan struct{})}
		defer early.open()
		regEarly, err := inf.AddEventHandler(early)
		if err != nil {
			t.Fatal(err)
		}
		runInformer(t, inf)
		waitFor(t, "HasSynced", inf.HasSynced)
		// The informer has synced, the handler has not handled its initial
		// list: its registration is not synced.
		if regEarly.HasSynced() {
			t.Fatal("registration synced before its handler handled the initial list")
		}
		early.open()
		waitFor(t, "the registration to sync", regEarly.HasSynced)
		if n := early.len(); n != 4 {
			t.Fatalf("%d events at sync, want the 4 initial adds", n)
		}

		late := &blocker{evRecorder: newEvRecorder("late"), release: make(chan struct{})}
		defer late.open()
		regLate, err := inf.AddEventHandler(late)
		if err != nil {
			t.Fatal(err)
		}
		if regLate.HasSynced() {
			t.Fatal("late registration synced before its handler handled the initial list")
		}
		late.open()
		waitFor(t, "the late registration to sync", regLate.HasSynced)
		for _, e := range late.events() {
			if e.Kind != "add" || !e.Initial {
				t.Fatalf("late handler: %s", e)
			}
		}
		if err := inf.RemoveEventHandler(regLate); err != nil {
			t.Fatal(err)
		}
		if _, err := src.Create(testobj.Pod(50, 3, 2, "")); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the early handler to get the add", func() bool { return early.saw("ns-2/pod-000050") })
		if late.saw("ns-2/pod-000050") {
			t.Fatal("a removed handler got an event")
		}
	})
}

func TestDropInTransform(t *testing.T) {
	forEach(t, func(t *testing.T, build func(cache.ListerWatcher, time.Duration) cache.SharedIndexInformer) {
		src := podSource(t, 3)
		inf := build(src, 0)
		if err := inf.SetTransform(dropAnnotations); err != nil {
			t.Fatal(err)
		}
		rec := newEvRecorder("h")
		if _, err := inf.AddEventHandler(rec); err != nil {
			t.Fatal(err)
		}
		runInformer(t, inf)
		waitFor(t, "HasSynced", inf.HasSynced)
		if _, err := src.Update(bumpPod(src.Objects()["ns-0/pod-000000"], 1)); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the update", func() bool { return rec.len() == 4 })
		for _, e := range rec.events() {
			for _, o := range []any{e.Obj, e.Old} {
				if p, ok := o.(*corev1.Pod); ok && p.Annotations != nil {
					t.Fatalf("%s: handler got an untransformed object", e)
				}
			}
		}
		for _, o := range inf.GetStore().List() {
			if o.(*corev1.Pod).Annotations != nil {
				t.Fatalf("store holds an untransformed %s", keyOf(o))
			}
		}
	})
}

// TestDropInResync: a handler with a resync period gets the objects again
// as updates with equal resourceVersions; one without does not.
func TestDropInResync(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a one-second resync")
	}
	forEach(t, func(t *testing.T, build func(cache.ListerWatcher, time.Duration) cache.SharedIndexInformer) {
		src := podSource(t, 3)
		inf := build(src, time.Second)
		syncing, quiet := newEvRecorder("syncing"), newEvRecorder("quiet")
		if _, err := inf.AddEventHandler(syncing); err != nil {
			t.Fatal(err)
		}
		if _, err := inf.AddEventHandlerWithResyncPeriod(quiet, 0); err != nil {
			t.Fatal(err)
		}
		runInformer(t, inf)
		waitFor(t, "a resync of every object", func() bool { return syncing.len() >= 6 })
		for _, e := range syncing.events()[3:6] {
			if e.Kind != "update" || rvOf(e.Old) != rvOf(e.Obj) {
				t.Fatalf("resync: %s", e)
			}
		}
		// A change after the resync reaches both; the quiet handler has
		// only the adds before it.
		if _, err := src.Create(testobj.Pod(9, 3, 2, "")); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the add", func() bool { return quiet.saw("ns-0/pod-000009") })
		for _, e := range quiet.events() {
			if e.Kind != "add" {
				t.Fatalf("handler without resync: %s", e)
			}
		}
	})
}
