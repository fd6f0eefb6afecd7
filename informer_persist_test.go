package boltinformer_test

// Whatever the informer accepts, it persists, or it fails loudly and never
// lets its saved resourceVersion pass an object it did not write (issue 14,
// item 1; docs/RELIABILITY.md section 8.1). Each test drives an informer
// through boltinformer.Open, NewInformer and Run against a crashtest.Source,
// then restarts it warm from the file.

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/internal/codec"
	"github.com/boltinformer/boltinformer/internal/testobj"
	"github.com/boltinformer/boltinformer/recovery/crashtest"
	"github.com/boltinformer/boltinformer/store"
)

// lossFile is a cache file, the Source it mirrors, and how its informer
// "objs" is built.
type lossFile struct {
	t         *testing.T
	path      string
	src       *crashtest.Source
	example   runtime.Object
	indexers  cache.Indexers
	transform cache.TransformFunc
	opts      *boltinformer.InformerOptions
}

func newLossFile(t *testing.T, example runtime.Object, newList func() runtime.Object) *lossFile {
	return &lossFile{
		t: t, path: filepath.Join(t.TempDir(), "cache.db"), src: crashtest.NewSource(newList),
		example: example, indexers: cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
	}
}

// lossRun is one informer "objs" on one open DB.
type lossRun struct {
	f    *lossFile
	db   *boltinformer.DB
	inf  *boltinformer.Informer
	stop func()
}

func (f *lossFile) open() *lossRun {
	f.t.Helper()
	db, err := boltinformer.Open(f.path, &boltinformer.Options{Logger: &quietLogger})
	if err != nil {
		f.t.Fatal(err)
	}
	r := &lossRun{f: f, db: db}
	f.t.Cleanup(func() { r.close() })
	if r.inf, err = db.NewInformer("objs", f.src, f.example, 0, f.indexers, f.opts); err != nil {
		f.t.Fatal(err)
	}
	if f.transform != nil {
		if err := r.inf.SetTransform(f.transform); err != nil {
			f.t.Fatal(err)
		}
	}
	return r
}

func (r *lossRun) run() {
	r.stop = runInformer(r.f.t, r.inf)
	waitFor(r.f.t, "HasSynced", r.inf.HasSynced)
}

// truth is the Source's objects after the transform.
func (f *lossFile) truth() map[string]runtime.Object {
	out := map[string]runtime.Object{}
	for _, obj := range f.src.Objects() {
		o := any(obj.DeepCopyObject())
		if f.transform != nil {
			var err error
			if o, err = f.transform(o); err != nil {
				f.t.Fatal(err)
			}
		}
		out[keyOf(o)] = o.(runtime.Object)
	}
	return out
}

// waitApplied waits until the store holds the truth.
func (r *lossRun) waitApplied() {
	r.f.t.Helper()
	waitFor(r.f.t, "the store to converge", func() bool {
		return diffObjects(r.f.truth(), r.inf.GetStore().List()) == ""
	})
}

// checkStore fails unless the store holds exactly the truth, each object
// also found by GetByKey.
func (r *lossRun) checkStore(what string) {
	r.f.t.Helper()
	want := r.f.truth()
	if d := diffObjects(want, r.inf.GetStore().List()); d != "" {
		r.f.t.Fatalf("%s: %s", what, d)
	}
	for k := range want {
		if _, ok, err := r.inf.GetStore().GetByKey(k); !ok || err != nil {
			r.f.t.Fatalf("%s: GetByKey(%.40q): %t, %v", what, k, ok, err)
		}
	}
}

func (r *lossRun) close() {
	if r.stop != nil {
		r.stop()
		r.stop = nil
	}
	if r.db != nil {
		if err := r.db.Close(); err != nil {
			r.f.t.Error(err)
		}
		r.db = nil
	}
}

