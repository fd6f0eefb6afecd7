package e2e

import (
	"context"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/internal/switchtest"
	persistentprogram "github.com/boltinformer/boltinformer/internal/switchtest/persistent"
)

// TestSwitchProgram: a program written for client-go's informer factory
// (internal/switchtest/clientgo) and the same program switched to
// boltinformer by its one constructor line (internal/switchtest/persistent)
// run at once against the real kube-apiserver and observe the same
// objects, resourceVersions and handler events; the persistent one then
// restarts warm from its file.
func TestSwitchProgram(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute) // a bound against a hang
	defer cancel()
	c := newChecker(t)
	ns := c.namespace(t, "switch")
	client, err := kubernetes.NewForConfig(cluster.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := switchtest.Create(ctx, client, ns); err != nil {
		t.Fatal(err)
	}
	path := cachePath(t)
	db, err := boltinformer.Open(path, &boltinformer.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	clientGo, persistent, err := switchtest.RunBoth(ctx, client, db, ns)
	if err != nil {
		t.Fatal(err)
	}
	want := switchtest.Want
	want.Updated++ // the deleted Pod's deletionTimestamp, before the delete
	if got := switchtest.WithoutResourceVersions(clientGo); !reflect.DeepEqual(got, want) {
		t.Fatalf("client-go's factory saw %+v, want %+v", got, want)
	}
	if !reflect.DeepEqual(persistent, clientGo) {
		t.Fatalf("boltinformer's factory saw %+v, client-go's %+v", persistent, clientGo)
	}
	t.Logf("both saw %+v", clientGo)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	// The persistent program again, on its file: a warm start, and the
	// same objects (as initial adds from disk).
	db, err = boltinformer.Open(path, &boltinformer.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	warm := map[string]bool{}
	again, err := persistentprogram.Run(ctx, client, db, ns, func(context.Context) error { return nil }, func(o persistentprogram.Observation) bool {
		for _, inf := range db.Informers() {
			warm[inf.Name()] = inf.Decision().Warm
		}
		return o.Added == 5 && len(o.Pods) == 5
	})
	if err != nil {
		t.Fatal(err)
	}
	if !warm["v1/pods"] || !warm["v1/configmaps"] {
		t.Fatalf("second run: warm starts %v, want v1/pods and v1/configmaps warm", warm)
	}
	if again.Pods == nil || !reflect.DeepEqual(again.Pods, clientGo.Pods) || !reflect.DeepEqual(again.ConfigMaps, clientGo.ConfigMaps) {
		t.Fatalf("second run saw %+v, the first %+v", again, clientGo)
	}
}

// TestFactoryForClientFresh: a factory over a clientset (not a
// rest.Config) lists metadata through the clientset's HTTP client, so a
// warm start with SyncAfterFresh is fresh by the metadata diff, not by the
// first watch event's fallback.
func TestFactoryForClientFresh(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute) // a bound against a hang
	defer cancel()
	c := newChecker(t)
	ns := c.namespace(t, "fresh-client")
	client, err := kubernetes.NewForConfig(cluster.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := switchtest.Create(ctx, client, ns); err != nil {
		t.Fatal(err)
	}
	path := cachePath(t)
	life := func(wantWarm bool) {
		db, err := boltinformer.Open(path, &boltinformer.Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		f, err := boltinformer.NewFactoryForClient(db, client, &boltinformer.FactoryOptions{
			Namespace: ns,
			Informer:  boltinformer.InformerOptions{SyncPolicy: boltinformer.SyncAfterFresh},
		})
		if err != nil {
			t.Fatal(err)
		}
		lister := f.Core().V1().Pods().Lister()
		inf, err := f.PersistentInformer(&corev1.Pod{})
		if err != nil {
			t.Fatal(err)
		}
		if inf.Decision().Warm != wantWarm {
			t.Fatalf("decision %+v, want warm %t", inf.Decision(), wantWarm)
		}
		runCtx, stop := context.WithCancel(ctx)
		defer func() {
			stop()
			f.Shutdown()
		}()
		f.Start(runCtx.Done())
		for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
			if !ok {
				t.Fatalf("%v did not sync", typ)
			}
		}
		if pods, err := lister.List(labels.Everything()); err != nil || len(pods) != 5 {
			t.Fatalf("lister: %d pods, %v", len(pods), err)
		}
		if h := inf.Health(); !h.Fresh || h.FreshFallback != "" {
			t.Fatalf("health %+v: want fresh by the metadata list", h)
		}
	}
	life(false)
	life(true)
}
