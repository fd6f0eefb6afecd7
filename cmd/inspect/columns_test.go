package main

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/boltinformer/boltinformer/store"
)

func TestObjectTable(t *testing.T) {
	created := metav1.NewTime(testNow.Add(-90 * time.Minute))
	om := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: "ns", CreationTimestamp: created, ResourceVersion: "7"}
	}
	two := int32(2)
	gone := metav1.NewTime(testNow)
	for _, tc := range []struct {
		obj  runtime.Object
		want string
	}{
		{&corev1.Pod{ObjectMeta: om("crash"), Spec: corev1.PodSpec{Containers: make([]corev1.Container, 2), NodeName: "n1"},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1", ContainerStatuses: []corev1.ContainerStatus{
				{Ready: true, RestartCount: 1, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
				{RestartCount: 4, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}},
			}}},
			"NAME    READY   STATUS             RESTARTS   AGE   IP         NODE   NOMINATED NODE   READINESS GATES   RESOURCEVERSION   CODEC      BYTES\n" +
				"crash   1/2     CrashLoopBackOff   5          90m   10.0.0.1   n1     <none>           <none>            7                 protobuf   0\n"},
		{&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "bye", CreationTimestamp: created, DeletionTimestamp: &gone}, Status: corev1.PodStatus{Phase: corev1.PodRunning}},
			"NAME   READY   STATUS        RESTARTS   AGE   IP       NODE     NOMINATED NODE   READINESS GATES   RESOURCEVERSION   CODEC      BYTES\n" +
				"bye    0/0     Terminating   0          90m   <none>   <none>   <none>           <none>            7                 protobuf   0\n"},
		{&corev1.ConfigMap{ObjectMeta: om("cm"), Data: map[string]string{"a": "b"}, BinaryData: map[string][]byte{"c": nil}},
			"NAME   DATA   AGE   RESOURCEVERSION   CODEC      BYTES\ncm     2      90m   7                 protobuf   0\n"},
		{&corev1.Node{ObjectMeta: om("n1"), Spec: corev1.NodeSpec{Unschedulable: true}, Status: corev1.NodeStatus{
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: "h"}, {Type: corev1.NodeInternalIP, Address: "192.168.0.9"}},
			NodeInfo:   corev1.NodeSystemInfo{KubeletVersion: "v1.37.2"}}},
			"NAME   STATUS                     ROLES    AGE   VERSION   INTERNAL-IP   EXTERNAL-IP   OS-IMAGE    KERNEL-VERSION   CONTAINER-RUNTIME   RESOURCEVERSION   CODEC      BYTES\n" +
				"n1     Ready,SchedulingDisabled   <none>   90m   v1.37.2   192.168.0.9   <none>        <unknown>   <unknown>        <unknown>           7                 protobuf   0\n"},
		{&corev1.Service{ObjectMeta: om("svc"), Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, ClusterIP: "10.96.0.10",
			Selector: map[string]string{"b": "2", "a": "1"},
			Ports:    []corev1.ServicePort{{Port: 53, Protocol: corev1.ProtocolUDP}, {Port: 80, NodePort: 30080, Protocol: corev1.ProtocolTCP}}}},
			"NAME   TYPE       CLUSTER-IP   EXTERNAL-IP   PORT(S)               AGE   SELECTOR   RESOURCEVERSION   CODEC      BYTES\n" +
				"svc    NodePort   10.96.0.10   <none>        53/UDP,80:30080/TCP   90m   a=1,b=2    7                 protobuf   0\n"},
		{&appsv1.Deployment{ObjectMeta: om("web"), Spec: appsv1.DeploymentSpec{Replicas: &two,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Image: "app:v1"}, {Name: "side", Image: "side:v2"}}}}},
			Status: appsv1.DeploymentStatus{ReadyReplicas: 1, UpdatedReplicas: 2, AvailableReplicas: 1}},
			"NAME   READY   UP-TO-DATE   AVAILABLE   AGE   CONTAINERS   IMAGES           SELECTOR   RESOURCEVERSION   CODEC      BYTES\n" +
				"web    1/2     2            1           90m   main,side    app:v1,side:v2   app=web    7                 protobuf   0\n"},
	} {
		gvks, _, err := scheme.Scheme.ObjectKinds(tc.obj)
		if err != nil {
			t.Fatal(err)
		}
		o := &object{key: "ns/x", rec: &store.Record{ResourceVersion: "7", Codec: store.CodecProtobuf}, obj: tc.obj, gvk: gvks[0]}
		var got strings.Builder
		if err := printTable(&got, objectTable([]*object{o}, gvks[0], testNow), &printFlags{output: formatWide}, false); err != nil {
			t.Fatal(err)
		}
		if got.String() != tc.want {
			t.Errorf("%s:\n%s\nwant\n%s", gvks[0].Kind, got.String(), tc.want)
		}
	}
	// An object of another kind than the informer's: its cells are unknown.
	o := &object{key: "ns/x", rec: &store.Record{Codec: store.CodecJSON}, obj: &corev1.ConfigMap{ObjectMeta: om("cm")}, gvk: schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}}
	var got strings.Builder
	_ = printTable(&got, objectTable([]*object{o}, schema.GroupVersionKind{Version: "v1", Kind: "Pod"}, testNow), &printFlags{noHeaders: true}, true)
	if want := "ns    cm    ?     ?     ?     90m\n"; got.String() != want {
		t.Errorf("got %q, want %q", got.String(), want)
	}
}