// coldThenWarm runs the informer cold until it holds the Source's objects,
// applies change (with the informer running; nil: none), stops and closes,
// then reopens the file and returns the warm run, not yet running, after
// checking that it serves the truth before Run and that the file checks
// clean.
func (f *lossFile) coldThenWarm(change func()) *lossRun {
	f.t.Helper()
	r := f.open()
	r.run()
	r.waitApplied()
	if change != nil {
		change()
		r.waitApplied()
	}
	r.close()
	checkFileAt(f.t, f.path)
	f.src.ResetCalls()
	w := f.open()
	if d := w.inf.Decision(); !d.Warm {
		f.t.Fatalf("restart: decision %+v, want warm", d)
	}
	w.checkStore("warm restart, before Run")
	return w
}

// checkFile fails unless store.DB.Check finds the file consistent.
func checkFileAt(t *testing.T, path string) {
	t.Helper()
	db, err := store.Open(path, &store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	probs, err := db.Check(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range probs {
		t.Errorf("Check: %v", p)
	}
}

// resumeWarm runs a warm informer, checks that it resumed with a WATCH
// from the saved resourceVersion, and that it holds the truth.
func (r *lossRun) resumeWarm() {
	r.f.t.Helper()
	saved := r.inf.Indexer().SavedState().ResourceVersion
	r.run()
	r.waitApplied()
	if c := r.f.src.Calls(); len(c.Log) == 0 || c.Log[0] != "WATCH rv="+saved {
		r.f.t.Fatalf("calls %v, want a WATCH from the saved resourceVersion %s first", c.Log, saved)
	}
}

func podLossFile(t *testing.T) *lossFile {
	return newLossFile(t, &corev1.Pod{}, func() runtime.Object { return &corev1.PodList{} })
}

func (f *lossFile) create(objs ...runtime.Object) {
	f.t.Helper()
	for _, o := range objs {
		if _, err := f.src.Create(o); err != nil {
			f.t.Fatal(err)
		}
	}
}

// podNamed is a Pod of testobj's with another name.
func podNamed(i int, ns, name string) *corev1.Pod {
	p := testobj.Pod(i, 3, 2, "")
	p.Namespace, p.Name = ns, name
	return p
}

// toMetadata trims a Pod to its metadata, as metadata-only informers and
// memory-saving transforms do.
func toMetadata(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	return &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"},
		ObjectMeta: p.ObjectMeta,
	}, nil
}

// TestRegressionTransformToPartialObjectMetadataWarmRestart: a transform
// that returns another type (client-go allows it) used to be refused by the
// codec: every object was kept in memory only, the saved state said
// synced, and the warm restart had none of them.
func TestRegressionTransformToPartialObjectMetadataWarmRestart(t *testing.T) {
	f := podLossFile(t)
	f.transform = toMetadata
	f.opts = &boltinformer.InformerOptions{TransformID: "metadata"}
	for i := range 6 {
		f.create(testobj.Pod(i, 3, 2, ""))
	}
	w := f.coldThenWarm(func() { f.create(testobj.Pod(6, 3, 2, "")) })
	if n := w.inf.Indexer().Len(); n != 7 {
		t.Fatalf("warm restart holds %d objects, want 7", n)
	}
	if objs, err := w.inf.GetIndexer().ByIndex(cache.NamespaceIndex, "ns-1"); err != nil || len(objs) != 2 {
		t.Fatalf("ByIndex(namespace, ns-1): %d objects, %v", len(objs), err)
	}
	w.resumeWarm()
	if _, err := f.src.Update(bumpPod(f.src.Objects()["ns-1/pod-000004"], 1)); err != nil {
		t.Fatal(err)
	}
	w.waitApplied()
}

// TestMetadataInformerWarmRestart: an informer whose example is
// *metav1.PartialObjectMetadata (client-go's metadatainformer,
// controller-runtime's metadata-only watches) restarts warm.
func TestMetadataInformerWarmRestart(t *testing.T) {
	f := newLossFile(t, &metav1.PartialObjectMetadata{}, func() runtime.Object { return &metav1.PartialObjectMetadataList{} })
	// client-go's metadatainformer passes an example without apiVersion
	// and kind: the Resource must be given (kindKnown).
	f.opts = &boltinformer.InformerOptions{Resource: "/v1, Resource=pods (metadata)"}
	for i := range 5 {
		pom, _ := toMetadata(testobj.Pod(i, 3, 2, ""))
		f.create(pom.(runtime.Object))
	}
	w := f.coldThenWarm(nil)
	w.resumeWarm()
	st := w.inf.Indexer().SavedState()
	if st.Kind != "meta.k8s.io/v1, Kind=PartialObjectMetadata" || len(st.Types) != 0 {
		t.Fatalf("state kind %q types %v", st.Kind, st.Types)
	}
}

// TestRegressionEmptyKeyPersisted: an object whose key is "" (no name, no
// namespace) used to be kept in memory only.
func TestRegressionEmptyKeyPersisted(t *testing.T) {
	f := podLossFile(t)
	f.create(testobj.Pod(1, 3, 2, ""))
	w := f.coldThenWarm(func() { f.create(podNamed(2, "", "")) })
	if _, ok, err := w.inf.GetStore().GetByKey(""); !ok || err != nil {
		t.Fatalf("the object of key \"\" after the restart: %t, %v", ok, err)
	}
	w.resumeWarm()
}

// TestRegressionKeyWithNULPersisted: an object whose key holds a NUL byte
// (which the index entry encoding reserves) used to be kept in memory
// only.
func TestRegressionKeyWithNULPersisted(t *testing.T) {
	f := podLossFile(t)
	f.create(testobj.Pod(1, 3, 2, ""))
	w := f.coldThenWarm(func() { f.create(podNamed(2, "ns-1", "a\x00b"), podNamed(3, "ns\x00", "c")) })
	if objs, _ := w.inf.GetIndexer().ByIndex(cache.NamespaceIndex, "ns\x00"); len(objs) != 1 {
		t.Fatalf("ByIndex(namespace, ns\\x00): %d objects", len(objs))
	}
	w.resumeWarm()
}

// TestRegressionLongNamePersisted: an object whose key is over the store's
// 16 KiB key limit (a name of 17k bytes) used to be kept in memory only.
func TestRegressionLongNamePersisted(t *testing.T) {
	f := podLossFile(t)
	f.create(testobj.Pod(1, 3, 2, ""))
	long := strings.Repeat("n", 17<<10)
	w := f.coldThenWarm(func() { f.create(podNamed(2, "ns-1", long)) })
	if _, ok, err := w.inf.GetStore().GetByKey("ns-1/" + long); !ok || err != nil {
		t.Fatalf("the 17k-byte name after the restart: %t, %v", ok, err)
	}
	w.resumeWarm()
	// Updates and deletes of it are persisted too.
	obj := f.src.Objects()["ns-1/"+long]
	if _, err := f.src.Update(bumpPod(obj, 1)); err != nil {
		t.Fatal(err)
	}
	w.waitApplied()
	w.close()
	f.src.ResetCalls()
	w = f.open()
	w.checkStore("second restart")
	w.resumeWarm()
	if err := f.src.Delete("ns-1/" + long); err != nil {
		t.Fatal(err)
	}
	w.waitApplied()
	w.close()
	checkFileAt(t, f.path)
	w = f.open()
	w.checkStore("third restart")
}

// TestRegressionLongIndexValuePersisted: an update whose value in a user's
// index is over 16 KiB (a long label value) used to be kept in memory
// only: the restart served the stale version, and resumed past the update.
func TestRegressionLongIndexValuePersisted(t *testing.T) {
	f := podLossFile(t)
	f.indexers["app"] = func(obj any) ([]string, error) {
		p, ok := obj.(*corev1.Pod)
		if !ok || p.Labels["app"] == "" {
			return nil, nil
		}
		return []string{p.Labels["app"]}, nil
	}
	f.create(testobj.Pod(1, 3, 2, ""), testobj.Pod(2, 3, 2, ""))
	long := strings.Repeat("v", 17<<10)
	w := f.coldThenWarm(func() {
		p := bumpPod(f.src.Objects()["ns-1/pod-000001"], 1)
		p.Labels["app"] = long
		if _, err := f.src.Update(p); err != nil {
			t.Fatal(err)
		}
	})
	if keys, err := w.inf.GetIndexer().IndexKeys("app", long); err != nil || len(keys) != 1 || keys[0] != "ns-1/pod-000001" {
		t.Fatalf("IndexKeys(app, long value): %v, %v", keys, err)
	}
	w.resumeWarm()
}

// unregistered is a type with object metadata that no scheme knows.
type unregistered struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Note              string `json:"note,omitempty"`
}

