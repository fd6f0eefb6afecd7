package boltcr

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"runtime"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/randfill"
)

// Objects are stored after the informer's transform, so a file saved with
// one transform must not be resumed with another (invariant 5 of
// docs/ARCHITECTURE.md). controller-runtime hands each informer its
// transform through SetTransform, right after NewInformer; the informer is
// built then, with the transform's identity:
//
//   - a transform named with Transform(id, fn) is identified by id;
//   - any other is fingerprinted: a hash of what it returns for fixed
//     sample objects of the informer's type (rich metadata, and a randomly
//     filled object from a fixed seed), computed twice (a transform whose
//     output differs between the two runs cannot be fingerprinted, and its
//     informer is not persisted), and the function's name when it is a
//     declared function (a function literal's name depends on where the
//     compiler inlined it, so it is left out).
//
// A fingerprint sees what the samples show: a change of a closure's
// captured configuration or of its body that leaves the samples' output
// alone is not seen. Name such a transform, and change its id with it.

// Transform names a transform for NewCache's informers: the informers it
// transforms are saved under id, and a file saved under another id (or
// another transform) is not resumed. Change id whenever what fn does
// changes. Use it in cache.Options (DefaultTransform, ByObject's
// Transform, DefaultNamespaces' Transform). An empty id means no name: the
// transform is fingerprinted.
//
// Not inlined: the wrapper is recognized by its closure's code pointer.
//
//go:noinline
func Transform(id string, fn cache.TransformFunc) cache.TransformFunc {
	return func(in any) (any, error) {
		if p, ok := in.(*transformProbe); ok {
			p.found, p.id, p.fn = true, id, fn
			return p, nil
		}
		return fn(in)
	}
}

// autoTransform wraps a transform NewCache found in cache.Options so that
// the probe reaches its function without calling it.
//
// Not inlined: the wrapper is recognized by its closure's code pointer.
//
//go:noinline
func autoTransform(fn cache.TransformFunc) cache.TransformFunc {
	return func(in any) (any, error) {
		if p, ok := in.(*transformProbe); ok {
			p.found, p.fn = true, fn
			return p, nil
		}
		return fn(in)
	}
}

// transformProbe is passed to a wrapped transform to learn what it wraps.
type transformProbe struct {
	found bool
	id    string
	fn    cache.TransformFunc
}

// The code pointers of the wrappers' closures: a transform with one of
// them is a wrapper and answers the probe.
var (
	namedPC = reflect.ValueOf(Transform("", nil)).Pointer()
	autoPC  = reflect.ValueOf(autoTransform(nil)).Pointer()
)

// wrapTransform returns fn wrapped by autoTransform, unless it is nil or
// a wrapper already.
func wrapTransform(fn cache.TransformFunc) cache.TransformFunc {
	if fn == nil {
		return nil
	}
	if pc := reflect.ValueOf(fn).Pointer(); pc == namedPC || pc == autoPC {
		return fn
	}
	return autoTransform(fn)
}

// unwrapTransform returns the id and function a wrapper holds; fn itself
// when it is not a wrapper.
func unwrapTransform(fn cache.TransformFunc) (id string, inner cache.TransformFunc) {
	if pc := reflect.ValueOf(fn).Pointer(); pc != namedPC && pc != autoPC {
		return "", fn
	}
	p := &transformProbe{}
	if _, err := fn(p); err != nil || !p.found {
		return "", fn
	}
	return p.id, p.fn
}

// closureName matches the name of a function literal. Its name depends
// on where it was inlined ("pkg.Caller.Factory.func2" for a closure of
// Factory inlined into Caller), so it is left out of a fingerprint.
var closureName = regexp.MustCompile(`\.func\d+(\.\d+)*$`)

// errUnfingerprintable means a transform's output could not be
// fingerprinted: its informer is not persisted.
var errUnfingerprintable = errors.New("boltcr: the transform cannot be fingerprinted")

// transformID returns the identity of fn for informers of example's type
// (kind and gvk say which samples): "" for no transform, "name:<id>" for a
// named one, "auto:<function>:<hash>" for a fingerprinted one (a
// function literal's name is "closure"), or an
// error wrapping errUnfingerprintable.
func transformID(fn cache.TransformFunc, kind objectKind, gvk schema.GroupVersionKind, example k8sruntime.Object) (string, error) {
	if fn == nil {
		return "", nil
	}
	id, inner := unwrapTransform(fn)
	if id != "" {
		return "name:" + id, nil
	}
	if inner == nil {
		return "", nil
	}
	name := "closure"
	if f := runtime.FuncForPC(reflect.ValueOf(inner).Pointer()); f != nil && !closureName.MatchString(f.Name()) {
		name = f.Name()
	}
	first, err := sampleOutputs(inner, kind, gvk, example)
	if err != nil {
		return "", err
	}
	second, err := sampleOutputs(inner, kind, gvk, example)
	if err != nil {
		return "", err
	}
	if first != second {
		return "", fmt.Errorf("%w: %s returns different objects for the same samples (not deterministic)", errUnfingerprintable, name)
	}
	return "auto:" + name + ":" + first, nil
}

// sampleOutputs runs fn on fresh samples and hashes what it returns.
func sampleOutputs(fn cache.TransformFunc, kind objectKind, gvk schema.GroupVersionKind, example k8sruntime.Object) (string, error) {
	samples, err := newSamples(kind, gvk, example)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, s := range samples {
		fmt.Fprintf(h, "%s\x00", runSample(fn, s))
	}
	return hex.EncodeToString(h.Sum(nil)[:12]), nil
}

