package main

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/boltinformer/boltinformer/store"
)

func TestInformerKind(t *testing.T) {
	for _, tc := range []struct {
		st   *store.State
		want schema.GroupVersionKind
	}{
		{nil, schema.GroupVersionKind{}},
		{&store.State{}, schema.GroupVersionKind{}},
		// Recorded by the indexer: wins over the resource.
		{&store.State{Kind: "/v1, Kind=Pod", Resource: "apps/v1, Resource=deployments"}, schema.GroupVersionKind{Version: "v1", Kind: "Pod"}},
		{&store.State{Kind: "apps/v1, Kind=Deployment"}, schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}},
		// Guessed from the resource of files written before State.Kind.
		{&store.State{Resource: "/v1, Resource=pods"}, schema.GroupVersionKind{Version: "v1", Kind: "Pod"}},
		{&store.State{Resource: "/v1, Resource=endpoints"}, schema.GroupVersionKind{Version: "v1", Kind: "Endpoints"}},
		{&store.State{Resource: "networking.k8s.io/v1, Resource=ingresses"}, schema.GroupVersionKind{Group: "networking.k8s.io", Version: "v1", Kind: "Ingress"}},
		{&store.State{Resource: "apps/v1, Resource=deployments"}, schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}},
		{&store.State{Resource: "example.com/v1, Resource=widgets"}, schema.GroupVersionKind{}},
		{&store.State{Resource: "configmaps"}, schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}},
		{&store.State{Resource: "*v1.Pod"}, schema.GroupVersionKind{Version: "v1", Kind: "Pod"}},
		{&store.State{Resource: "*v1.Deployment"}, schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}},
		{&store.State{Resource: "*unstructured.Unstructured"}, schema.GroupVersionKind{}},
		{&store.State{Kind: "garbage", Resource: "garbage"}, schema.GroupVersionKind{}},
	} {
		if got := informerKind(tc.st); got != tc.want {
			t.Errorf("%+v: got %v, want %v", tc.st, got, tc.want)
		}
	}
}

func TestDecodeWithoutState(t *testing.T) {
	// A record of a typed informer has no TypeMeta: without the state's
	// kind, a protobuf payload is only its envelope, and JSON is as-is.
	d := newDecoder("x", nil, nil)
	o, err := d.decode("ns/a", &store.Record{Codec: store.CodecProtobuf, Payload: []byte{0x0a, 0x01, 'a'}})
	if err != nil || o.obj != nil || o.failed || o.reason != "protobuf payload of a type this inspect does not know" {
		t.Fatalf("%v: %+v", err, o)
	}
	o, err = d.decode("ns/a", &store.Record{Codec: store.CodecJSON, Payload: []byte(`{"metadata":{"name":"a"},"n":1}`)})
	if err != nil || o.obj == nil || nameOf(o) != "object/a" {
		t.Fatalf("%v: %+v", err, o)
	}
	// With the kind from the record, typed JSON decodes into its type.
	o, err = d.decode("ns/a", &store.Record{Codec: store.CodecJSON, APIVersion: "v1", Kind: "ConfigMap", Payload: []byte(`{"metadata":{"name":"a"},"data":{"k":"v"}}`)})
	if err != nil || nameOf(o) != "configmap/a" || o.obj.GetObjectKind().GroupVersionKind().Kind != "ConfigMap" {
		t.Fatalf("%v: %+v", err, o)
	}
	for _, bad := range []string{`null`, `[1]`, `{`} {
		o, err = d.decode("ns/a", &store.Record{Codec: store.CodecJSON, Payload: []byte(bad)})
		if err != nil || o.obj != nil || !o.failed {
			t.Errorf("%s: %v: %+v", bad, err, o)
		}
	}
}

// nameOf is the object as -o name prints it.
func nameOf(o *object) string {
	var b strings.Builder
	if err := (namePrinter{}).PrintObj(o.printable(), &b); err != nil {
		return err.Error()
	}
	return strings.TrimSuffix(b.String(), "\n")
}
