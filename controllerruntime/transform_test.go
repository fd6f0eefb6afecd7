package boltcr

import (
	"errors"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"
)

var cmGVK = schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}

func typedID(t *testing.T, fn cache.TransformFunc) string {
	t.Helper()
	id, err := transformID(fn, kindTyped, cmGVK, &corev1.ConfigMap{})
	if err != nil {
		t.Fatalf("transformID: %v", err)
	}
	return id
}

// dropLabel returns a transform that removes one label: the same function
// (closure) with different captured values.
func dropLabel(key string) cache.TransformFunc {
	return func(in any) (any, error) {
		if m, err := meta.Accessor(in); err == nil {
			l := m.GetLabels()
			delete(l, key)
			m.SetLabels(l)
		}
		return in, nil
	}
}

func TestTransformID(t *testing.T) {
	if id := typedID(t, nil); id != "" {
		t.Errorf("no transform: %q, want \"\"", id)
	}
	strip := crcache.TransformStripManagedFields()
	a, b := typedID(t, strip), typedID(t, wrapTransform(strip))
	if a != b || !strings.HasPrefix(a, "auto:closure:") {
		t.Errorf("TransformStripManagedFields: %q and wrapped %q; want equal, a closure", a, b)
	}
	if a == typedID(t, dropLabel("tier")) {
		t.Errorf("two different transforms have one id %q", a)
	}
	if typedID(t, dropLabel("tier")) == typedID(t, dropLabel("app")) {
		t.Error("one closure with other captured values (that the samples show) has the same id")
	}
	if a, b := typedID(t, dropLabel("tier")), typedID(t, dropLabel("tier")); a != b {
		t.Errorf("the same transform has two ids: %q, %q", a, b)
	}
	named := Transform("strip-v1", strip)
	if id := typedID(t, named); id != "name:strip-v1" {
		t.Errorf("named transform: %q, want name:strip-v1", id)
	}
	if id := typedID(t, wrapTransform(named)); id != "name:strip-v1" {
		t.Errorf("named transform, wrapped: %q, want name:strip-v1", id)
	}
	// Other object kinds get samples of their own.
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"})
	if _, err := transformID(strip, kindUnstructured, u.GroupVersionKind(), u); err != nil {
		t.Errorf("unstructured: %v", err)
	}
	if _, err := transformID(strip, kindMetadata, cmGVK, &metav1.PartialObjectMetadata{}); err != nil {
		t.Errorf("metadata: %v", err)
	}
	// A transform that panics or fails on the samples has an id all the
	// same (deterministic).
	panics := func(any) (any, error) { panic("boom") }
	if a, b := typedID(t, panics), typedID(t, panics); a != b {
		t.Errorf("a panicking transform has two ids: %q, %q", a, b)
	}
}

func TestTransformIDNotDeterministic(t *testing.T) {
	var n atomic.Int64
	counter := func(in any) (any, error) {
		if m, err := meta.Accessor(in); err == nil {
			m.SetAnnotations(map[string]string{"n": string(rune('a' + n.Add(1)%20))})
		}
		return in, nil
	}
	_, err := transformID(counter, kindTyped, cmGVK, &corev1.ConfigMap{})
	if !errors.Is(err, errUnfingerprintable) {
		t.Fatalf("transformID of a transform whose output changes: %v, want errUnfingerprintable", err)
	}
}

func TestWrapTransform(t *testing.T) {
	fn := dropLabel("x")
	w := wrapTransform(fn)
	if reflect.ValueOf(wrapTransform(w)).Pointer() != reflect.ValueOf(w).Pointer() {
		t.Error("a wrapped transform was wrapped again")
	}
	if _, inner := unwrapTransform(w); reflect.ValueOf(inner).Pointer() != reflect.ValueOf(fn).Pointer() {
		t.Error("unwrapTransform does not return the wrapped function")
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"x": "1", "y": "2"}}}
	out, err := w(cm)
	if err != nil || len(out.(*corev1.ConfigMap).Labels) != 1 {
		t.Fatalf("the wrapped transform: %v, %v", out, err)
	}
	if wrapTransform(nil) != nil {
		t.Error("wrapTransform(nil) is not nil")
	}
}

// TestFilledSampleRecursiveType: a type that refers to itself (a CRD's
// schema) is filled within bounds.
func TestFilledSampleRecursiveType(t *testing.T) {
	obj := filledSample(reflect.TypeOf(apiextensionsv1.CustomResourceDefinition{}))
	if obj == nil {
		t.Fatal("no sample")
	}
	if _, err := transformID(crcache.TransformStripManagedFields(), kindTyped, schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}, &apiextensionsv1.CustomResourceDefinition{}); err != nil {
		t.Fatal(err)
	}
}

func stripStatusAnnotation(in any) (any, error) { return in, nil }

func TestTransformIDDeclaredFunction(t *testing.T) {
	if id := typedID(t, stripStatusAnnotation); !strings.HasPrefix(id, "auto:github.com/boltinformer/boltinformer/controllerruntime.stripStatusAnnotation:") {
		t.Errorf("a declared function's id %q does not carry its name", id)
	}
}
