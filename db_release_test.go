package boltinformer_test

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer"
)

// TestRegressionReleaseUnstartedInformer: an informer built and dropped
// before Run (controller-runtime's RemoveInformer before the cache
// started) kept its name until the DB closed, so building it again failed
// with ErrInformerExists. DB.Release gives the name back; the informer
// built again resumes the file, and the released one neither runs nor
// takes handlers.
func TestRegressionReleaseUnstartedInformer(t *testing.T) {
	f := newCacheFile(t, 10)
	db, err := boltinformer.Open(f.path, &boltinformer.Options{Logger: &quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	dropped, err := db.NewInformer("pods", f.src, &corev1.Pod{}, 0, podIndexers(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.NewInformer("pods", f.src, &corev1.Pod{}, 0, podIndexers(), nil); !errors.Is(err, boltinformer.ErrInformerExists) {
		t.Fatalf("second informer of the name before Release: %v, want ErrInformerExists", err)
	}
	if err := db.Release(dropped); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := db.Release(dropped); err != nil {
		t.Fatalf("second Release: %v", err)
	}
	if _, err := dropped.AddEventHandler(cache.ResourceEventHandlerFuncs{}); !errors.Is(err, boltinformer.ErrStopped) {
		t.Fatalf("AddEventHandler after Release: %v, want ErrStopped", err)
	}
	dropped.Run(make(chan struct{})) // returns at once
	again, err := db.NewInformer("pods", f.src, &corev1.Pod{}, 0, podIndexers(), nil)
	if err != nil {
		t.Fatalf("building the informer again after Release: %v", err)
	}
	if !again.Decision().Warm || again.Indexer().Len() != 10 {
		t.Fatalf("rebuilt informer: %+v with %d objects, want warm with 10", again.Decision(), again.Indexer().Len())
	}
	stop := runInformer(t, again)
	waitFor(t, "HasSynced", again.HasSynced)
	if err := db.Release(again); !errors.Is(err, boltinformer.ErrStarted) {
		t.Fatalf("Release of a running informer: %v, want ErrStarted", err)
	}
	stop()
	if err := db.Release(again); err != nil {
		t.Fatalf("Release after Run returned: %v", err)
	}
}