func (u *unregistered) DeepCopyObject() runtime.Object {
	c := *u
	u.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	return &c
}

// oddTransform turns the Pods named "odd-*" into unregistered objects.
func oddTransform(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok || !strings.HasPrefix(p.Name, "odd-") {
		return obj, nil
	}
	return &unregistered{ObjectMeta: p.ObjectMeta, Note: "transformed"}, nil
}

// TestRegressionUnencodableTypeHoldsTheFile: an object the codec cannot
// encode (a transform returned a type no scheme knows) used to be logged
// and dropped while the saved resourceVersion moved past it: the next
// start resumed after it and never had it. Now the informer serves it from
// memory, commits nothing while it holds it (the file stays exactly at the
// last resourceVersion whose objects it holds), says so (Flush, Close,
// Health, Healthy), and the restart resumes from before it; deleting it
// lets commits resume.
func TestRegressionUnencodableTypeHoldsTheFile(t *testing.T) {
	f := podLossFile(t)
	f.transform = oddTransform
	f.opts = &boltinformer.InformerOptions{TransformID: "odd"}
	for i := range 4 {
		f.create(testobj.Pod(i, 3, 2, ""))
	}
	r := f.open()
	r.run()
	r.waitApplied()
	if err := r.inf.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	good := r.inf.Indexer().SavedState().ResourceVersion
	f.create(podNamed(10, "ns-0", "odd-1"))
	if _, err := f.src.Update(bumpPod(f.src.Objects()["ns-1/pod-000001"], 1)); err != nil {
		t.Fatal(err)
	}
	r.waitApplied() // served from memory, as client-go would
	if err := r.inf.Flush(context.Background()); !errors.Is(err, boltinformer.ErrNotPersisted) {
		t.Fatalf("Flush with an object it cannot persist: %v", err)
	}
	if got := r.inf.Indexer().SavedState().ResourceVersion; got != good {
		t.Fatalf("saved resourceVersion %s, want %s: it passed an object that is not in the file", got, good)
	}
	if h := r.inf.Health(); h.NotPersisted != 1 || !strings.Contains(h.NotPersistedError, "odd-1") {
		t.Fatalf("health: %+v", h)
	}
	if err := r.db.Healthy(); !errors.Is(err, boltinformer.ErrUnhealthy) || !strings.Contains(err.Error(), "cannot persist") {
		t.Fatalf("Healthy: %v", err)
	}
	r.stop()
	r.stop = nil
	if err := r.db.Close(); !errors.Is(err, boltinformer.ErrNotPersisted) {
		t.Fatalf("Close: %v", err)
	}
	r.db = nil
	checkFileAt(t, f.path)

	// The file is the state as of the last good resourceVersion: the
	// restart resumes from there, and the server sends the object again.
	f.src.ResetCalls()
	w := f.open()
	if d := w.inf.Decision(); !d.Warm || w.inf.Indexer().SavedState().ResourceVersion != good {
		t.Fatalf("restart: %+v at %s", d, w.inf.Indexer().SavedState().ResourceVersion)
	}
	w.resumeWarm()
	if n, _ := w.inf.Indexer().Unpersisted(); n != 1 {
		t.Fatalf("after the restart: %d objects not persisted, want the odd one", n)
	}
	// Gone at the server: the informer commits again.
	if err := f.src.Delete("ns-0/odd-1"); err != nil {
		t.Fatal(err)
	}
	w.waitApplied()
	if err := w.inf.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, want := w.inf.Indexer().SavedState().ResourceVersion, f.src.ResourceVersion(); got != want {
		t.Fatalf("saved resourceVersion %s, want %s", got, want)
	}
	if err := w.db.Healthy(); err != nil {
		t.Fatal(err)
	}
	w.close()
	checkFileAt(t, f.path)
	w = f.open()
	w.checkStore("restart after the odd object went away")
}

