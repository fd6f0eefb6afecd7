package e2e

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	boltcr "github.com/boltinformer/boltinformer/controllerruntime"
)

// seen records, per request, whether the cache had the object when the
// reconciler read it.
type seen struct {
	mu    sync.Mutex
	found map[string][]bool
}

func newSeen() *seen { return &seen{found: map[string][]bool{}} }

func (s *seen) add(key string, found bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.found[key] = append(s.found[key], found)
}

// last returns whether key was found at its last reconcile, and whether it
// was reconciled at all.
func (s *seen) last(key string) (found, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.found[key]
	if len(f) == 0 {
		return false, false
	}
	return f[len(f)-1], true
}

func (s *seen) keys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.found))
	for k := range s.found {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// watchController adds a controller for obj's kind whose reconciler reads
// the object from the cache and records whether it was there.
func watchController(r *run, name string, obj client.Object, s *seen) error {
	return ctrl.NewControllerManagedBy(r.mgr).Named(name).For(obj).Complete(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		o := obj.DeepCopyObject().(client.Object)
		err := r.mgr.GetCache().Get(ctx, req.NamespacedName, o)
		if err != nil && !apierrors.IsNotFound(err) {
			return reconcile.Result{}, err
		}
		s.add(req.String(), err == nil)
		return reconcile.Result{}, nil
	}))
}

