package localapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/boltinformer/boltinformer/localapi"
)

// tableAccept asks for a meta.k8s.io/v1 Table, as kubectl get does.
const tableAccept = "application/json;as=Table;v=v1;g=meta.k8s.io"

// TestRegressionTableColumnsAsKubeAPIServer: the local API's Tables of the
// common kinds have kube-apiserver's columns (names, order, priority: what
// kubectl get and get -o wide print) and cells, but AGE. It had Pods
// without NOMINATED NODE and READINESS GATES in -o wide, Nodes without
// ROLES and with VERSION before AGE, Services without EXTERNAL-IP,
// Deployments without their wide columns.
func TestRegressionTableColumnsAsKubeAPIServer(t *testing.T) {
	cs, err := cluster.Clientset()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "tables-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	objs := tableObjects(t, cs, ns.Name)

	var snaps []localapi.Snapshot
	for _, o := range objs {
		snaps = append(snaps, localapi.Snapshot{Informer: o.gvr.String(), Resource: o.gvr.GroupVersion().String() + ", Resource=" + o.gvr.Resource,
			Kind: o.gvk, Objects: []runtime.Object{o.obj}, ResourceVersion: "1"})
	}
	h, err := localapi.NewStatic(snaps, &localapi.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for _, o := range objs {
		path := "/api/v1/nodes/" + o.name
		switch {
		case o.gvr.Group != "":
			path = fmt.Sprintf("/apis/%s/%s/namespaces/%s/%s/%s", o.gvr.Group, o.gvr.Version, ns.Name, o.gvr.Resource, o.name)
		case o.gvr.Resource != "nodes":
			path = fmt.Sprintf("/api/v1/namespaces/%s/%s/%s", ns.Name, o.gvr.Resource, o.name)
		}
		want := serverTable(t, cs, path)
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Header.Set("Accept", tableAccept)
		h.ServeHTTP(rec, req)
		var got metav1.Table
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || rec.Code != http.StatusOK {
			t.Fatalf("%s: %d %v: %s", path, rec.Code, err, rec.Body)
		}
		if g, w := tableShape(&got), tableShape(want); g != w {
			t.Errorf("%s, the local API:\n%s\nkube-apiserver:\n%s", o.gvr.Resource, g, w)
		}
	}
}

// tableObject is one object of TestRegressionTableColumnsAsKubeAPIServer,
// as the apiserver holds it.
type tableObject struct {
	gvr  schema.GroupVersionResource
	gvk  schema.GroupVersionKind
	name string
	obj  runtime.Object
}

// tableObjects makes, in ns, objects whose every column has a value: a
// Pod with readiness gates and a nominated node, a Node with roles,
// addresses and system info, a LoadBalancer Service with an external IP,
// a Deployment of two containers.
func tableObjects(t *testing.T, cs kubernetes.Interface, ns string) []tableObject {
	t.Helper()
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	pod := testPod(0)
	pod.Spec.NodeName = "" // a nominated node is for a pod not bound yet
	pod.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: "example.com/ready"}, {ConditionType: "example.com/other"}}
	pod, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	must(err)
	pod.Status.NominatedNodeName = "node-9"
	pod.Status.PodIPs = []corev1.PodIP{{IP: "10.0.0.7"}}
	pod.Status.PodIP = "10.0.0.7"
	pod.Status.Conditions = []corev1.PodCondition{{Type: "example.com/ready", Status: corev1.ConditionTrue}}
	pod, err = cs.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	must(err)

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: ns + "-node", Labels: map[string]string{
		"node-role.kubernetes.io/worker": "", "node-role.kubernetes.io/edge": "", "kubernetes.io/role": "gateway"}}}
	node, err = cs.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	must(err)
	t.Cleanup(func() { _ = cs.CoreV1().Nodes().Delete(context.Background(), node.Name, metav1.DeleteOptions{}) })
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.0.5"}, {Type: corev1.NodeExternalIP, Address: "203.0.113.5"}}
	node.Status.NodeInfo = corev1.NodeSystemInfo{KubeletVersion: "v1.37.2", OSImage: "Debian GNU/Linux 13", KernelVersion: "6.12.0", ContainerRuntimeVersion: "containerd://2.1.0"}
	node, err = cs.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
	must(err)

	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "svc"}, Spec: corev1.ServiceSpec{
		Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"tier": "web", "app": "a"}, ExternalIPs: []string{"198.51.100.1"},
		Ports: []corev1.ServicePort{{Name: "http", Port: 80}, {Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}}}}
	svc, err = cs.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
	must(err)

	labels := map[string]string{"app": "d"}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "dep"}, Spec: appsv1.DeploymentSpec{
		Replicas: ptr.To[int32](3), Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "main", Image: "registry.example/app:v1"}, {Name: "side", Image: "registry.example/side:v2"}}}}}}
	dep, err = cs.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{})
	must(err)

	return []tableObject{
		{corev1.SchemeGroupVersion.WithResource("pods"), corev1.SchemeGroupVersion.WithKind("Pod"), pod.Name, pod},
		{corev1.SchemeGroupVersion.WithResource("nodes"), corev1.SchemeGroupVersion.WithKind("Node"), node.Name, node},
		{corev1.SchemeGroupVersion.WithResource("services"), corev1.SchemeGroupVersion.WithKind("Service"), svc.Name, svc},
		{appsv1.SchemeGroupVersion.WithResource("deployments"), appsv1.SchemeGroupVersion.WithKind("Deployment"), dep.Name, dep},
	}
}

// serverTable is the apiserver's Table of path.
func serverTable(t *testing.T, cs kubernetes.Interface, path string) *metav1.Table {
	t.Helper()
	b, err := cs.CoreV1().RESTClient().Get().AbsPath(path).SetHeader("Accept", tableAccept).Do(context.Background()).Raw()
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var tb metav1.Table
	if err := json.Unmarshal(b, &tb); err != nil {
		t.Fatal(err)
	}
	return &tb
}

// tableShape is what kubectl prints of a Table: each column's name (in
// capitals, as kubectl prints them) and priority, and the cells of each
// row as kubectl prints it, but for AGE.
func tableShape(tb *metav1.Table) string {
	var b strings.Builder
	age := -1
	for i, c := range tb.ColumnDefinitions {
		name := strings.ToUpper(c.Name)
		if name == "AGE" {
			age = i
		}
		fmt.Fprintf(&b, "%s/%d ", name, c.Priority)
	}
	for _, r := range tb.Rows {
		cells := make([]string, len(r.Cells))
		for i, c := range r.Cells {
			cells[i] = fmt.Sprint(c) // as kubectl prints it: 0 and "0" alike
		}
		if age >= 0 && age < len(cells) {
			cells[age] = "-"
		}
		fmt.Fprintf(&b, "\n%q", cells)
	}
	return b.String()
}
