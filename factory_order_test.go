package boltinformer_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/recovery/crashtest"
)

// TestFactoryInitialOrder (issue 25): with FactoryOptions.InitialOrder, a
// warm start hands the handlers every object of a lower-ranked informer
// (owners: ConfigMaps here) before any object of a higher-ranked one
// (dependents: Pods), as a controller manager's garbage collector needs;
// without it, both informers' initial lists go at once.
func TestFactoryInitialOrder(t *testing.T) {
	pods := podSource(t, 300)
	cms := crashtest.NewSource(func() runtime.Object { return &corev1.ConfigMapList{} })
	for i := range 300 {
		if _, err := cms.Create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprintf("cm-%03d", i)}}); err != nil {
			t.Fatal(err)
		}
	}
	handler := crashtest.NewHandler()
	handler.Serve(corev1.SchemeGroupVersion.WithResource("pods"), pods)
	handler.Serve(corev1.SchemeGroupVersion.WithResource("configmaps"), cms)
	srv := httptest.NewServer(handler)
	defer srv.Close()
	path := filepath.Join(t.TempDir(), "cache.db")
	// start runs the factory once; it returns the kinds of the initial
	// adds in the order the handlers got them.
	start := func(order func(schema.GroupVersionResource) int) []string {
		t.Helper()
		db, err := boltinformer.Open(path, &boltinformer.Options{Logger: &quietLogger, NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = db.Close() }()
		f, err := boltinformer.NewFactory(db, &rest.Config{Host: srv.URL}, &boltinformer.FactoryOptions{ClusterID: "test", InitialOrder: order})
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var got []string
		for _, kind := range []string{"Pod", "ConfigMap"} {
			var inf cache.SharedIndexInformer = f.Core().V1().Pods().Informer()
			if kind == "ConfigMap" {
				inf = f.Core().V1().ConfigMaps().Informer()
			}
			if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(any) {
				time.Sleep(100 * time.Microsecond) // a handler at work: the other list could overtake
				mu.Lock()
				got = append(got, kind)
				mu.Unlock()
			}}); err != nil {
				t.Fatal(err)
			}
		}
		if order != nil {
			for _, ex := range []runtime.Object{&corev1.Pod{}, &corev1.ConfigMap{}} {
				p, err := f.PersistentInformer(ex)
				if err != nil || !p.Decision().Warm {
					t.Fatalf("%T: not a warm persistent informer: %v %+v", ex, err, p.Decision())
				}
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		f.StartWithContext(ctx)
		defer f.Shutdown()
		defer cancel()
		for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
			if !ok {
				t.Fatalf("%v did not sync", typ)
			}
		}
		waitFor(t, "every initial add", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 600 })
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), got...)
	}
	start(nil) // cold: fills the file
	owners := func(gvr schema.GroupVersionResource) int {
		if gvr.Resource == "pods" {
			return 1
		}
		return 0
	}
	got := start(owners)
	for i, k := range got {
		if (i < 300) != (k == "ConfigMap") {
			t.Fatalf("initial add %d is a %s: every ConfigMap (rank 0) must come before any Pod (rank 1): %v", i, k, got[max(0, i-3):min(len(got), i+3)])
		}
	}
}
