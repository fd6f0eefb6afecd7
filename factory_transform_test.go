package boltinformer_test

// A factory-wide transform (client-go's informers.WithTransform) and an
// informer name (informers.WithInformerName), as kube-controller-manager
// builds its factory: objects are stored after the transform, under its
// fingerprint.

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/recovery/crashtest"
)

// trimManagedFields is kube-controller-manager's transform.
func trimManagedFields(obj any) (any, error) {
	if a, err := meta.Accessor(obj); err == nil && a.GetManagedFields() != nil {
		a.SetManagedFields(nil)
	}
	return obj, nil
}

// withManagedFields returns a Pod source whose n Pods carry managedFields.
func withManagedFields(t *testing.T, n int) *crashtest.Source {
	t.Helper()
	src := podSource(t, n)
	for _, o := range src.Objects() {
		p := o.(*corev1.Pod).DeepCopy()
		p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply, APIVersion: "v1"}}
		if _, err := src.Update(p); err != nil {
			t.Fatal(err)
		}
	}
	return src
}

// runPods starts a factory of db over srv with opts, waits for its Pod
// informer to sync, and returns the Pods its lister holds and the
// informer's decision; the factory is shut down before it returns.
func runPods(t *testing.T, path, url string, opts *boltinformer.FactoryOptions) ([]*corev1.Pod, boltinformer.Decision) {
	t.Helper()
	db, err := boltinformer.Open(path, &boltinformer.Options{Logger: &quietLogger, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	f, err := boltinformer.NewFactory(db, &rest.Config{Host: url}, opts)
	if err != nil {
		t.Fatal(err)
	}
	lister := f.Core().V1().Pods().Lister()
	inf, err := f.PersistentInformer(&corev1.Pod{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	f.StartWithContext(ctx)
	defer f.Shutdown()
	defer cancel()
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("%v did not sync", typ)
		}
	}
	pods, err := lister.List(labels.Everything())
	if err != nil {
		t.Fatal(err)
	}
	return pods, inf.Decision()
}

func managedFieldsOf(pods []*corev1.Pod) int {
	n := 0
	for _, p := range pods {
		n += len(p.ManagedFields)
	}
	return n
}

// TestFactoryTransform: FactoryOptions.Transform applies to every informer
// of the factory, the objects are stored transformed (a warm start serves
// them from the file without managedFields), and the file is resumed only
// under the same Informer.TransformID.
func TestFactoryTransform(t *testing.T) {
	src := withManagedFields(t, 10)
	handler := crashtest.NewHandler()
	handler.Serve(corev1.SchemeGroupVersion.WithResource("pods"), src)
	srv := httptest.NewServer(handler)
	defer srv.Close()
	path := filepath.Join(t.TempDir(), "cache.db")
	trim := func(id string) *boltinformer.FactoryOptions {
		return &boltinformer.FactoryOptions{Transform: trimManagedFields, Informer: boltinformer.InformerOptions{TransformID: id}}
	}

	if pods, _ := runPods(t, path, srv.URL, nil); len(pods) != 10 || managedFieldsOf(pods) != 10 {
		t.Fatalf("without a transform: %d Pods, %d managedFields entries; want 10 and 10", len(pods), managedFieldsOf(pods))
	}
	pods, d := runPods(t, path, srv.URL, trim("trim/v1"))
	if d.Warm || d.Reason != boltinformer.ReasonTransform {
		t.Fatalf("the file saved without a transform was resumed with one: %+v", d)
	}
	if len(pods) != 10 || managedFieldsOf(pods) != 0 {
		t.Fatalf("with the transform: %d Pods, %d managedFields entries; want 10 and 0", len(pods), managedFieldsOf(pods))
	}
	src.SetDown(true) // the warm start serves the file alone
	pods, d = runPodsOffline(t, path, srv.URL, trim("trim/v1"))
	if !d.Warm || len(pods) != 10 || managedFieldsOf(pods) != 0 {
		t.Fatalf("warm start from the file: %+v, %d Pods, %d managedFields entries; want warm, 10 and 0", d, len(pods), managedFieldsOf(pods))
	}
	src.SetDown(false)
	if _, d = runPods(t, path, srv.URL, trim("trim/v2")); d.Warm || d.Reason != boltinformer.ReasonTransform {
		t.Fatalf("another TransformID resumed the file: %+v", d)
	}
}

// runPodsOffline is runPods with SyncAfterDiskLoad, whose informer syncs
// from the file while the server is down.
func runPodsOffline(t *testing.T, path, url string, opts *boltinformer.FactoryOptions) ([]*corev1.Pod, boltinformer.Decision) {
	t.Helper()
	o := *opts
	o.ClusterID = "crashtest-cluster" // no lookup while down
	o.Informer.SyncPolicy = boltinformer.SyncAfterDiskLoad
	return runPods(t, path, url, &o)
}

// TestFactoryTransformErrors: a transform without its fingerprint is an
// error (a file saved with another transform would be resumed as this
// one's).
func TestFactoryTransformErrors(t *testing.T) {
	db, _ := openFactoryDB(t)
	_, err := boltinformer.NewFactoryForClient(db, fake.NewClientset(), &boltinformer.FactoryOptions{Transform: trimManagedFields})
	if err == nil || !strings.Contains(err.Error(), "TransformID") {
		t.Fatalf("Transform without Informer.TransformID: error %v, want one naming TransformID", err)
	}
}

// TestFactoryTransformInMemory: an informer the factory keeps in memory
// (client-go's own) gets the transform too, as in client-go's factory.
func TestFactoryTransformInMemory(t *testing.T) {
	db, _ := openFactoryDB(t)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}}}}
	client := fake.NewClientset(pod)
	f, err := boltinformer.NewFactoryForClient(db, client, &boltinformer.FactoryOptions{
		Transform: trimManagedFields, Informer: boltinformer.InformerOptions{TransformID: "trim"},
	})
	if err != nil {
		t.Fatal(err)
	}
	// An informer that lists through something else than the client it is
	// given: the factory keeps it in memory.
	lw := &cache.ListWatch{ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		return client.CoreV1().Pods("").List(ctx, o)
	}, WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
		return client.CoreV1().Pods("").Watch(ctx, o)
	}}
	inf := f.InformerFor(&corev1.Pod{}, func(kubernetes.Interface, time.Duration) cache.SharedIndexInformer {
		return cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, client), &corev1.Pod{}, 0, cache.Indexers{})
	})
	if _, err := f.PersistentInformer(&corev1.Pod{}); err == nil {
		t.Fatal("the informer listing through another client is persistent")
	}
	startFactory(t, f)
	objs := inf.GetStore().List()
	if len(objs) != 1 || len(objs[0].(*corev1.Pod).ManagedFields) != 0 {
		t.Fatalf("in-memory informer holds %v, want the Pod without managedFields", objs)
	}
}

// TestFactoryInformerName: the factory reports the informer name it was
// given (generated informers register their resource under it for
// client-go's informer metrics), its probe does not register under it,
// and Shutdown releases it, as client-go's factory does.
func TestFactoryInformerName(t *testing.T) {
	db, _ := openFactoryDB(t)
	name, err := cache.NewInformerName("boltinformer-test-factory")
	if err != nil {
		t.Fatal(err)
	}
	f, err := boltinformer.NewFactoryForClient(db, fake.NewClientset(fakeObjects()...), &boltinformer.FactoryOptions{InformerName: name})
	if err != nil {
		t.Fatal(err)
	}
	if f.InformerName() != name {
		t.Fatalf("InformerName() %v, want the one given", f.InformerName())
	}
	_ = f.Core().V1().Pods().Informer()
	// The probe built a generated informer without the name: the resource
	// is still free under it.
	if id := name.WithResource(corev1.SchemeGroupVersion.WithResource("pods")); !id.Reserved() {
		t.Fatal("pods were registered under the informer name by the probe")
	}
	stop := startFactory(t, f)
	stop()
	if _, err := cache.NewInformerName("boltinformer-test-factory"); err != nil {
		t.Fatalf("the name is still taken after Shutdown: %v", err)
	}
}
