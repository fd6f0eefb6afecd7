package boltinformer_test

// The factory as client-go's informers.SharedInformerFactory: the
// generated informer tree builds persistent informers of exactly the scope
// the generated code asked for (learned by the probe), shares one informer
// per type, keeps client-go's own informer in memory when it cannot, and
// works over the fake clientset.

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	corev1informers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer"
)

// fakePods returns Pods in namespaces a and b, half of them labeled
// app=web, and a ConfigMap and a Node.
func fakeObjects() []runtime.Object {
	var objs []runtime.Object
	for i, ns := range []string{"a", "a", "a", "b", "b"} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pod-" + string(rune('0'+i)), UID: "uid-pod"}}
		if i%2 == 0 {
			p.Labels = map[string]string{"app": "web"}
		}
		objs = append(objs, p)
	}
	objs = append(objs,
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "cm"}, Data: map[string]string{"k": "v"}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}})
	return objs
}

func openFactoryDB(t *testing.T) (*boltinformer.DB, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cache.db")
	db, err := boltinformer.Open(path, &boltinformer.Options{Logger: &quietLogger, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db, path
}

// startFactory starts f until the test ends (or the returned stop).
func startFactory(t *testing.T, f informers.SharedInformerFactory) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f.Start(ctx.Done())
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			cancel()
			f.Shutdown()
		}
	}
	t.Cleanup(stop)
	syncCtx, syncCancel := context.WithTimeout(ctx, waitTimeout)
	defer syncCancel()
	for typ, ok := range f.WaitForCacheSync(syncCtx.Done()) {
		if !ok {
			t.Fatalf("%v did not sync", typ)
		}
	}
	return stop
}

func podNames(t *testing.T, pods []*corev1.Pod) []string {
	t.Helper()
	out := make([]string, 0, len(pods))
	for _, p := range pods {
		out = append(out, p.Namespace+"/"+p.Name)
	}
	sort.Strings(out)
	return out
}