// runSample returns fn's output for in as JSON, or what went wrong:
// deterministic for a deterministic fn.
func runSample(fn cache.TransformFunc, in any) (out string) {
	defer func() {
		if r := recover(); r != nil {
			out = fmt.Sprintf("panic: %v", r)
		}
	}()
	res, err := fn(in)
	if err != nil {
		return "error: " + err.Error()
	}
	b, err := json.Marshal(res)
	if err != nil {
		return fmt.Sprintf("unmarshalable %T: %v", res, err)
	}
	return fmt.Sprintf("%T %s", res, b)
}

// sampleTime is the samples' timestamp.
var sampleTime = metav1.NewTime(time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC))

// fillSampleMeta gives m fixed, rich metadata: what transforms usually
// touch (managed fields, annotations, labels, owners, finalizers).
func fillSampleMeta(m metav1.Object) {
	m.SetName("boltinformer-sample")
	m.SetNamespace("boltinformer-sample-ns")
	m.SetUID("6f1b2c3d-0000-4000-8000-000000000001")
	m.SetResourceVersion("12345")
	m.SetGeneration(3)
	m.SetCreationTimestamp(sampleTime)
	m.SetLabels(map[string]string{"app": "sample", "app.kubernetes.io/name": "sample", "tier": "backend"})
	m.SetAnnotations(map[string]string{
		"kubectl.kubernetes.io/last-applied-configuration": `{"apiVersion":"v1","kind":"Sample","metadata":{"name":"boltinformer-sample"}}`,
		"example.com/note": "a sample annotation",
	})
	m.SetFinalizers([]string{"example.com/finalizer"})
	m.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "owner", UID: "6f1b2c3d-0000-4000-8000-000000000002"}})
	m.SetManagedFields([]metav1.ManagedFieldsEntry{
		{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply, APIVersion: "v1", Time: &sampleTime, FieldsType: "FieldsV1",
			FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{"f:labels":{"f:app":{}}}}`)},
		{Manager: "controller", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &sampleTime, FieldsType: "FieldsV1",
			FieldsV1: metav1.NewFieldsV1(`{"f:status":{}}`), Subresource: "status"},
	})
}

// newSamples returns fresh sample objects of the informer's type.
func newSamples(kind objectKind, gvk schema.GroupVersionKind, example k8sruntime.Object) ([]any, error) {
	switch kind {
	case kindUnstructured:
		u := &unstructured.Unstructured{Object: map[string]any{
			"spec":   map[string]any{"replicas": int64(2), "image": "registry.example/sample:1", "list": []any{"a", "b"}},
			"status": map[string]any{"phase": "Ready", "conditions": []any{map[string]any{"type": "Ready", "status": "True"}}},
			"data":   map[string]any{"key": "value"},
		}}
		u.SetGroupVersionKind(gvk)
		fillSampleMeta(u)
		return []any{u}, nil
	case kindMetadata:
		m := &metav1.PartialObjectMetadata{}
		m.SetGroupVersionKind(gvk)
		fillSampleMeta(m)
		return []any{m}, nil
	}
	t := reflect.TypeOf(example)
	if t == nil || t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("%w: %T is not a pointer to a struct", errUnfingerprintable, example)
	}
	rich, ok := reflect.New(t.Elem()).Interface().(k8sruntime.Object)
	if !ok {
		return nil, fmt.Errorf("%w: %T is not a runtime.Object", errUnfingerprintable, example)
	}
	acc, err := meta.Accessor(rich)
	if err != nil {
		return nil, fmt.Errorf("%w: %T: %v", errUnfingerprintable, example, err)
	}
	fillSampleMeta(acc)
	return []any{rich, filledSample(t.Elem())}, nil
}

// filledSample returns a new object of type t with every field filled
// from a fixed seed (and metadata from fillSampleMeta), or nil when
// filling panics. Depth and branching are bounded, so a recursive type
// (a CRD's schema) stays small.
func filledSample(t reflect.Type) (out any) {
	defer func() {
		if recover() != nil {
			out = nil
		}
	}()
	obj := reflect.New(t).Interface()
	f := randfill.NewWithSeed(20240102).NilChance(0.3).NumElements(1, 1).MaxDepth(6).Funcs(
		func(j *metav1.TypeMeta, _ randfill.Continue) { *j = metav1.TypeMeta{} },
		func(j *metav1.ObjectMeta, _ randfill.Continue) { *j = metav1.ObjectMeta{}; fillSampleMeta(j) },
		func(j *metav1.Time, _ randfill.Continue) { *j = sampleTime },
		func(j *metav1.MicroTime, _ randfill.Continue) { *j = metav1.NewMicroTime(sampleTime.Time) },
		func(j *resource.Quantity, _ randfill.Continue) { *j = resource.MustParse("1500m") },
		func(j *intstr.IntOrString, _ randfill.Continue) { *j = intstr.FromString("http") },
		func(j *k8sruntime.RawExtension, _ randfill.Continue) {
			*j = k8sruntime.RawExtension{Raw: []byte(`{"apiVersion":"v1","kind":"Sample"}`)}
		},
	)
	f.Fill(obj)
	return obj
}
