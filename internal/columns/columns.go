package columns

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/duration"
)

// Set are the columns of one kind: Headers between NAME and AGE, and, for
// wide output, Wide after AGE, in the spirit of kubectl's printers.
type Set struct {
	Headers, Wide []string
	// Cells returns an object's cells for Headers and Wide ("?" for each
	// when the object is not of the kind).
	Cells func(runtime.Object) (cells, wide []string)
}

var byKind = map[schema.GroupKind]Set{
	{Kind: "Pod"}:                       {[]string{"READY", "STATUS", "RESTARTS"}, []string{"IP", "NODE"}, podCells},
	{Kind: "Secret"}:                    {[]string{"TYPE", "DATA"}, nil, secretCells},
	{Kind: "ConfigMap"}:                 {[]string{"DATA"}, nil, configMapCells},
	{Kind: "Node"}:                      {[]string{"STATUS", "VERSION"}, []string{"INTERNAL-IP"}, nodeCells},
	{Kind: "Service"}:                   {[]string{"TYPE", "CLUSTER-IP", "PORT(S)"}, []string{"SELECTOR"}, serviceCells},
	{Group: "apps", Kind: "Deployment"}: {[]string{"READY", "UP-TO-DATE", "AVAILABLE"}, nil, deploymentCells},
}

// For returns the columns of a kind; false (and an empty Set) for a kind
// without columns of its own, which tables show with NAME and AGE only.
func For(gk schema.GroupKind) (Set, bool) {
	s, ok := byKind[gk]
	return s, ok
}

// Age is the AGE cell of an object created at t, as kubectl prints it
// ("<unknown>" for a zero time).
func Age(now, t time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t))
}

// orNone is s, or "<none>" for an empty s.
func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

// Unknown returns n cells of "?".
func Unknown(n int) []string {
	c := make([]string, n)
	for i := range c {
		c[i] = "?"
	}
	return c
}

func podCells(obj runtime.Object) ([]string, []string) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return Unknown(3), Unknown(2)
	}
	ready, restarts := 0, int32(0)
	status := string(p.Status.Phase)
	if p.Status.Reason != "" {
		status = p.Status.Reason
	}
	for _, cs := range p.Status.ContainerStatuses {
		restarts += cs.RestartCount
		switch {
		case cs.State.Waiting != nil && cs.State.Waiting.Reason != "":
			status = cs.State.Waiting.Reason
		case cs.State.Terminated != nil && cs.State.Terminated.Reason != "":
			status = cs.State.Terminated.Reason
		case cs.Ready && cs.State.Running != nil:
			ready++
		}
	}
	if p.DeletionTimestamp != nil {
		status = "Terminating"
	}
	return []string{fmt.Sprintf("%d/%d", ready, len(p.Spec.Containers)), orNone(status), strconv.Itoa(int(restarts))},
		[]string{orNone(p.Status.PodIP), orNone(p.Spec.NodeName)}
}

func secretCells(obj runtime.Object) ([]string, []string) {
	s, ok := obj.(*corev1.Secret)
	if !ok {
		return Unknown(2), nil
	}
	return []string{string(s.Type), strconv.Itoa(len(s.Data))}, nil
}

func configMapCells(obj runtime.Object) ([]string, []string) {
	c, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return Unknown(1), nil
	}
	return []string{strconv.Itoa(len(c.Data) + len(c.BinaryData))}, nil
}

func nodeCells(obj runtime.Object) ([]string, []string) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return Unknown(2), Unknown(1)
	}
	status := "Unknown"
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			status = "NotReady"
			if c.Status == corev1.ConditionTrue {
				status = "Ready"
			}
		}
	}
	if n.Spec.Unschedulable {
		status += ",SchedulingDisabled"
	}
	ip := ""
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			ip = a.Address
			break
		}
	}
	return []string{status, orNone(n.Status.NodeInfo.KubeletVersion)}, []string{orNone(ip)}
}

func serviceCells(obj runtime.Object) ([]string, []string) {
	s, ok := obj.(*corev1.Service)
	if !ok {
		return Unknown(3), Unknown(1)
	}
	var ports []string
	for _, p := range s.Spec.Ports {
		port := fmt.Sprintf("%d/%s", p.Port, p.Protocol)
		if p.NodePort != 0 {
			port = fmt.Sprintf("%d:%d/%s", p.Port, p.NodePort, p.Protocol)
		}
		ports = append(ports, port)
	}
	var sel []string
	for k, v := range s.Spec.Selector {
		sel = append(sel, k+"="+v)
	}
	sort.Strings(sel)
	return []string{string(s.Spec.Type), orNone(s.Spec.ClusterIP), orNone(strings.Join(ports, ","))},
		[]string{orNone(strings.Join(sel, ","))}
}

func deploymentCells(obj runtime.Object) ([]string, []string) {
	d, ok := obj.(*appsv1.Deployment)
	if !ok {
		return Unknown(3), nil
	}
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	return []string{fmt.Sprintf("%d/%d", d.Status.ReadyReplicas, want), strconv.Itoa(int(d.Status.UpdatedReplicas)),
		strconv.Itoa(int(d.Status.AvailableReplicas))}, nil
}
