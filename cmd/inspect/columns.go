package main

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// kindColumns are the table columns of one kind, between NAME and AGE
// (and, for -o wide, after AGE), in the spirit of kubectl's printers.
type kindColumns struct {
	headers, wide []string
	cells         func(runtime.Object) (cells, wide []string)
}

var columnsByKind = map[schema.GroupKind]kindColumns{
	{Kind: "Pod"}:                       {[]string{"READY", "STATUS", "RESTARTS"}, []string{"IP", "NODE"}, podCells},
	{Kind: "Secret"}:                    {[]string{"TYPE", "DATA"}, nil, secretCells},
	{Kind: "ConfigMap"}:                 {[]string{"DATA"}, nil, configMapCells},
	{Kind: "Node"}:                      {[]string{"STATUS", "VERSION"}, []string{"INTERNAL-IP"}, nodeCells},
	{Kind: "Service"}:                   {[]string{"TYPE", "CLUSTER-IP", "PORT(S)"}, []string{"SELECTOR"}, serviceCells},
	{Group: "apps", Kind: "Deployment"}: {[]string{"READY", "UP-TO-DATE", "AVAILABLE"}, nil, deploymentCells},
}

// objectTable is the table of objects of one informer, whose objects are
// of kind (empty: unknown). Undecoded records show their envelope.
func objectTable(objs []*object, kind schema.GroupVersionKind, withNamespace, wide bool, now time.Time) *table {
	t := &table{}
	if withNamespace {
		t.headers = append(t.headers, "NAMESPACE")
	}
	t.headers = append(t.headers, "NAME")
	decoded := false
	for _, o := range objs {
		decoded = decoded || o.obj != nil
	}
	if !decoded && len(objs) > 0 {
		// Nothing decodes (a type this inspect does not know): envelopes.
		t.headers = append(t.headers, "UID", "RESOURCEVERSION", "CODEC", "BYTES")
		for _, o := range objs {
			ns, name := o.namespaceName()
			row := []string{name, orNone(o.rec.UID), orNone(o.rec.ResourceVersion), codecName(o.rec), strconv.Itoa(len(o.rec.Payload))}
			if withNamespace {
				row = append([]string{orNone(ns)}, row...)
			}
			t.add(row...)
		}
		return t
	}
	cols := columnsByKind[kind.GroupKind()]
	t.headers = append(t.headers, cols.headers...)
	t.headers = append(t.headers, "AGE")
	if wide {
		t.headers = append(t.headers, cols.wide...)
		t.headers = append(t.headers, "RESOURCEVERSION", "CODEC", "BYTES")
	}
	for _, o := range objs {
		ns, name := o.namespaceName()
		cells, wcells := unknownCells(len(cols.headers)), unknownCells(len(cols.wide))
		created := time.Time{}
		if o.obj != nil {
			if cols.cells != nil && o.gvk.GroupKind() == kind.GroupKind() {
				cells, wcells = cols.cells(o.obj)
			}
			if m, err := meta.Accessor(o.obj); err == nil {
				created = m.GetCreationTimestamp().Time
				ns, name = m.GetNamespace(), m.GetName()
			}
		}
		var row []string
		if withNamespace {
			row = append(row, orNone(ns))
		}
		row = append(row, name)
		row = append(row, cells...)
		row = append(row, age(now, created))
		if wide {
			row = append(row, wcells...)
			row = append(row, orNone(o.rec.ResourceVersion), codecName(o.rec), strconv.Itoa(len(o.rec.Payload)))
		}
		t.add(row...)
	}
	return t
}

func unknownCells(n int) []string {
	c := make([]string, n)
	for i := range c {
		c[i] = "?"
	}
	return c
}

func podCells(obj runtime.Object) ([]string, []string) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return unknownCells(3), unknownCells(2)
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
		return unknownCells(2), nil
	}
	return []string{string(s.Type), strconv.Itoa(len(s.Data))}, nil
}

func configMapCells(obj runtime.Object) ([]string, []string) {
	c, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return unknownCells(1), nil
	}
	return []string{strconv.Itoa(len(c.Data) + len(c.BinaryData))}, nil
}

func nodeCells(obj runtime.Object) ([]string, []string) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return unknownCells(2), unknownCells(1)
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
		return unknownCells(3), unknownCells(1)
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
		return unknownCells(3), nil
	}
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	return []string{fmt.Sprintf("%d/%d", d.Status.ReadyReplicas, want), strconv.Itoa(int(d.Status.UpdatedReplicas)),
		strconv.Itoa(int(d.Status.AvailableReplicas))}, nil
}
