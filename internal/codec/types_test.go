package codec_test

import (
	"bytes"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/boltinformer/boltinformer/internal/codec"
	"github.com/boltinformer/boltinformer/internal/testobj"
	"github.com/boltinformer/boltinformer/store"
)

// TestKubeProtobufIsTheSerializers: a CodecKubeProtobuf payload is what
// apimachinery's protobuf serializer writes for the object with its kind
// (what kube-apiserver stores in etcd), and that serializer reads it back.
func TestKubeProtobufIsTheSerializers(t *testing.T) {
	c, err := codec.New(&corev1.Pod{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	pod := testobj.Pod(4, 3, 2, "17")
	r, err := c.Encode("ns-1/pod-000004", pod)
	if err != nil {
		t.Fatal(err)
	}
	withKind := pod.DeepCopy()
	withKind.APIVersion, withKind.Kind = "v1", "Pod"
	var want bytes.Buffer
	ser := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)
	if err := ser.Encode(withKind, &want); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(r.Payload, want.Bytes()) {
		t.Fatalf("payload differs from the serializer's:\n got %x\nwant %x", r.Payload[:40], want.Bytes()[:40])
	}
	obj, gvk, err := ser.Decode(r.Payload, nil, nil)
	if err != nil || *gvk != corev1.SchemeGroupVersion.WithKind("Pod") || !apiequality.Semantic.DeepEqual(obj.(*corev1.Pod).Spec, pod.Spec) {
		t.Fatalf("the serializer reads %v, %v", gvk, err)
	}
}

// TestOtherTypes: an informer stores objects of another type than its
// example's (a transform's PartialObjectMetadata, another built-in kind,
// an unstructured object) with their type in the record, and gets them
// back as they were.
func TestOtherTypes(t *testing.T) {
	pod := testobj.Pod(4, 3, 2, "17")
	pom := &metav1.PartialObjectMetadata{ObjectMeta: pod.ObjectMeta}
	pomTM := pom.DeepCopy()
	pomTM.APIVersion, pomTM.Kind = "meta.k8s.io/v1", "PartialObjectMetadata"
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: "u", ResourceVersion: "3"}, Data: map[string]string{"a": "b"}}
	u := testobj.Unstructured(3, "default", "9")
	for _, tc := range []struct {
		name    string
		example runtime.Object
		opts    *codec.Options
		obj     runtime.Object
		typ     string
		enc     store.Codec
	}{
		{"partial-metadata", &corev1.Pod{}, nil, pom, "meta.k8s.io/v1, Kind=PartialObjectMetadata", store.CodecKubeProtobuf},
		{"partial-metadata-with-typemeta", &corev1.Pod{}, nil, pomTM, "meta.k8s.io/v1, Kind=PartialObjectMetadata", store.CodecKubeProtobuf},
		{"partial-metadata-json", &corev1.Pod{}, &codec.Options{ForceJSON: true}, pom, "meta.k8s.io/v1, Kind=PartialObjectMetadata", store.CodecJSON},
		{"configmap", &corev1.Pod{}, nil, cm, "/v1, Kind=ConfigMap", store.CodecKubeProtobuf},
		{"unstructured", &corev1.Pod{}, nil, u, store.TypeUnstructured, store.CodecJSON},
		{"typed-in-unstructured", &unstructured.Unstructured{}, nil, cm, "/v1, Kind=ConfigMap", store.CodecKubeProtobuf},
		{"metadata-informer", &metav1.PartialObjectMetadata{}, nil, pom, "", store.CodecKubeProtobuf},
		{"metadata-informer-sealed", &metav1.PartialObjectMetadata{}, &codec.Options{Keyring: &codec.Keyring{Current: "k", Keys: map[string][]byte{"k": bytes.Repeat([]byte{1}, 16)}}}, pomTM, "", store.CodecKubeProtobuf},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := codec.New(tc.example, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Storable(tc.obj); err != nil {
				t.Fatal(err)
			}
			r, err := c.Encode("ns/k", tc.obj)
			if err != nil {
				t.Fatal(err)
			}
			if r.Type != tc.typ || r.Codec != tc.enc {
				t.Fatalf("type %q codec %v, want %q %v", r.Type, r.Codec, tc.typ, tc.enc)
			}
			got := roundTrip(t, c, "ns/k", tc.obj)
			if !apiequality.Semantic.DeepEqual(got, tc.obj) {
				t.Fatalf("round trip differs:\n got %#v\nwant %#v", got, tc.obj)
			}
		})
	}
	c, _ := codec.New(&metav1.PartialObjectMetadata{}, nil)
	if gvk := c.GVK(); gvk != metav1.SchemeGroupVersion.WithKind("PartialObjectMetadata") {
		t.Fatalf("a metadata informer's kind: %v", gvk)
	}
}

// TestKindMismatch: a payload of another kind than its record says (a
// ConfigMap's bytes under a Pod's record, valid checksum) is an error, not
// a Pod; so is a record naming a type that is not one.
func TestKindMismatch(t *testing.T) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: "u", ResourceVersion: "3"}}
	for _, opts := range []*codec.Options{nil, {ForceJSON: true}} {
		pods, _ := codec.New(&corev1.Pod{}, opts)
		cms, _ := codec.New(&corev1.ConfigMap{}, opts)
		r, err := cms.Encode("ns/c", cm)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pods.Decode("ns/c", r); !errors.Is(err, codec.ErrKindMismatch) {
			t.Errorf("a ConfigMap's %v payload in a Pod informer: %v", r.Codec, err)
		}
		// A Pod record naming another type whose payload is a Pod's.
		r2, _ := pods.Encode("ns/p", testobj.Pod(1, 1, 1, "1"))
		r2.Type = "/v1, Kind=ConfigMap"
		if _, err := pods.Decode("ns/p", r2); !errors.Is(err, codec.ErrKindMismatch) {
			t.Errorf("a Pod's %v payload under type ConfigMap: %v", r2.Codec, err)
		}
		for _, bad := range []string{"garbage", "/v1, Kind=NoSuchKind"} {
			r2.Type = bad
			if _, err := pods.Decode("ns/p", r2); !errors.Is(err, codec.ErrUnsupportedType) {
				t.Errorf("record type %q: %v", bad, err)
			}
		}
	}
	// Unstructured: the payload's apiVersion and kind are the envelope's.
	un, _ := codec.New(&unstructured.Unstructured{}, nil)
	u := testobj.Unstructured(3, "default", "9")
	r, err := un.Encode("default/w", u)
	if err != nil {
		t.Fatal(err)
	}
	r.Kind = "Other"
	if _, err := un.Decode("default/w", r); !errors.Is(err, codec.ErrKindMismatch) {
		t.Errorf("unstructured payload of another kind: %v", err)
	}
}

// TestParseKind: the form the state's kind and a record's type use.
func TestParseKind(t *testing.T) {
	for _, gvk := range []schema.GroupVersionKind{{Version: "v1", Kind: "Pod"}, {Group: "apps", Version: "v1", Kind: "Deployment"}} {
		if got, ok := codec.ParseKind(gvk.String()); !ok || got != gvk {
			t.Errorf("ParseKind(%q) = %v %v", gvk.String(), got, ok)
		}
	}
	for _, s := range []string{"", "Pod", "/v1, Kind=", "a/b/c, Kind=X"} {
		if _, ok := codec.ParseKind(s); ok {
			t.Errorf("ParseKind(%q) ok", s)
		}
	}
}