// The generated accessors give persistent informers, shared with
// PersistentInformer and ForResource, named as the factory names files,
// holding the fake clientset's objects.
func TestFactoryGeneratedInformersArePersistent(t *testing.T) {
	db, _ := openFactoryDB(t)
	client := fake.NewClientset(fakeObjects()...)
	f := boltinformer.NewSharedInformerFactory(db, client, 0)
	pods := f.Core().V1().Pods()
	nodes := f.Core().V1().Nodes().Lister()
	generic, err := f.ForResource(corev1.SchemeGroupVersion.WithResource("pods"))
	if err != nil {
		t.Fatal(err)
	}
	inf, err := f.PersistentInformer(&corev1.Pod{})
	if err != nil {
		t.Fatal(err)
	}
	if inf.Name() != "v1/pods" || inf.Resource() != "/v1, Resource=pods" {
		t.Fatalf("informer %q of %q, want v1/pods of /v1, Resource=pods", inf.Name(), inf.Resource())
	}
	if generic.Informer() != cache.SharedIndexInformer(inf) {
		t.Fatalf("ForResource's informer %T is not the accessor's", generic.Informer())
	}
	if got := f.Informers(); len(got) != 2 || got["v1/pods"] != inf || got["v1/nodes"] == nil {
		t.Fatalf("Informers() %v, want v1/pods and v1/nodes", got)
	}
	startFactory(t, f)
	all, err := pods.Lister().List(labels.Everything())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := podNames(t, all), []string{"a/pod-0", "a/pod-1", "a/pod-2", "b/pod-3", "b/pod-4"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("lister: %v, want %v", got, want)
	}
	web, err := pods.Lister().Pods("a").List(labels.SelectorFromSet(labels.Set{"app": "web"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := podNames(t, web); !reflect.DeepEqual(got, []string{"a/pod-0", "a/pod-2"}) {
		t.Fatalf("namespace lister with a selector: %v", got)
	}
	if n, err := nodes.Get("node-1"); err != nil || n.Name != "node-1" {
		t.Fatalf("node lister: %v, %v", n, err)
	}
	if o, err := generic.Lister().ByNamespace("b").Get("pod-3"); err != nil || o.(*corev1.Pod).Name != "pod-3" {
		t.Fatalf("generic lister: %v, %v", o, err)
	}
	// What the handlers and the file see: a change through the client.
	rec := newEvRecorder("h")
	if _, err := pods.Informer().AddEventHandler(rec); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the initial adds", func() bool { return rec.len() == 5 })
	if err := client.CoreV1().Pods("a").Delete(context.Background(), "pod-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the delete", func() bool { return rec.len() == 6 })
	if err := inf.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if h := inf.Health(); h.Objects != 4 || !h.Synced {
		t.Fatalf("health %+v, want 4 objects, synced", h)
	}
}

// A generated informer's namespace and tweak (corev1informers.New with
// its own) are the persistent informer's scope: what it lists and its
// identity.
func TestFactoryProbedScope(t *testing.T) {
	db, _ := openFactoryDB(t)
	client := fake.NewClientset(fakeObjects()...)
	f, err := boltinformer.NewFactoryForClient(db, client, nil)
	if err != nil {
		t.Fatal(err)
	}
	tweak := func(o *metav1.ListOptions) { o.LabelSelector = "app=web" }
	pods := corev1informers.New(f, "a", tweak).Pods()
	// The first InformerFor of a type decides its scope (as in client-go):
	// the accessor's, then PersistentInformer gets the same informer.
	if pods.Informer() == nil {
		t.Fatal("no informer")
	}
	inf, err := f.PersistentInformer(&corev1.Pod{})
	if err != nil {
		t.Fatal(err)
	}
	startFactory(t, f)
	all, err := pods.Lister().List(labels.Everything())
	if err != nil {
		t.Fatal(err)
	}
	if got := podNames(t, all); !reflect.DeepEqual(got, []string{"a/pod-0", "a/pod-2"}) {
		t.Fatalf("lister of namespace a, app=web: %v", got)
	}
	want := boltinformer.ListOptionsFingerprint("a", metav1.ListOptions{LabelSelector: "app=web"})
	if err := inf.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := inf.Indexer().SavedState(); st.ListOptions != want || st.Resource != "/v1, Resource=pods" {
		t.Fatalf("saved identity %q of %q, want %q", st.ListOptions, st.Resource, want)
	}
}

// An informer the factory cannot persist is client-go's own, in memory,
// and says why; it still serves. Cases: a NewInformerFunc that does not
// list through the client given, and a type no typed client lists.
func TestFactoryKeepsInMemoryWhatItCannotPersist(t *testing.T) {
	db, _ := openFactoryDB(t)
	client := fake.NewClientset(fakeObjects()...)
	f := boltinformer.NewSharedInformerFactory(db, client, 0)
	other := fake.NewClientset(fakeObjects()[:2]...)
	inf := f.InformerFor(&corev1.Pod{}, func(_ kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		return corev1informers.NewPodInformer(other, "", resync, cache.Indexers{})
	})
	if _, ok := inf.(*boltinformer.Informer); ok {
		t.Fatal("an informer over another client is persistent")
	}
	if _, err := f.PersistentInformer(&corev1.Pod{}); !errors.Is(err, boltinformer.ErrNotPersistent) {
		t.Fatalf("PersistentInformer: %v, want ErrNotPersistent", err)
	}
	odd := f.InformerFor(&metav1.Status{}, func(kubernetes.Interface, time.Duration) cache.SharedIndexInformer {
		return cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
			ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
				return &metav1.List{}, nil
			},
			WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) { return watch.NewFake(), nil },
		}, other), &metav1.Status{}, 0, nil)
	})
	if _, ok := odd.(*boltinformer.Informer); ok {
		t.Fatal("an informer of a type no client lists is persistent")
	}
	startFactory(t, f)
	if keys := inf.GetStore().ListKeys(); len(keys) != 2 {
		t.Fatalf("the in-memory informer holds %v, want the other client's 2 Pods", keys)
	}
	if len(f.Informers()) != 0 {
		t.Fatalf("persistent informers %v, want none", f.Informers())
	}
}

