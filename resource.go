package boltinformer

import (
	"fmt"
	"reflect"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
)

// DefaultResource is the identity an informer is saved under when
// InformerOptions.Resource is "": the kind of its objects, as
// schema.GroupVersionKind.String() writes it, and how they are held:
//
//	&corev1.Pod{}                                      "/v1, Kind=Pod"
//	unstructured, apiVersion example.com/v1, Widget    "example.com/v1, Kind=Widget (unstructured)"
//	&metav1.PartialObjectMetadata{} of v1 Pods         "/v1, Kind=Pod (metadata)"
//
// A typed example's kind comes from client-go's scheme, else from its
// TypeMeta; an unstructured or metadata-only example's from its apiVersion
// and kind (controller-runtime sets them), so informers of different kinds
// have different identities. An example whose kind is not known (an
// unstructured or metadata example without apiVersion and kind) gets its
// Go type, e.g. "*unstructured.Unstructured", which does not tell kinds
// apart: set InformerOptions.Resource (a Factory sets the
// GroupVersionResource, "/v1, Resource=pods").
func DefaultResource(example runtime.Object) string {
	if v := reflect.ValueOf(example); !v.IsValid() || (v.Kind() == reflect.Pointer && v.IsNil()) {
		return goTypeResource(example)
	}
	typeMeta := func() schema.GroupVersionKind {
		if example.GetObjectKind() == nil {
			return schema.GroupVersionKind{}
		}
		return example.GetObjectKind().GroupVersionKind()
	}
	var gvk schema.GroupVersionKind
	suffix := ""
	switch example.(type) {
	case *unstructured.Unstructured:
		gvk, suffix = typeMeta(), " (unstructured)"
	case *metav1.PartialObjectMetadata:
		gvk, suffix = typeMeta(), " (metadata)"
	default:
		if gvks, _, err := scheme.Scheme.ObjectKinds(example); err == nil && len(gvks) > 0 {
			gvk = gvks[0]
		} else {
			gvk = typeMeta()
		}
	}
	if gvk.Kind == "" {
		return goTypeResource(example)
	}
	return gvk.String() + suffix
}

// kindKnown refuses, as the default Resource, an unstructured or
// metadata-only example without apiVersion and kind: its default would be
// the same for every resource (client-go's metadatainformer passes
// &metav1.PartialObjectMetadata{}), so a file of one resource could be
// resumed for another under a reused informer name.
func kindKnown(example runtime.Object) error {
	switch example.(type) {
	case *unstructured.Unstructured, *metav1.PartialObjectMetadata:
		if example.GetObjectKind().GroupVersionKind().Kind == "" {
			return fmt.Errorf("InformerOptions.Resource is required for a %T example without apiVersion and kind: the file's identity could not tell resources apart", example)
		}
	}
	return nil
}

// goTypeResource is the default Resource before DefaultResource (the
// example's Go type): a file saved under it is resumed by an informer of
// that type with the default Resource, and saved under the new default at
// its next commit.
func goTypeResource(example runtime.Object) string { return fmt.Sprintf("%T", example) }
