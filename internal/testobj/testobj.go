package testobj

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// Pod returns pod number i, in one of nss namespaces and on one of nodes
// nodes (both at least 1), with resourceVersion rv.
func Pod(i, nss, nodes int, rv string) *corev1.Pod {
	ns := fmt.Sprintf("ns-%d", i%max(nss, 1))
	name := fmt.Sprintf("pod-%06d", i)
	node := fmt.Sprintf("node-%d", i%max(nodes, 1))
	created := metav1.NewTime(epoch.Add(time.Duration(i) * time.Second))
	t := true
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:              name,
			Namespace:         ns,
			UID:               types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", i)),
			ResourceVersion:   rv,
			Generation:        1,
			CreationTimestamp: created,
			Labels: map[string]string{
				"app":                         fmt.Sprintf("app-%d", i%50),
				"tier":                        []string{"web", "db", "cache"}[i%3],
				"pod-template-hash":           "7d9c8b6f5",
				"app.kubernetes.io/component": "backend",
			},
			Annotations: map[string]string{
				"kubectl.kubernetes.io/restartedAt": "2026-01-02T03:04:05Z",
				"prometheus.io/scrape":              "true",
				"prometheus.io/port":                "9090",
			},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "apps/v1", Kind: "ReplicaSet", Name: fmt.Sprintf("app-%d-7d9c8b6f5", i%50),
				UID: types.UID(fmt.Sprintf("11111111-0000-4000-8000-%012d", i%50)), Controller: &t, BlockOwnerDeletion: &t,
			}},
		},
		Spec: corev1.PodSpec{
			NodeName:           node,
			ServiceAccountName: "default",
			RestartPolicy:      corev1.RestartPolicyAlways,
			DNSPolicy:          corev1.DNSClusterFirst,
			SchedulerName:      "default-scheduler",
			Containers: []corev1.Container{{
				Name:  "main",
				Image: fmt.Sprintf("registry.example.com/team/app-%d:v1.2.%d", i%50, i%7),
				Args:  []string{"--port=8080", "--log-level=info", "--metrics-addr=:9090"},
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}, {Name: "metrics", ContainerPort: 9090, Protocol: corev1.ProtocolTCP}},
				Env: []corev1.EnvVar{
					{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.name"}}},
					{Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}},
					{Name: "GOMAXPROCS", Value: "2"},
				},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("512Mi")},
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/app"}, {Name: "kube-api-access", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount", ReadOnly: true}},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/readyz", Port: intstr.FromString("http")}},
					PeriodSeconds: 10, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3,
				},
				TerminationMessagePath:   "/dev/termination-log",
				TerminationMessagePolicy: corev1.TerminationMessageReadFile,
				ImagePullPolicy:          corev1.PullIfNotPresent,
			}},
			Volumes: []corev1.Volume{
				{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: fmt.Sprintf("app-%d-config", i%50)}}}},
				{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr(int64(3607))}}}}}},
			},
			Tolerations: []corev1.Toleration{{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr(int64(300))}},
		},
		Status: corev1.PodStatus{
			Phase:     corev1.PodRunning,
			HostIP:    fmt.Sprintf("10.0.%d.%d", (i/250)%250, i%250),
			PodIP:     fmt.Sprintf("10.244.%d.%d", (i/250)%250, i%250),
			QOSClass:  corev1.PodQOSBurstable,
			StartTime: &created,
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: created},
				{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: created},
				{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: created},
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: created},
			},
			ContainerStatuses: []corev1.ContainerStatus{{
				Name: "main", Ready: true, RestartCount: int32(i % 3),
				Image:       fmt.Sprintf("registry.example.com/team/app-%d:v1.2.%d", i%50, i%7),
				ImageID:     "registry.example.com/team/app@sha256:4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945",
				ContainerID: fmt.Sprintf("containerd://%064d", i),
				State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: created}},
			}},
		},
	}
}

// Unstructured returns a custom resource number i in the given namespace.
func Unstructured(i int, ns, rv string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1",
		"kind":       "Widget",
		"metadata": map[string]any{
			"name":            fmt.Sprintf("widget-%d", i),
			"namespace":       ns,
			"uid":             fmt.Sprintf("22222222-0000-4000-8000-%012d", i),
			"resourceVersion": rv,
			"labels":          map[string]any{"color": []string{"red", "green", "blue"}[i%3]},
		},
		"spec": map[string]any{
			"size":    int64(i),
			"ratio":   0.5,
			"enabled": i%2 == 0,
			"tags":    []any{"a", "b"},
		},
	}}
}

func ptr[T any](v T) *T { return &v }
