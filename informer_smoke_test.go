package boltinformer_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/internal/testobj"
	"github.com/boltinformer/boltinformer/recovery/crashtest"
)

type recorder struct{ events chan string }

func (r recorder) OnAdd(obj any, initial bool) {
	r.events <- "add " + obj.(*corev1.Pod).Name
}
func (r recorder) OnUpdate(o, n any) { r.events <- "update " + n.(*corev1.Pod).Name }
func (r recorder) OnDelete(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		r.events <- "delete-unknown " + d.Key
		return
	}
	r.events <- "delete " + obj.(*corev1.Pod).Name
}

func TestSmokeWarmRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache.db")
	src := crashtest.NewSource(func() runtime.Object { return &corev1.PodList{} })
	for i := 0; i < 10; i++ {
		src.Create(testobj.Pod(i, 2, 1, ""))
	}
	run := func(wantWarm bool, check func(inf *boltinformer.Informer, rec recorder)) {
		db, err := boltinformer.Open(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		inf, err := db.NewInformer("pods", src, &corev1.Pod{}, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if inf.Decision().Warm != wantWarm {
			t.Fatalf("warm=%v, want %v (%s)", inf.Decision().Warm, wantWarm, inf.Decision().Detail)
		}
		rec := recorder{make(chan string, 1000)}
		inf.AddEventHandler(rec)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); inf.RunWithContext(ctx) }()
		if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			t.Fatal("no sync")
		}
		check(inf, rec)
		cancel()
		<-done
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	run(false, func(inf *boltinformer.Informer, rec recorder) {
		for i := 0; i < 10; i++ {
			t.Log(<-rec.events)
		}
		src.Delete("ns-0/pod-000000")
		t.Log(<-rec.events)
	})
	src.Delete("ns-1/pod-000001")
	src.ResetCalls()
	run(true, func(inf *boltinformer.Informer, rec recorder) {
		for i := 0; i < 9; i++ {
			t.Log(<-rec.events)
		}
		t.Log(<-rec.events)
		time.Sleep(100 * time.Millisecond)
		t.Logf("calls: %+v", src.Calls())
		if n := len(inf.GetIndexer().ListKeys()); n != 8 {
			t.Fatalf("keys %d", n)
		}
	})
	src.Delete("ns-1/pod-000003")
	src.Compact()
	src.ResetCalls()
	run(true, func(inf *boltinformer.Informer, rec recorder) {
		for i := 0; i < 8; i++ {
			t.Log(<-rec.events)
		}
		t.Log(<-rec.events)
		time.Sleep(100 * time.Millisecond)
		t.Logf("calls: %+v", src.Calls())
	})
}
