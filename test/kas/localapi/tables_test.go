package localapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

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
// without NOMINATED NODE and READINESS GATES in -o wide, and other STATUS,
// READY and RESTARTS than kubectl's for Pods with init containers,
// sidecars, restarts or a scheduling gate; Nodes without ROLES and with
// VERSION before AGE, Services without EXTERNAL-IP, Deployments without
// their wide columns.
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

	var snaps []localapi.Snapshot // one per resource
	index := map[schema.GroupVersionResource]int{}
	for _, o := range objs {
		i, ok := index[o.gvr]
		if !ok {
			i = len(snaps)
			index[o.gvr] = i
			snaps = append(snaps, localapi.Snapshot{Informer: o.gvr.String(), Resource: o.gvr.GroupVersion().String() + ", Resource=" + o.gvr.Resource,
				Kind: o.gvk, ResourceVersion: "1"})
		}
		snaps[i].Objects = append(snaps[i].Objects, o.obj)
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

	pods := statusPods(t, cs, ns)

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

	out := []tableObject{
		{corev1.SchemeGroupVersion.WithResource("pods"), corev1.SchemeGroupVersion.WithKind("Pod"), pod.Name, pod},
		{corev1.SchemeGroupVersion.WithResource("nodes"), corev1.SchemeGroupVersion.WithKind("Node"), node.Name, node},
		{corev1.SchemeGroupVersion.WithResource("services"), corev1.SchemeGroupVersion.WithKind("Service"), svc.Name, svc},
		{appsv1.SchemeGroupVersion.WithResource("deployments"), appsv1.SchemeGroupVersion.WithKind("Deployment"), dep.Name, dep},
	}
	for _, p := range pods {
		out = append(out, tableObject{corev1.SchemeGroupVersion.WithResource("pods"), corev1.SchemeGroupVersion.WithKind("Pod"), p.Name, p})
	}
	return out
}

// statusPods makes Pods in the states kubectl's STATUS, READY and RESTARTS
// tell apart: restarts (with the time since the last), a crash loop in
// the second of two containers, init containers under way, a running
// sidecar, a scheduling gate, a completed container beside a running one.
func statusPods(t *testing.T, cs kubernetes.Interface, ns string) []*corev1.Pod {
	t.Helper()
	ctx := context.Background()
	ago := metav1.NewTime(time.Now().Add(-30*time.Minute - 20*time.Second)) // "30m ago" on both sides
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: ago}}
	restarted := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", FinishedAt: ago}}
	always := corev1.ContainerRestartPolicyAlways
	two := []corev1.Container{{Name: "main", Image: "app:v1"}, {Name: "side", Image: "side:v1"}}
	type podCase struct {
		name   string
		spec   func(*corev1.PodSpec)
		status corev1.PodStatus
	}
	cases := []podCase{
		{"crashloop", func(s *corev1.PodSpec) { s.Containers = two }, corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
			{Name: "main", Image: "app:v1", Ready: true, RestartCount: 3, State: running, LastTerminationState: restarted},
			{Name: "side", Image: "side:v1", RestartCount: 2, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}, LastTerminationState: restarted}}}},
		{"initializing", func(s *corev1.PodSpec) {
			s.InitContainers = []corev1.Container{{Name: "init-a", Image: "init:v1"}, {Name: "init-b", Image: "init:v1"}}
		}, corev1.PodStatus{Phase: corev1.PodPending, InitContainerStatuses: []corev1.ContainerStatus{
			{Name: "init-a", Image: "init:v1", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}}},
			{Name: "init-b", Image: "init:v1", RestartCount: 1, State: running, LastTerminationState: restarted}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "main", Image: "registry.example/app:v1", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}}}}},
		{"sidecar", func(s *corev1.PodSpec) {
			s.InitContainers = []corev1.Container{{Name: "proxy", Image: "proxy:v1", RestartPolicy: &always}}
		}, corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodInitialized, Status: corev1.ConditionTrue}, {Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			InitContainerStatuses: []corev1.ContainerStatus{{Name: "proxy", Image: "proxy:v1", Ready: true, Started: ptr.To(true), RestartCount: 4, State: running, LastTerminationState: restarted}},
			ContainerStatuses:     []corev1.ContainerStatus{{Name: "main", Image: "registry.example/app:v1", Ready: true, State: running}}}},
		{"gated", func(s *corev1.PodSpec) { s.NodeName = "" }, corev1.PodStatus{Phase: corev1.PodPending,
			Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonSchedulingGated}}}},
		{"half-done", func(s *corev1.PodSpec) { s.Containers = two }, corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
			{Name: "main", Image: "app:v1", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}}},
			{Name: "side", Image: "side:v1", Ready: true, State: running}}}},
	}
	var out []*corev1.Pod
	for _, c := range cases {
		p := testPod(0)
		p.Name = c.name
		c.spec(&p.Spec)
		p, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		p.Status = c.status
		if p, err = cs.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		out = append(out, p)
	}
	return out
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
