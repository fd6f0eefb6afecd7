package boltinformer_test

// Index function errors (issue 14, item 4): an object an index function
// fails on is applied, persisted and delivered; the error is reported to
// the watch error handler, a counter, Health and Healthy. Nothing reports
// synced with notifications dropped.

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/internal/testobj"
)

var errNoApp = errors.New("pod has no app label")

// appIndex indexes Pods by their app label and fails for a Pod without
// one.
func appIndex(obj any) ([]string, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, nil
	}
	app, ok := p.Labels["app"]
	if !ok {
		return nil, errNoApp
	}
	return []string{app}, nil
}

// withApp returns pod i, labelled app=web unless app is "" (then the
// index function fails on it).
func withApp(i int, app string) *corev1.Pod {
	p := testobj.Pod(i, 1, 1, "")
	p.Labels = map[string]string{"i": "x"}
	if app != "" {
		p.Labels["app"] = app
	}
	return p
}

// errorLog records what the watch error handler gets.
type errorLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errorLog) handle(_ context.Context, _ *cache.Reflector, err error) {
	l.mu.Lock()
	l.errs = append(l.errs, err)
	l.mu.Unlock()
}

// applyErrors returns the ApplyErrors received so far.
func (l *errorLog) applyErrors() []*boltinformer.ApplyError {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*boltinformer.ApplyError
	for _, err := range l.errs {
		var ae *boltinformer.ApplyError
		if errors.As(err, &ae) {
			out = append(out, ae)
		}
	}
	return out
}