// NewSharedInformerFactory without a DB keeps every informer in memory,
// and works as client-go's factory.
func TestFactoryWithoutDBIsInMemory(t *testing.T) {
	client := fake.NewClientset(fakeObjects()...)
	f := boltinformer.NewSharedInformerFactory(nil, client, 0)
	pods := f.Core().V1().Pods().Lister()
	if _, err := f.PersistentInformer(&corev1.Pod{}); !errors.Is(err, boltinformer.ErrNotPersistent) {
		t.Fatalf("PersistentInformer: %v, want ErrNotPersistent", err)
	}
	if _, err := f.DynamicInformer(schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}, nil); !errors.Is(err, boltinformer.ErrNotPersistent) {
		t.Fatalf("DynamicInformer: %v, want ErrNotPersistent", err)
	}
	startFactory(t, f)
	all, err := pods.List(labels.Everything())
	if err != nil || len(all) != 5 {
		t.Fatalf("lister: %d pods, %v", len(all), err)
	}
}

// Over a client without a REST transport (the fake), the factory persists
// but never resumes: the fake's watch cannot resume from a
// resourceVersion (it does not replay deletions), so a restart over it
// relists and sees what was deleted while it was down.
func TestFactoryOverFakeClientNeverResumes(t *testing.T) {
	db, path := openFactoryDB(t)
	client := fake.NewClientset(fakeObjects()...)
	f := boltinformer.NewSharedInformerFactory(db, client, 0)
	lister := f.Core().V1().Pods().Lister()
	stop := startFactory(t, f)
	if all, _ := lister.List(labels.Everything()); len(all) != 5 {
		t.Fatalf("first life: %d pods", len(all))
	}
	stop()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := client.CoreV1().Pods("a").Delete(context.Background(), "pod-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	db2, err := boltinformer.Open(path, &boltinformer.Options{Logger: &quietLogger, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	f2 := boltinformer.NewSharedInformerFactory(db2, client, 0)
	lister2 := f2.Core().V1().Pods().Lister()
	inf, err := f2.PersistentInformer(&corev1.Pod{})
	if err != nil {
		t.Fatal(err)
	}
	if d := inf.Decision(); d.Warm || d.Reason != boltinformer.ReasonCluster {
		t.Fatalf("restart over the fake: %+v, want a cold start for the cluster identity", d)
	}
	startFactory(t, f2)
	if all, _ := lister2.List(labels.Everything()); len(all) != 4 {
		t.Fatalf("second life: %v, want the 4 Pods left", podNames(t, all))
	}
}

// FactoryOptions.Scopes apply to the group accessors: a generated
// informer that asks for the factory's scope gets its resource's entry;
// one built with a scope of its own keeps it.
func TestFactoryScopesApplyToGeneratedInformers(t *testing.T) {
	db, _ := openFactoryDB(t)
	client := fake.NewClientset(fakeObjects()...)
	f, err := boltinformer.NewFactoryForClient(db, client, &boltinformer.FactoryOptions{
		Scopes: map[string]boltinformer.Scope{
			"pods":       {Namespace: "b"},
			"configmaps": {Namespace: "b"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	pods := f.Core().V1().Pods().Lister()
	cms := corev1informers.New(f, "a", nil).ConfigMaps().Lister()
	startFactory(t, f)
	all, err := pods.List(labels.Everything())
	if err != nil {
		t.Fatal(err)
	}
	if got := podNames(t, all); !reflect.DeepEqual(got, []string{"b/pod-3", "b/pod-4"}) {
		t.Fatalf("pods %v, want those of namespace b (Scopes)", got)
	}
	if got, err := cms.List(labels.Everything()); err != nil || len(got) != 1 || got[0].Namespace != "a" {
		t.Fatalf("configmaps %v, %v: want the one of namespace a (the informer's own scope)", got, err)
	}
}
