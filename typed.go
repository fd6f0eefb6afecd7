package boltinformer

import (
	"context"
	"fmt"
	"reflect"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// typedResource names the typed client of one built-in type in a
// kubernetes.Interface: the group method (e.g. "CoreV1") and the
// resource method of its client (e.g. "Pods", taking a namespace unless
// the resource is cluster-scoped), whose List returns a list of the type.
// It is found from the clientset's method signatures (typedResources), so
// it serves any kubernetes.Interface: a clientset, a wrapper of one, or
// the fake clientset of k8s.io/client-go/kubernetes/fake.
type typedResource struct {
	group, resource string
	namespaced      bool
}

var (
	contextType     = reflect.TypeFor[context.Context]()
	listOptionsType = reflect.TypeFor[metav1.ListOptions]()
	watchType       = reflect.TypeFor[watch.Interface]()
	errorType       = reflect.TypeFor[error]()
)

// typedResources maps the pointer type of each object a kubernetes.Interface
// lists (e.g. *corev1.Pod) to its typed client: each group method of the
// interface, each resource method of the group's client whose result has
// List(ctx, metav1.ListOptions) (*XList, error) and Watch(ctx,
// metav1.ListOptions) (watch.Interface, error), keyed by the element type
// of XList's Items.
var typedResources = sync.OnceValue(func() map[reflect.Type]typedResource {
	out := map[reflect.Type]typedResource{}
	ki := reflect.TypeFor[kubernetes.Interface]()
	for i := range ki.NumMethod() {
		gm := ki.Method(i)
		if gm.Type.NumIn() != 0 || gm.Type.NumOut() != 1 || gm.Type.Out(0).Kind() != reflect.Interface {
			continue
		}
		gt := gm.Type.Out(0)
		for j := range gt.NumMethod() {
			rm := gt.Method(j)
			namespaced := rm.Type.NumIn() == 1 && rm.Type.In(0).Kind() == reflect.String
			if (!namespaced && rm.Type.NumIn() != 0) || rm.Type.NumOut() != 1 || rm.Type.Out(0).Kind() != reflect.Interface {
				continue
			}
			item := listedType(rm.Type.Out(0))
			if item == nil {
				continue
			}
			if _, dup := out[item]; !dup {
				out[item] = typedResource{group: gm.Name, resource: rm.Name, namespaced: namespaced}
			}
		}
	}
	return out
})

// listedType returns the pointer type of the items a resource client
// interface lists, or nil if it is not one.
func listedType(rt reflect.Type) reflect.Type {
	list, ok := rt.MethodByName("List")
	if !ok || list.Type.NumIn() != 2 || list.Type.In(0) != contextType || list.Type.In(1) != listOptionsType ||
		list.Type.NumOut() != 2 || list.Type.Out(1) != errorType {
		return nil
	}
	w, ok := rt.MethodByName("Watch")
	if !ok || w.Type.NumIn() != 2 || w.Type.In(0) != contextType || w.Type.In(1) != listOptionsType ||
		w.Type.NumOut() != 2 || w.Type.Out(0) != watchType || w.Type.Out(1) != errorType {
		return nil
	}
	lt := list.Type.Out(0)
	if lt.Kind() != reflect.Pointer || lt.Elem().Kind() != reflect.Struct {
		return nil
	}
	items, ok := lt.Elem().FieldByName("Items")
	if !ok || items.Type.Kind() != reflect.Slice || items.Type.Elem().Kind() != reflect.Struct {
		return nil
	}
	return reflect.PointerTo(items.Type.Elem())
}

// typedResourceFor returns the typed client of example's type.
func typedResourceFor(example runtime.Object) (typedResource, bool) {
	tr, ok := typedResources()[reflect.TypeOf(example)]
	return tr, ok
}

// client returns the resource client of namespace ns ("" for all
// namespaces; ignored for a cluster-scoped resource) from c.
func (t typedResource) client(c kubernetes.Interface, ns string) (reflect.Value, error) {
	cv := reflect.ValueOf(c)
	if !cv.IsValid() {
		return reflect.Value{}, fmt.Errorf("boltinformer: no client")
	}
	gm := cv.MethodByName(t.group)
	if !gm.IsValid() {
		return reflect.Value{}, fmt.Errorf("boltinformer: client %T has no method %s", c, t.group)
	}
	g := gm.Call(nil)[0]
	if g.IsNil() {
		return reflect.Value{}, fmt.Errorf("boltinformer: client %T: %s() is nil", c, t.group)
	}
	var args []reflect.Value
	if t.namespaced {
		args = []reflect.Value{reflect.ValueOf(ns)}
	}
	r := g.MethodByName(t.resource).Call(args)[0]
	if r.IsNil() {
		return reflect.Value{}, fmt.Errorf("boltinformer: client %T: %s().%s() is nil", c, t.group, t.resource)
	}
	return r, nil
}

// list lists with o through c's typed client.
func (t typedResource) list(ctx context.Context, c kubernetes.Interface, ns string, o metav1.ListOptions) (runtime.Object, error) {
	r, err := t.client(c, ns)
	if err != nil {
		return nil, err
	}
	out := r.MethodByName("List").Call([]reflect.Value{reflect.ValueOf(ctx), reflect.ValueOf(o)})
	if err, _ := out[1].Interface().(error); err != nil {
		return nil, err
	}
	if out[0].IsNil() {
		return nil, fmt.Errorf("boltinformer: %s().%s().List returned no list and no error", t.group, t.resource)
	}
	return out[0].Interface().(runtime.Object), nil
}

// watch watches with o through c's typed client.
func (t typedResource) watch(ctx context.Context, c kubernetes.Interface, ns string, o metav1.ListOptions) (watch.Interface, error) {
	r, err := t.client(c, ns)
	if err != nil {
		return nil, err
	}
	out := r.MethodByName("Watch").Call([]reflect.Value{reflect.ValueOf(ctx), reflect.ValueOf(o)})
	if err, _ := out[1].Interface().(error); err != nil {
		return nil, err
	}
	if out[0].IsNil() {
		return nil, fmt.Errorf("boltinformer: %s().%s().Watch returned no watch and no error", t.group, t.resource)
	}
	return out[0].Interface().(watch.Interface), nil
}

// listWatch lists and watches namespace ns through c's typed client, with
// tweak applied to every request (as client-go's generated informers do),
// and the watch-list semantics c supports.
func (t typedResource) listWatch(c kubernetes.Interface, ns string, tweak func(*metav1.ListOptions)) cache.ListerWatcher {
	if tweak == nil {
		tweak = func(*metav1.ListOptions) {}
	}
	return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			tweak(&o)
			return t.list(ctx, c, ns, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			tweak(&o)
			return t.watch(ctx, c, ns, o)
		},
	}, c)
}
