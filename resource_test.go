package boltinformer_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/internal/testobj"
	"github.com/boltinformer/boltinformer/recovery"
	"github.com/boltinformer/boltinformer/recovery/crashtest"
	"github.com/boltinformer/boltinformer/store"
)

func TestDefaultResource(t *testing.T) {
	unstructuredOf := func(apiVersion, kind string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion(apiVersion)
		u.SetKind(kind)
		return u
	}
	metadataOf := func(apiVersion, kind string) *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: apiVersion, Kind: kind}}
	}
	for _, tc := range []struct {
		example runtime.Object
		want    string
	}{
		{&corev1.Pod{}, "/v1, Kind=Pod"},
		{&corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"}}, "/v1, Kind=Secret"},
		{unstructuredOf("example.com/v1", "Widget"), "example.com/v1, Kind=Widget (unstructured)"},
		{unstructuredOf("v1", "Pod"), "/v1, Kind=Pod (unstructured)"},
		{metadataOf("v1", "Pod"), "/v1, Kind=Pod (metadata)"},
		{metadataOf("apps/v1", "Deployment"), "apps/v1, Kind=Deployment (metadata)"},
		// Nothing tells the kind: the Go type, as before.
		{&unstructured.Unstructured{}, "*unstructured.Unstructured"},
		{&metav1.PartialObjectMetadata{}, "*v1.PartialObjectMetadata"},
		{(*corev1.Pod)(nil), "*v1.Pod"},
		{(*unstructured.Unstructured)(nil), "*unstructured.Unstructured"},
		{nil, "<nil>"},
	} {
		if got := boltinformer.DefaultResource(tc.example); got != tc.want {
			t.Errorf("DefaultResource(%T) = %q, want %q", tc.example, got, tc.want)
		}
	}
}

// InformerOptions.Resource's doc says the default is the kind; it was the
// Go type ("*v1.Pod"), the same for every unstructured or metadata-only
// informer: a file of Widgets was resumed by an informer of Gadgets of the
// same name.
func TestRegressionDefaultResourceIsTheKind(t *testing.T) {
	f := newCacheFile(t, 3)
	r := f.open(nil, nil)
	defer r.close()
	if st, _ := fileState(t, r.db); st.Resource != "/v1, Kind=Pod" {
		t.Errorf("a Pod informer's default resource is %q, want the kind, \"/v1, Kind=Pod\"", st.Resource)
	}
	r.close()

	path := filepath.Join(t.TempDir(), "cache.db")
	open := func(kind string) (*boltinformer.DB, *boltinformer.Informer) {
		t.Helper()
		db, err := boltinformer.Open(path, &boltinformer.Options{Logger: &quietLogger, NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		src := crashtest.NewSource(func() runtime.Object { return &unstructured.UnstructuredList{} })
		for i := range 2 {
			u := testobj.Unstructured(i, "ns", "")
			u.SetKind(kind)
			if _, err := src.Create(u); err != nil {
				t.Fatal(err)
			}
		}
		example := &unstructured.Unstructured{}
		example.SetGroupVersionKind(schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: kind})
		inf, err := db.NewInformer("things", src, example, 0, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return db, inf
	}
	db, inf := open("Widget")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); inf.RunWithContext(ctx) }()
	waitFor(t, "HasSynced", inf.HasSynced)
	cancel()
	<-done
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, inf = open("Gadget")
	defer db.Close()
	if d := inf.Decision(); d.Warm || d.Reason != recovery.ReasonResource {
		t.Errorf("an informer of Gadgets on a file of Widgets: decision %+v, want a cold start for %s", d, recovery.ReasonResource)
	}
}

// A file saved under the earlier default (the Go type) is resumed by an
// informer of that type with the default Resource, not cold-started, and
// saved under the kind at its next commit.
func TestRegressionDefaultResourceEarlierFileResumes(t *testing.T) {
	f := newCacheFile(t, 3)
	// Write the state record as the earlier version did.
	bdb, err := bolt.Open(f.path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = bdb.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("informers")).Bucket([]byte("pods"))
		st, err := store.DecodeState(b.Get([]byte("state")))
		if err != nil {
			return err
		}
		st.Resource = "*v1.Pod"
		raw, err := store.EncodeState(st)
		if err != nil {
			return err
		}
		return b.Put([]byte("state"), raw)
	})
	if cerr := bdb.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}

	r := f.open(nil, nil)
	if d := r.inf.Decision(); !d.Warm {
		t.Fatalf("a file saved under the earlier default: decision %+v, want warm", d)
	}
	if st, _ := fileState(t, r.db); st.Resource != "*v1.Pod" {
		t.Fatalf("the state record says %q before any commit", st.Resource)
	}
	r.run()
	r.waitSynced()
	if _, err := f.src.Create(testobj.Pod(10, 3, 2, "")); err != nil {
		t.Fatal(err)
	}
	r.waitApplied()
	if err := r.db.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st, _ := fileState(t, r.db); st.Resource != "/v1, Kind=Pod" {
		t.Fatalf("after a commit the state record says %q, want \"/v1, Kind=Pod\"", st.Resource)
	}
	r.close()

	// Another Go type with the default Resource does not take the file.
	db, err := boltinformer.Open(f.path, &boltinformer.Options{Logger: &quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	inf, err := db.NewInformer("pods", f.src, &corev1.ConfigMap{}, 0, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := inf.Decision(); d.Warm || d.Reason != recovery.ReasonResource {
		t.Fatalf("a ConfigMap informer on a file of Pods: decision %+v", d)
	}
}

// TestRegressionMetadataExampleNeedsResource: client-go's metadatainformer
// passes &metav1.PartialObjectMetadata{} (no apiVersion, no kind) for every
// resource, so the default Resource could not tell a Pods file from a
// ConfigMaps file under a reused informer name: such an example needs an
// explicit Resource.
func TestRegressionMetadataExampleNeedsResource(t *testing.T) {
	db, err := boltinformer.Open(filepath.Join(t.TempDir(), "cache.db"), &boltinformer.Options{Logger: &quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	src := crashtest.NewSource(func() runtime.Object { return &metav1.PartialObjectMetadataList{} })
	for _, example := range []runtime.Object{&metav1.PartialObjectMetadata{}, &unstructured.Unstructured{}} {
		if _, err := db.NewInformer(fmt.Sprintf("%T", example), src, example, 0, nil, nil); err == nil || !strings.Contains(err.Error(), "Resource is required") {
			t.Fatalf("%T without apiVersion, kind or Resource: %v", example, err)
		}
	}
	if _, err := db.NewInformer("pods", src, &metav1.PartialObjectMetadata{}, 0, nil, &boltinformer.InformerOptions{Resource: "/v1, Resource=pods"}); err != nil {
		t.Fatalf("with a Resource: %v", err)
	}
	pom := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}}
	if _, err := db.NewInformer("configmaps", src, pom, 0, nil, nil); err != nil {
		t.Fatalf("with apiVersion and kind: %v", err)
	}
}