// TestTransformToSchemeTypeWarmRestart: a transform may return any type
// the informer's scheme knows (InformerOptions.Scheme), stored as JSON when
// it has no protobuf.
func TestTransformToSchemeTypeWarmRestart(t *testing.T) {
	s := runtime.NewScheme()
	s.AddKnownTypeWithName(schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Odd"}, &unregistered{})
	f := podLossFile(t)
	f.transform = oddTransform
	f.opts = &boltinformer.InformerOptions{TransformID: "odd", Scheme: s}
	f.create(testobj.Pod(1, 3, 2, ""), podNamed(2, "ns-1", "odd-2"))
	w := f.coldThenWarm(func() { f.create(podNamed(3, "ns-2", "odd-3")) })
	if st := w.inf.Indexer().SavedState(); len(st.Types) != 1 || st.Types[0] != "example.com/v1, Kind=Odd" || st.Kind != "/v1, Kind=Pod" {
		t.Fatalf("state kind %q, types %v", st.Kind, st.Types)
	}
	w.resumeWarm()
}

// TestRegressionOtherKindPayloadUndecodable: a payload of another kind that
// happens to decode (an empty ConfigMap's bytes under a Pod's key, with a
// valid checksum) used to be served as a Pod with no containers. Now it is
// undecodable: left out, and replaced by the relist it triggers.
func TestRegressionOtherKindPayloadUndecodable(t *testing.T) {
	f := newCacheFile(t, 20)
	const bad = "ns-1/pod-000010"
	b, err := bolt.Open(f.path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = b.Update(func(tx *bolt.Tx) error {
		objs := tx.Bucket([]byte("informers")).Bucket([]byte("pods")).Bucket([]byte("objects"))
		r, err := store.DecodeRecord(bad, objs.Get([]byte(bad)))
		if err != nil {
			return err
		}
		cms, err := codec.New(&corev1.ConfigMap{}, nil)
		if err != nil {
			return err
		}
		// The same name, UID and resourceVersion: only the kind differs.
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "pod-000010", Namespace: "ns-1", UID: f.src.Objects()[bad].(*corev1.Pod).UID, ResourceVersion: r.ResourceVersion}}
		cr, err := cms.Encode(bad, cm)
		if err != nil {
			return err
		}
		r.Payload = cr.Payload
		raw, err := store.EncodeRecord(bad, r)
		if err != nil {
			return err
		}
		return objs.Put([]byte(bad), raw)
	})
	_ = b.Close()
	if err != nil {
		t.Fatal(err)
	}
	r := f.open(nil, nil)
	if _, _, err := r.inf.GetIndexer().GetByKey(bad); err == nil {
		t.Fatal("GetByKey of a ConfigMap's payload under a Pod's key: no error")
	}
	waitFor(t, "the other kind's payload to be found", func() bool { return r.inf.Indexer().Undecodable() == 1 })
	for _, obj := range r.inf.GetIndexer().List() {
		if p := obj.(*corev1.Pod); len(p.Spec.Containers) == 0 {
			t.Fatalf("served %s, a Pod without containers", keyOf(p))
		}
	}
	r.run()
	r.waitSynced()
	r.waitApplied()
	if h := r.inf.Health(); h.Undecodable != 0 {
		t.Fatalf("health after the relist: %+v", h)
	}
}
