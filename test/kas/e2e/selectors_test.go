package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"

	"github.com/boltinformer/boltinformer"
)

const selectorPods = 150 // per node

func pod(ns, name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "e2e"}},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
}

// restartAssertions checks a warm restart's requests: the first list or
// watch request of resource is a WATCH from saved, and there is no LIST.
func restartAssertions(t *testing.T, a *agent, resource, saved string) []request {
	t.Helper()
	reqs := a.rec.listWatch(resource)
	if len(reqs) == 0 || reqs[0].Verb != "WATCH" || reqs[0].Query.Get("resourceVersion") != saved {
		t.Fatalf("first %s request is not a WATCH from the saved resourceVersion %s: %v", resource, saved, reqs)
	}
	if n := countVerb(reqs, "LIST"); n != 0 {
		t.Fatalf("warm restart made %d LISTs: %v", n, reqs)
	}
	return reqs
}

// TestPodsOnNode: Pods on node-1 and node-2; the agent of node-1 (a
// spec.nodeName field selector) caches only its own, also after a warm
// restart during which Pods were created on both nodes and deleted.
func TestPodsOnNode(t *testing.T) {
	c := newChecker(t)
	ns := c.namespace(t, "pods")
	pods := c.cs.CoreV1().Pods(ns)
	if err := parallel(t.Context(), 2*selectorPods, 16, func(ctx context.Context, i int) error {
		node := fmt.Sprintf("node-%d", i%2+1)
		_, err := pods.Create(ctx, pod(ns, fmt.Sprintf("p-%s-%04d", node, i/2), node), metav1.CreateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	selector := fields.OneTermEqualSelector("spec.nodeName", "node-1").String()
	serverList := func(ctx context.Context) (runtime.Object, error) {
		return pods.List(ctx, metav1.ListOptions{FieldSelector: selector})
	}
	fopts := &boltinformer.FactoryOptions{
		Namespace:        ns,
		TweakListOptions: func(o *metav1.ListOptions) { o.FieldSelector = selector },
	}
	onlyNode1 := func(inf *boltinformer.Informer) {
		t.Helper()
		for _, obj := range inf.GetIndexer().List() {
			if p := obj.(*corev1.Pod); p.Spec.NodeName != "node-1" {
				t.Fatalf("node-1's agent caches %s/%s of %q", p.Namespace, p.Name, p.Spec.NodeName)
			}
		}
	}
	path := cachePath(t)
	a1 := newAgent(t, path, fopts)
	inf1, err := a1.factory.PersistentInformer(&corev1.Pod{})
	if err != nil {
		t.Fatal(err)
	}
	a1.start()
	a1.waitSynced(time.Minute)
	if want := waitConverged(t, inf1, serverList, time.Minute); len(want) != selectorPods {
		t.Fatalf("the server lists %d Pods on node-1, want %d", len(want), selectorPods)
	}
	onlyNode1(inf1)
	if q := a1.rec.listWatch("pods")[0].Query.Get("fieldSelector"); q != selector {
		t.Fatalf("fieldSelector %q, want %q", q, selector)
	}
	a1.stop()
	saved := inf1.Indexer().SavedState().ResourceVersion

	// While down: new Pods on both nodes, some of node-1's deleted.
	for i := range 10 {
		for _, node := range []string{"node-1", "node-2"} {
			if _, err := pods.Create(t.Context(), pod(ns, fmt.Sprintf("new-%s-%d", node, i), node), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		// No kubelet runs: a graceful delete would leave the Pod Terminating.
		if err := pods.Delete(t.Context(), fmt.Sprintf("p-node-1-%04d", i), metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			t.Fatal(err)
		}
	}

	a2 := newAgent(t, path, fopts)
	inf2, err := a2.factory.PersistentInformer(&corev1.Pod{})
	if err != nil {
		t.Fatal(err)
	}
	if !inf2.Decision().Warm || inf2.Indexer().Len() != selectorPods {
		t.Fatalf("restart: %+v with %d Pods, want warm with %d", inf2.Decision(), inf2.Indexer().Len(), selectorPods)
	}
	a2.start()
	want := waitConverged(t, inf2, serverList, time.Minute)
	if len(want) != selectorPods {
		t.Fatalf("the server lists %d Pods on node-1 after the changes, want %d (10 created, 10 deleted)", len(want), selectorPods)
	}
	onlyNode1(inf2)
	reqs := restartAssertions(t, a2, "pods", saved)
	t.Logf("node-1's agent: %d Pods after the warm restart; requests %v", len(want), reqs)

	// Another selector on the same file is another identity: cold.
	a2.stop()
	a3 := newAgent(t, path, &boltinformer.FactoryOptions{
		Namespace:        ns,
		TweakListOptions: func(o *metav1.ListOptions) { o.FieldSelector = "spec.nodeName=node-2" },
	})
	inf3, err := a3.factory.PersistentInformer(&corev1.Pod{})
	if err != nil {
		t.Fatal(err)
	}
	if d := inf3.Decision(); d.Warm {
		t.Fatalf("node-2's agent resumed node-1's file: %+v", d)
	}
}

// TestCustomResource: a CRD's objects through Factory.ForResource
// (unstructured), cold then warm.
func TestCustomResource(t *testing.T) {
	c := newChecker(t)
	ns := c.namespace(t, "crd")
	ext, err := apiextensions.NewForConfig(c.cfg)
	if err != nil {
		t.Fatal(err)
	}
	group := "e2e" + rand.String(5) + ".boltinformer.io"
	gvr := schema.GroupVersionResource{Group: group, Version: "v1", Resource: "widgets"}
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {Type: "object", XPreserveUnknownFields: ptr.To(true)},
					},
				}},
			}},
		},
	}
	if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Create(t.Context(), crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = ext.ApiextensionsV1().CustomResourceDefinitions().Delete(context.Background(), crd.Name, metav1.DeleteOptions{})
	})
	if !eventually(time.Minute, func() bool {
		got, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(t.Context(), crd.Name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return true
			}
		}
		return false
	}) {
		t.Fatal("CRD not Established within a minute")
	}
	widgets := c.dyn.Resource(gvr).Namespace(ns)
	widget := func(name string, size int64) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion(group + "/v1")
		u.SetKind("Widget")
		u.SetNamespace(ns)
		u.SetName(name)
		_ = unstructured.SetNestedField(u.Object, size, "spec", "size")
		_ = unstructured.SetNestedField(u.Object, map[string]any{"color": "blue", "tags": []any{"a", "b"}}, "spec", "extra")
		return u
	}
	// The resource is served a moment after Established.
	if !eventually(30*time.Second, func() bool {
		_, err := widgets.Create(t.Context(), widget("w-0000", 0), metav1.CreateOptions{})
		return err == nil
	}) {
		t.Fatal("cannot create the first Widget")
	}
	const n = 300
	if err := parallel(t.Context(), n-1, 16, func(ctx context.Context, i int) error {
		_, err := widgets.Create(ctx, widget(fmt.Sprintf("w-%04d", i+1), int64(i+1)), metav1.CreateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	serverList := func(ctx context.Context) (runtime.Object, error) { return widgets.List(ctx, metav1.ListOptions{}) }
	path := cachePath(t)
	fopts := &boltinformer.FactoryOptions{Namespace: ns}

	a1 := newAgent(t, path, fopts)
	inf1, err := a1.factory.DynamicInformer(gvr, nil)
	if err != nil {
		t.Fatal(err)
	}
	a1.start()
	a1.waitSynced(time.Minute)
	waitConverged(t, inf1, serverList, time.Minute)
	a1.stop()
	saved := inf1.Indexer().SavedState().ResourceVersion

	// While down: update, delete, create.
	for i := range 10 {
		name := fmt.Sprintf("w-%04d", i)
		cur, err := widgets.Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_ = unstructured.SetNestedField(cur.Object, int64(1000+i), "spec", "size")
		if _, err := widgets.Update(t.Context(), cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := widgets.Delete(t.Context(), fmt.Sprintf("w-%04d", n-1-i), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := widgets.Create(t.Context(), widget(fmt.Sprintf("new-%04d", i), 7), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	a2 := newAgent(t, path, fopts)
	inf2, err := a2.factory.DynamicInformer(gvr, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !inf2.Decision().Warm || inf2.Indexer().Len() != n {
		t.Fatalf("restart: %+v with %d objects, want warm with %d", inf2.Decision(), inf2.Indexer().Len(), n)
	}
	// From disk, before Start: an exact unstructured round trip.
	obj, ok, err := inf2.GetIndexer().GetByKey(ns + "/w-0005")
	if err != nil || !ok {
		t.Fatalf("GetByKey from disk: %v %v", ok, err)
	}
	u := obj.(*unstructured.Unstructured)
	if size, _, _ := unstructured.NestedInt64(u.Object, "spec", "size"); size != 5 || u.GetKind() != "Widget" {
		t.Fatalf("cached Widget from disk: kind %q size %d", u.GetKind(), size)
	}
	if tags, _, _ := unstructured.NestedStringSlice(u.Object, "spec", "extra", "tags"); fmt.Sprint(tags) != "[a b]" {
		t.Fatalf("cached Widget from disk: tags %v", tags)
	}
	a2.start()
	want := waitConverged(t, inf2, serverList, time.Minute)
	reqs := restartAssertions(t, a2, "widgets", saved)
	obj, _, _ = inf2.GetIndexer().GetByKey(ns + "/w-0005")
	if size, _, _ := unstructured.NestedInt64(obj.(*unstructured.Unstructured).Object, "spec", "size"); size != 1005 {
		t.Fatalf("updated Widget: size %d, want 1005", size)
	}
	t.Logf("widgets: %d after the warm restart; requests %v", len(want), reqs)
}