func createConfigMaps(t testing.TB, cs kubernetes.Interface, ns string, n int, lbls map[string]string) {
	t.Helper()
	err := parallel(context.Background(), n, 8, func(ctx context.Context, i int) error {
		_, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("cm-%03d", i), Labels: lbls},
			Data:       map[string]string{"i": fmt.Sprint(i)},
		}, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// informersByName returns the cache's informers by name, failing on one
// that is not persisted.
func informersByName(t testing.TB, c *boltcr.Cache) map[string]*boltcr.Informer {
	t.Helper()
	out := map[string]*boltcr.Informer{}
	for _, inf := range c.Informers() {
		if inf.Persistent() == nil {
			t.Fatalf("informer %s (%s) not persisted: %s", inf.Name(), inf.GroupVersionKind(), inf.NotPersisted())
		}
		out[inf.Name()] = inf
	}
	return out
}

// TestTwoNamespaces: a cache over two namespaces (DefaultNamespaces) has
// one informer per namespace, each persisted under its own name and
// holding only its namespace's objects; both resume warm, and a delete in
// each, made while the operator was down, reaches the reconciler.
func TestTwoNamespaces(t *testing.T) {
	cs := clientset(t)
	a, b := newNamespace(t, cs, "two-a"), newNamespace(t, cs, "two-b")
	createConfigMaps(t, cs, a, 20, nil)
	createConfigMaps(t, cs, b, 30, nil)
	p := newProxy(t)
	path := cachePath(t)
	s := newSeen()
	o := managerOptions{config: p.config(), path: path,
		cache: cache.Options{DefaultNamespaces: map[string]cache.Config{a: {}, b: {}}},
		setup: func(_ context.Context, r *run) error { return watchController(r, "two", &corev1.ConfigMap{}, s) }}
	first := startManager(t, o)
	if !eventually(waitTimeout, func() bool { return len(s.keys()) >= 50 }) {
		t.Fatalf("first run reconciled %d of 50", len(s.keys()))
	}
	infs := informersByName(t, first.cache)
	nameA, nameB := "controller-runtime/typed/core/v1/configmaps/"+a, "controller-runtime/typed/core/v1/configmaps/"+b
	if infs[nameA] == nil || infs[nameB] == nil || len(infs) != 2 {
		t.Fatalf("informers %v, want %s and %s", keys(infs), nameA, nameB)
	}
	first.stop(t)
	for _, ns := range []string{a, b} {
		if err := cs.CoreV1().ConfigMaps(ns).Delete(context.Background(), "cm-000", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	s2 := newSeen()
	s = s2
	mark := p.mark()
	second := startManager(t, o)
	infs = waitInformers(t, second, 2)
	for name, want := range map[string]int{nameA: 19, nameB: 29} {
		inf := infs[name]
		if inf == nil {
			t.Fatalf("no informer %s: %v", name, keys(infs))
		}
		if d := inf.Persistent().Decision(); !d.Warm {
			t.Fatalf("informer %s: %+v, want a warm start", name, d)
		}
		if got := len(inf.GetIndexer().List()); got != want {
			t.Errorf("informer %s holds %d objects, want %d", name, got, want)
		}
	}
	for _, ns := range []string{a, b} {
		key := ns + "/cm-000"
		if !eventually(waitTimeout, func() bool { f, ok := s2.last(key); return ok && !f }) {
			t.Errorf("%s, deleted while down, not reconciled as gone", key)
		}
	}
	if tr := summarize(p.since(mark), "configmaps"); tr.FullLists != 0 {
		t.Errorf("the warm restart listed in full: %+v", tr)
	}
}

// waitInformers waits until r's cache has n informers, all synced (a
// controller creates its informers when it starts, after the manager's
// caches have synced), and returns them by name.
func waitInformers(t testing.TB, r *run, n int) map[string]*boltcr.Informer {
	t.Helper()
	ok := eventually(waitTimeout, func() bool {
		infs := r.cache.Informers()
		if len(infs) != n {
			return false
		}
		for _, inf := range infs {
			if !inf.HasSynced() {
				return false
			}
		}
		return true
	})
	if !ok {
		t.Fatalf("informers %v, want %d synced", r.cache.Informers(), n)
	}
	return informersByName(t, r.cache)
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestByObject: ByObject's namespaces and selectors make informers of
// their own, persisted under names with their selectors; a restart with
// another selector does not resume the old selector's data.
func TestByObject(t *testing.T) {
	cs := clientset(t)
	a, b := newNamespace(t, cs, "by-a"), newNamespace(t, cs, "by-b")
	createConfigMaps(t, cs, a, 10, map[string]string{"tier": "one"})
	if _, err := cs.CoreV1().ConfigMaps(a).Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "other", Labels: map[string]string{"tier": "two"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createConfigMaps(t, cs, b, 5, nil)
	for _, name := range []string{"keep", "skip"} {
		if _, err := cs.CoreV1().Secrets(a).Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	p := newProxy(t)
	path := cachePath(t)
	copts := func(tier string) cache.Options {
		return cache.Options{ByObject: map[client.Object]cache.ByObject{
			&corev1.ConfigMap{}: {Namespaces: map[string]cache.Config{
				a: {LabelSelector: labels.SelectorFromSet(labels.Set{"tier": tier})},
				b: {},
			}},
			&corev1.Secret{}: {Field: fields.OneTermNotEqualSelector("metadata.name", "skip")},
		}}
	}
	cmSeen, secretSeen := newSeen(), newSeen()
	o := managerOptions{config: p.config(), path: path, cache: copts("one"), setup: func(_ context.Context, r *run) error {
		if err := watchController(r, "by-cm", &corev1.ConfigMap{}, cmSeen); err != nil {
			return err
		}
		return watchController(r, "by-secret", &corev1.Secret{}, secretSeen)
	}}
	first := startManager(t, o)
	waitInformers(t, first, 3)
	if !eventually(waitTimeout, func() bool { return len(cmSeen.keys()) >= 15 && slices.Contains(secretSeen.keys(), a+"/keep") }) {
		t.Fatalf("first run: configmaps %v, secrets %v", cmSeen.keys(), secretSeen.keys())
	}
	infs := informersByName(t, first.cache)
	names := keys(infs)
	if len(names) != 3 {
		t.Fatalf("informers %v, want configmaps in %s (selector), in %s, and secrets", names, a, b)
	}
	for _, n := range names {
		t.Logf("informer %s: %d objects", n, len(infs[n].GetIndexer().List()))
	}
	if slices.Contains(cmSeen.keys(), a+"/other") || slices.Contains(secretSeen.keys(), a+"/skip") {
		t.Errorf("objects outside the selectors were reconciled: %v %v", cmSeen.keys(), secretSeen.keys())
	}
	first.stop(t)

	// The same options: every informer resumes.
	second := startManager(t, o)
	for name, inf := range waitInformers(t, second, 3) {
		if !inf.Persistent().Decision().Warm {
			t.Errorf("informer %s: %+v, want warm", name, inf.Persistent().Decision())
		}
	}
	second.stop(t)

	// Another selector for namespace a: a new informer (its own name), cold,
	// holding what the new selector selects; the others resume.
	o.cache = copts("two")
	third := startManager(t, o)
	for name, inf := range waitInformers(t, third, 3) {
		d := inf.Persistent().Decision()
		isA := inf.GroupVersionKind().Kind == "ConfigMap" && len(inf.GetIndexer().List()) > 0 && inf.GetIndexer().List()[0].(*corev1.ConfigMap).Namespace == a
		switch {
		case isA && d.Warm:
			t.Errorf("informer %s with the new selector resumed: %+v", name, d)
		case isA && len(inf.GetIndexer().List()) != 1:
			t.Errorf("informer %s holds %d objects, want 1 (tier=two)", name, len(inf.GetIndexer().List()))
		case !isA && !d.Warm:
			t.Errorf("informer %s: %+v, want warm", name, d)
		}
	}
}

// TestRemoveInformerThenAgain: RemoveInformer stops the informer and gives
// its name back, so the informer created again is persisted and resumes
// from the file, both while the cache runs and before it started (then
// the informer never ran: DB.Release).
func TestRemoveInformerThenAgain(t *testing.T) {
	cs := clientset(t)
	ns := newNamespace(t, cs, "remove")
	createConfigMaps(t, cs, ns, 10, nil)
	p := newProxy(t)
	path := cachePath(t)
	o := managerOptions{config: p.config(), path: path, cache: cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
		setup: func(context.Context, *run) error { return nil }}
	r := startManager(t, o)
	ctx := context.Background()
	get := func() *boltcr.Informer {
		t.Helper()
		if _, err := r.mgr.GetCache().GetInformer(ctx, &corev1.ConfigMap{}); err != nil {
			t.Fatal(err)
		}
		infs := informersByName(t, r.cache)
		if len(infs) != 1 {
			t.Fatalf("informers %v, want one", keys(infs))
		}
		for _, inf := range infs {
			return inf
		}
		return nil
	}
	inf1 := get()
	if n := len(inf1.GetIndexer().List()); n != 10 {
		t.Fatalf("first informer holds %d, want 10", n)
	}
	if err := r.mgr.GetCache().RemoveInformer(ctx, &corev1.ConfigMap{}); err != nil {
		t.Fatal(err)
	}
	if !inf1.IsStopped() {
		t.Error("RemoveInformer returned before the informer stopped")
	}
	for _, name := range []string{"cm-010", "cm-011"} {
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	inf2 := get()
	if !inf2.Persistent().Decision().Warm {
		t.Errorf("informer created again: %+v, want a warm start", inf2.Persistent().Decision())
	}
	if !eventually(waitTimeout, func() bool { return len(inf2.GetIndexer().List()) == 12 }) {
		t.Errorf("informer created again holds %d, want 12", len(inf2.GetIndexer().List()))
	}
	r.stop(t)

	// Before the cache starts: the informer never runs.
	o.setup = func(ctx context.Context, r *run) error {
		c := r.mgr.GetCache()
		if _, err := c.GetInformer(ctx, &corev1.ConfigMap{}, cache.BlockUntilSynced(false)); err != nil {
			return err
		}
		if err := c.RemoveInformer(ctx, &corev1.ConfigMap{}); err != nil {
			return err
		}
		_, err := c.GetInformer(ctx, &corev1.ConfigMap{}, cache.BlockUntilSynced(false))
		return err
	}
	r2 := startManager(t, o)
	inf3 := get()
	if !inf3.Persistent().Decision().Warm || len(inf3.GetIndexer().List()) != 12 {
		t.Errorf("informer removed and created again before Start: %+v with %d objects, want warm with 12", inf3.Persistent().Decision(), len(inf3.GetIndexer().List()))
	}
	r2.stop(t)
}

// TestMetadataAndUnstructured: metadata-only (PartialObjectMetadata) and
// unstructured informers are persisted in the same file, resume warm,
// keep their objects' apiVersion and kind, and replay the deletes made
// while the operator was down.
func TestMetadataAndUnstructured(t *testing.T) {
	cs := clientset(t)
	ns := newNamespace(t, cs, "meta")
	createConfigMaps(t, cs, ns, 20, nil)
	for i := range 5 {
		if _, err := cs.CoreV1().Secrets(ns).Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s-%d", i)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	p := newProxy(t)
	path := cachePath(t)
	cmMeta := &metav1.PartialObjectMetadata{}
	cmMeta.SetGroupVersionKind(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"})
	secretU := &unstructured.Unstructured{}
	secretU.SetGroupVersionKind(schema.GroupVersionKind{Version: "v1", Kind: "Secret"})
	var metaSeen, uSeen *seen
	o := managerOptions{config: p.config(), path: path, cache: cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
		setup: func(_ context.Context, r *run) error {
			if err := watchController(r, "meta", cmMeta, metaSeen); err != nil {
				return err
			}
			return watchController(r, "unstructured", secretU, uSeen)
		}}
	metaSeen, uSeen = newSeen(), newSeen()
	first := startManager(t, o)
	if !eventually(waitTimeout, func() bool { return len(metaSeen.keys()) >= 20 && len(uSeen.keys()) >= 5 }) {
		t.Fatalf("first run: metadata %d, unstructured %d", len(metaSeen.keys()), len(uSeen.keys()))
	}
	infs := informersByName(t, first.cache)
	wantNames := []string{"controller-runtime/metadata/core/v1/configmaps/" + ns, "controller-runtime/unstructured/core/v1/secrets/" + ns}
	if !slices.Equal(keys(infs), wantNames) {
		t.Fatalf("informers %v, want %v", keys(infs), wantNames)
	}
	first.stop(t)
	if err := cs.CoreV1().ConfigMaps(ns).Delete(context.Background(), "cm-000", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().Secrets(ns).Delete(context.Background(), "s-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	metaSeen, uSeen = newSeen(), newSeen()
	mark := p.mark()
	second := startManager(t, o)
	for name, inf := range waitInformers(t, second, 2) {
		if !inf.Persistent().Decision().Warm {
			t.Errorf("informer %s: %+v, want warm", name, inf.Persistent().Decision())
		}
	}
	for _, key := range []string{ns + "/cm-000", ns + "/s-0"} {
		s := metaSeen
		if key == ns+"/s-0" {
			s = uSeen
		}
		if !eventually(waitTimeout, func() bool { f, ok := s.last(key); return ok && !f }) {
			t.Errorf("%s, deleted while down, not reconciled as gone", key)
		}
	}
	// The cached objects have their kind (the file keeps it).
	var metaList metav1.PartialObjectMetadataList
	metaList.SetGroupVersionKind(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMapList"})
	if err := second.mgr.GetCache().List(context.Background(), &metaList, client.InNamespace(ns)); err != nil || len(metaList.Items) != 19 {
		t.Fatalf("metadata list from the cache: %d items, %v; want 19", len(metaList.Items), err)
	}
	for name, inf := range informersByName(t, second.cache) {
		for _, o := range inf.GetIndexer().List() {
			if gvk := o.(interface{ GetObjectKind() schema.ObjectKind }).GetObjectKind().GroupVersionKind(); gvk.Kind == "" {
				t.Fatalf("informer %s: an object without its kind: %#v", name, o)
			}
		}
	}
	tr := summarize(p.since(mark), "")
	if tr.FullLists != 0 {
		t.Errorf("the warm restart listed in full: %+v", tr)
	}
}
