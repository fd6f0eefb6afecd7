package boltinformer_test

// The persistent metadata informer factory (Factory.MetadataFactory):
// client-go's metadatainformer.SharedInformerFactory, as a controller
// manager's garbage collector and quota controller use it, warm-restarted
// from the factory's file.

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	metadatafake "k8s.io/client-go/metadata/fake"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/internal/testobj"
	"github.com/boltinformer/boltinformer/recovery/crashtest"
)

var podsGVR = corev1.SchemeGroupVersion.WithResource("pods")

// runMetadata starts the metadata factory of a factory of path over url,
// waits for its Pod informer to sync, and returns the keys its lister
// holds, the informer's decision, and how many managedFields entries the
// objects carry. Everything is shut down before it returns.
func runMetadata(t *testing.T, path, url string) (keys []string, d boltinformer.Decision, managed int) {
	t.Helper()
	db, err := boltinformer.Open(path, &boltinformer.Options{Logger: &quietLogger, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	f, err := boltinformer.NewFactory(db, &rest.Config{Host: url}, &boltinformer.FactoryOptions{
		Transform: trimManagedFields,
		Informer:  boltinformer.InformerOptions{TransformID: "trim", SyncPolicy: boltinformer.SyncAfterFresh},
	})
	if err != nil {
		t.Fatal(err)
	}
	var md metadatainformer.SharedInformerFactory
	if md, err = f.MetadataFactory(nil); err != nil {
		t.Fatal(err)
	}
	gi := md.ForResource(podsGVR)
	if md.ForResource(podsGVR).Informer() != gi.Informer() {
		t.Fatal("two informers for one resource")
	}
	inf := f.Informers()["metadata/v1/pods"]
	if inf == nil || gi.Informer() != inf {
		t.Fatalf("the metadata informer is not the persistent metadata/v1/pods: %T, %v", gi.Informer(), f.Informers())
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	f.StartWithContext(ctx)
	if inf.IsStopped() || len(f.WaitForCacheSync(ctx.Done())) != 0 {
		t.Fatal("the Factory's Start or WaitForCacheSync concerns the metadata informers")
	}
	md.Start(ctx.Done())
	defer f.Shutdown()
	defer cancel()
	if synced := md.WaitForCacheSync(ctx.Done()); len(synced) != 1 || !synced[podsGVR] {
		t.Fatalf("WaitForCacheSync: %v", synced)
	}
	objs, err := gi.Lister().List(labels.Everything())
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		m, ok := o.(*metav1.PartialObjectMetadata)
		if !ok {
			t.Fatalf("the metadata informer holds a %T", o)
		}
		keys = append(keys, m.Namespace+"/"+m.Name)
		managed += len(m.ManagedFields)
	}
	sort.Strings(keys)
	return keys, inf.Decision(), managed
}

func sourceKeys(src *crashtest.Source) []string {
	var keys []string
	for k := range src.Objects() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// TestMetadataFactoryWarmRestart: the metadata informers persist, with the
// factory's transform; a warm start resumes the watch without a list and
// brings what changed while down.
func TestMetadataFactoryWarmRestart(t *testing.T) {
	src := withManagedFields(t, 20)
	handler := crashtest.NewHandler()
	handler.Serve(podsGVR, src)
	srv := httptest.NewServer(handler)
	defer srv.Close()
	path := filepath.Join(t.TempDir(), "cache.db")

	keys, d, managed := runMetadata(t, path, srv.URL)
	if d.Warm || len(keys) != 20 || managed != 0 {
		t.Fatalf("cold start: %+v, %d objects, %d managedFields entries; want cold, 20, 0", d, len(keys), managed)
	}
	// While down: two deleted, one created.
	for _, k := range sourceKeys(src)[:2] {
		if err := src.Delete(k); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := src.Create(testobj.Pod(100, 3, 2, "")); err != nil {
		t.Fatal(err)
	}
	src.ResetCalls()
	keys, d, _ = runMetadata(t, path, srv.URL)
	if !d.Warm {
		t.Fatalf("second start not warm: %+v", d)
	}
	if want := sourceKeys(src); !equalStrings(keys, want) {
		t.Fatalf("after the warm start the cache holds %v, want %v", keys, want)
	}
	if c := src.Calls(); c.Lists != 0 {
		t.Fatalf("the warm start listed every object: %+v", c)
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestMetadataFactoryClient: without a REST transport the factory needs a
// metadata client; given one (here the fake), it persists through it; a
// second call naming another client is an error.
func TestMetadataFactoryClient(t *testing.T) {
	db, _ := openFactoryDB(t)
	f, err := boltinformer.NewFactoryForClient(db, fake.NewClientset(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.MetadataFactory(nil); err == nil {
		t.Fatal("MetadataFactory(nil) over the fake clientset: no error")
	}
	s := runtime.NewScheme()
	if err := metav1.AddMetaToScheme(s); err != nil {
		t.Fatal(err)
	}
	pod := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p"}}
	client := metadatafake.NewSimpleMetadataClient(s, pod)
	md, err := f.MetadataFactory(client)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := f.MetadataFactory(nil); err != nil || again != md {
		t.Fatalf("MetadataFactory(nil) after one was made: %v, %v", again, err)
	}
	if _, err := f.MetadataFactory(metadatafake.NewSimpleMetadataClient(s)); err == nil {
		t.Fatal("MetadataFactory with another client: no error")
	}
	gi := md.ForResource(podsGVR)
	if _, ok := gi.Informer().(*boltinformer.Informer); !ok {
		t.Fatalf("informer %T, want persistent", gi.Informer())
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	md.Start(ctx.Done())
	defer md.Shutdown()
	defer cancel()
	if synced := md.WaitForCacheSync(ctx.Done()); !synced[podsGVR] {
		t.Fatalf("WaitForCacheSync: %v", synced)
	}
	if objs, err := gi.Lister().ByNamespace("a").List(labels.Everything()); err != nil || len(objs) != 1 {
		t.Fatalf("lister: %v, %v", objs, err)
	}
}