func TestRegressionIndexErrorsDeliverAndReport(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache.db")
	src := newPodSource()
	var bad []string
	for i := 0; i < 6; i++ {
		app := "web"
		if i%3 == 0 {
			app = ""
		}
		obj, err := src.Create(withApp(i, app))
		if err != nil {
			t.Fatal(err)
		}
		if app == "" {
			bad = append(bad, keyOf(obj))
		}
	}
	reg := prometheus.NewRegistry()
	db, err := boltinformer.Open(path, &boltinformer.Options{Logger: &quietLogger, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	indexers := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc, "app": appIndex}
	inf, err := db.NewInformer("pods", src, &corev1.Pod{}, 0, indexers, &boltinformer.InformerOptions{Logger: &quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	rec := newEvRecorder("h")
	reg1, err := inf.AddEventHandler(rec)
	if err != nil {
		t.Fatal(err)
	}
	var wlog errorLog
	if err := inf.SetWatchErrorHandlerWithContext(wlog.handle); err != nil {
		t.Fatal(err)
	}
	stop := runInformer(t, inf)

	// The list: every object applied and delivered before the handler
	// reports synced; the two failures reported once, as one list.
	waitFor(t, "the handler's sync", reg1.HasSynced)
	if n := rec.len(); n != 6 {
		t.Fatalf("handler synced with %d of the list's 6 adds: %v", n, rec.events())
	}
	if n := len(inf.GetStore().ListKeys()); n != 6 {
		t.Fatalf("%d objects in the cache, want 6", n)
	}
	waitFor(t, "the list's report", func() bool { return len(wlog.applyErrors()) == 1 })
	ae := wlog.applyErrors()[0]
	if ae.IndexFailures != 2 || ae.Refusals != 0 || !errors.Is(ae, boltinformer.ErrApply) || !errors.Is(ae, boltinformer.ErrIndexFunc) || !errors.Is(ae, errNoApp) {
		t.Errorf("list report: %+v (%v)", ae, ae)
	}
	var keys []string
	for _, e := range ae.Errors {
		// The root package's type (it was indexer's: the layer below).
		var ie *boltinformer.IndexFuncError
		if errors.As(e, &ie) && ie.Index == "app" && errors.Is(ie, boltinformer.ErrIndexFunc) && errors.Is(ie, errNoApp) {
			keys = append(keys, ie.Key)
		}
	}
	slices.Sort(keys)
	if !slices.Equal(keys, bad) {
		t.Errorf("list report names %v, want %v", keys, bad)
	}
	h := inf.Health()
	if h.IndexErrorObjects != 2 || h.ApplyError == "" {
		t.Errorf("Health after the list: %d objects with index errors, error %q", h.IndexErrorObjects, h.ApplyError)
	}
	if err := db.Healthy(); !errors.Is(err, boltinformer.ErrUnhealthy) {
		t.Errorf("Healthy with objects lacking index values: %v", err)
	}
	if v := mustMetric(t, reg, "boltinformer_index_errors_total", map[string]string{"informer": "pods"}); v != 2 {
		t.Errorf("index_errors_total %v after the list, want 2", v)
	}

	// A single watch event whose object the index function fails on: the
	// update is applied and delivered, and reported.
	upd := withApp(1, "")
	upd.ResourceVersion = ""
	updated, err := src.Update(upd)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the failing update delivered", func() bool {
		evs := rec.events()
		last := evs[len(evs)-1]
		return last.Kind == "update" && last.Key == keyOf(updated) && rvOf(last.Obj) == rvOf(updated)
	})
	if !storeHas(inf.GetStore(), keyOf(updated), rvOf(updated)) {
		t.Fatal("the failing update is not in the cache")
	}
	waitFor(t, "the event's report", func() bool { return len(wlog.applyErrors()) == 2 })
	if ae := wlog.applyErrors()[1]; ae.IndexFailures != 1 || !errors.Is(ae, errNoApp) {
		t.Errorf("event report: %+v", ae)
	}
	if n := inf.Health().IndexErrorObjects; n != 3 {
		t.Errorf("Health: %d objects with index errors, want 3", n)
	}
	if got, _ := inf.GetIndexer().IndexKeys("app", "web"); len(got) != 3 {
		t.Errorf("app=web: %v, want the 3 indexed Pods", got)
	}

	// Fixed objects are indexed and the informer healthy again.
	for _, key := range append(bad, keyOf(updated)) {
		obj := src.Objects()[key].(*corev1.Pod).DeepCopy()
		obj.Labels["app"] = "web"
		obj.ResourceVersion = ""
		if _, err := src.Update(obj); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "every object indexed", func() bool { return inf.Health().IndexErrorObjects == 0 })
	waitFor(t, "healthy", func() bool { return db.Healthy() == nil })
	if got, _ := inf.GetIndexer().IndexKeys("app", "web"); len(got) != 6 {
		t.Errorf("app=web: %v, want all 6", got)
	}
	checkConsistent(t, "h", rec.events())
	if d := diffObjects(src.Objects(), checkConsistent(t, "h", rec.events()).list()); d != "" {
		t.Errorf("handler's objects differ from the server's: %s", d)
	}

	// The file holds what was delivered.
	stop()
	if err := db.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkFile(t, db)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = boltinformer.Open(path, &boltinformer.Options{Logger: &quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	inf, err = db.NewInformer("pods", src, &corev1.Pod{}, 0, indexers, &boltinformer.InformerOptions{Logger: &quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	if !inf.Decision().Warm {
		t.Fatalf("cold restart: %+v", inf.Decision())
	}
	if d := diffObjects(src.Objects(), inf.GetStore().List()); d != "" {
		t.Errorf("restarted cache differs from the server's: %s", d)
	}
}

// TestRegressionIndexErrorDuringRelist: a relist whose objects an index
// function fails on delivers every notification (deletions, updates,
// adds) and the cache reports synced only with them queued.
func TestRegressionIndexErrorDuringRelist(t *testing.T) {
	src := newPodSource()
	for i := 0; i < 4; i++ {
		if _, err := src.Create(withApp(i, "web")); err != nil {
			t.Fatal(err)
		}
	}
	db, err := boltinformer.Open(filepath.Join(t.TempDir(), "cache.db"), &boltinformer.Options{NoSync: true, Logger: &quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	gate := newGate(src)
	inf, err := db.NewInformer("pods", gate, &corev1.Pod{}, 0, cache.Indexers{"app": appIndex}, &boltinformer.InformerOptions{Logger: &quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	rec := newEvRecorder("h")
	if _, err := inf.AddEventHandler(rec); err != nil {
		t.Fatal(err)
	}
	var wlog errorLog
	if err := inf.SetWatchErrorHandlerWithContext(wlog.handle); err != nil {
		t.Fatal(err)
	}
	runInformer(t, inf)
	waitFor(t, "sync", inf.HasSynced)
	waitFor(t, "the initial adds", func() bool { return rec.len() == 4 })

	// While the watch is held: one Pod deleted, one made to fail the
	// index, one created failing; the compaction makes the next watch a
	// 410, answered by a relist.
	gate.holdWatches()
	src.CloseWatches()
	if err := src.Delete(keyOf(withApp(0, ""))); err != nil {
		t.Fatal(err)
	}
	upd := src.Objects()[keyOf(withApp(1, ""))].(*corev1.Pod).DeepCopy()
	delete(upd.Labels, "app")
	upd.ResourceVersion = ""
	if _, err := src.Update(upd); err != nil {
		t.Fatal(err)
	}
	if _, err := src.Create(withApp(9, "")); err != nil {
		t.Fatal(err)
	}
	src.Compact()
	lists := gate.lists.Load()
	gate.release()
	waitFor(t, "the relist", func() bool { return gate.lists.Load() > lists })
	want := map[string]runtime.Object{}
	for k, v := range src.Objects() {
		want[k] = v
	}
	waitFor(t, "the relist's notifications", func() bool {
		m := newModel()
		for _, e := range rec.events() {
			if m.apply(t, e) != nil {
				return false
			}
		}
		return diffObjects(want, m.list()) == ""
	})
	if d := diffObjects(want, inf.GetStore().List()); d != "" {
		t.Errorf("cache differs from the server: %s", d)
	}
	waitFor(t, "the relist's report", func() bool {
		for _, ae := range wlog.applyErrors() {
			if ae.IndexFailures == 2 {
				return true
			}
		}
		return false
	})
}
