package boltinformer_test

// The factory on an edge agent that restarts while its API server is
// unreachable: the identity cannot be looked up, the file is trusted, the
// informers serve and report synced from disk, and the saved cluster
// identity survives.

import (
	"context"
	"net"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer"
)

// unreachable returns the URL of a local port nobody listens on.
func unreachable(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return "http://" + addr
}

func TestFactoryOfflineRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache.db")
	src := podSource(t, 6)

	// A previous run of the agent filled the file for informer "v1/pods",
	// as the factory names it, for cluster "uid-1".
	{
		db, err := boltinformer.Open(path, &boltinformer.Options{Logger: &quietLogger})
		if err != nil {
			t.Fatal(err)
		}
		inf, err := db.NewInformer("v1/pods", src, &corev1.Pod{}, 0, podIndexers(), &boltinformer.InformerOptions{
			ClusterID:   "uid-1",
			Resource:    schema.GroupVersionResource{Version: "v1", Resource: "pods"}.String(),
			ListOptions: boltinformer.ListOptionsFingerprint("", metav1.ListOptions{}),
		})
		if err != nil {
			t.Fatal(err)
		}
		stop := runInformer(t, inf)
		waitFor(t, "HasSynced", inf.HasSynced)
		stop()
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}

	db, err := boltinformer.Open(path, &boltinformer.Options{Logger: &quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if db != nil {
			_ = db.Close()
		}
	}()
	f, err := boltinformer.NewFactory(db, &rest.Config{Host: unreachable(t)}, &boltinformer.FactoryOptions{LookupTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if f.ClusterID() != "" {
		t.Fatalf("cluster %q looked up from an unreachable server", f.ClusterID())
	}
	inf, err := f.PersistentInformer(&corev1.Pod{})
	if err != nil {
		t.Fatal(err)
	}
	if again, err := f.PersistentInformer(&corev1.Pod{}); err != nil || again != inf {
		t.Fatalf("PersistentInformer again: %p, %v; want the same informer %p", again, err, inf)
	}
	if inf.Name() != "v1/pods" || !inf.Decision().Warm {
		t.Fatalf("informer %q, decision %+v: want a warm v1/pods", inf.Name(), inf.Decision())
	}
	checkLister(t, corev1listersFor(inf), src.Objects())
	dyn, err := f.DynamicInformer(schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if dyn.Name() != "dynamic/example.com/v1/widgets" || dyn.Decision().Warm {
		t.Fatalf("dynamic informer %q, decision %+v", dyn.Name(), dyn.Decision())
	}

	ctx, cancel := context.WithCancel(context.Background())
	f.StartWithContext(ctx)
	rec := newEvRecorder("agent")
	if _, err := inf.AddEventHandler(rec); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pods informer to sync from disk", inf.HasSynced)
	waitFor(t, "the cached pods to reach the handler", func() bool { return rec.len() == 6 })
	syncCtx, syncCancel := context.WithTimeout(ctx, time.Second)
	synced := f.WaitForCacheSyncWithContext(syncCtx)
	syncCancel()
	if !synced.Synced[reflect.TypeOf(&corev1.Pod{})] || synced.Synced[reflect.TypeOf(&unstructured.Unstructured{})] || synced.Err == nil {
		t.Fatalf("WaitForCacheSync %+v: want the warm pods synced and the cold widgets not", synced)
	}
	cancel()
	f.Shutdown()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	// The offline run did not erase the identity recorded at first sync.
	db, err = boltinformer.Open(path, &boltinformer.Options{Logger: &quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	st, _ := fileState(t, db, "v1/pods")
	if st.ClusterID != "uid-1" {
		t.Fatalf("saved cluster %q after an offline run, want uid-1", st.ClusterID)
	}
	other, err := db.NewInformer("v1/pods", src, &corev1.Pod{}, 0, podIndexers(), &boltinformer.InformerOptions{
		ClusterID:   "uid-2",
		Resource:    st.Resource,
		ListOptions: st.ListOptions,
	})
	if err != nil {
		t.Fatal(err)
	}
	if other.Decision().Warm {
		t.Fatalf("another cluster resumed the file: %+v", other.Decision())
	}
}

func corev1listersFor(inf cache.SharedIndexInformer) corev1listers.PodLister {
	return corev1listers.NewPodLister(inf.GetIndexer())
}
