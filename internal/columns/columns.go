package columns

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/duration"
)

// Set are the columns of one kind, those of kubectl's printers: Headers
// between NAME and AGE, AfterAge after AGE, and, for wide output, Wide
// after those.
type Set struct {
	Headers, AfterAge, Wide []string
	// Cells returns an object's cells for Headers then AfterAge, and for
	// Wide ("?" for each when the object is not of the kind), as of now.
	Cells func(obj runtime.Object, now time.Time) (cells, wide []string)
}

// Split splits cells (for Headers then AfterAge) at AGE.
func (s Set) Split(cells []string) (before, after []string) {
	n := min(len(s.Headers), len(cells))
	return cells[:n], cells[n:]
}

var byKind = map[schema.GroupKind]Set{
	{Kind: "Pod"}: {[]string{"READY", "STATUS", "RESTARTS"}, nil,
		[]string{"IP", "NODE", "NOMINATED NODE", "READINESS GATES"}, podCells},
	{Kind: "Secret"}:    {[]string{"TYPE", "DATA"}, nil, nil, secretCells},
	{Kind: "ConfigMap"}: {[]string{"DATA"}, nil, nil, configMapCells},
	{Kind: "Node"}: {[]string{"STATUS", "ROLES"}, []string{"VERSION"},
		[]string{"INTERNAL-IP", "EXTERNAL-IP", "OS-IMAGE", "KERNEL-VERSION", "CONTAINER-RUNTIME"}, nodeCells},
	{Kind: "Service"}: {[]string{"TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)"}, nil, []string{"SELECTOR"}, serviceCells},
	{Group: "apps", Kind: "Deployment"}: {[]string{"READY", "UP-TO-DATE", "AVAILABLE"}, nil,
		[]string{"CONTAINERS", "IMAGES", "SELECTOR"}, deploymentCells},
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

func podCells(obj runtime.Object, now time.Time) ([]string, []string) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return Unknown(3), Unknown(4)
	}
	ready, status, restarts := podStatus(p, now)
	ip := p.Status.PodIP // an object not from an apiserver may lack PodIPs
	if len(p.Status.PodIPs) > 0 {
		ip = p.Status.PodIPs[0].IP
	}
	gates := "<none>"
	if n := len(p.Spec.ReadinessGates); n > 0 {
		met := 0
		for _, g := range p.Spec.ReadinessGates {
			for _, c := range p.Status.Conditions {
				if c.Type == g.ConditionType && c.Status == corev1.ConditionTrue {
					met++
					break
				}
			}
		}
		gates = fmt.Sprintf("%d/%d", met, n)
	}
	return []string{ready, status, restarts},
		[]string{orNone(ip), orNone(p.Spec.NodeName), orNone(p.Status.NominatedNodeName), gates}
}

func secretCells(obj runtime.Object, _ time.Time) ([]string, []string) {
	s, ok := obj.(*corev1.Secret)
	if !ok {
		return Unknown(2), nil
	}
	return []string{string(s.Type), strconv.Itoa(len(s.Data))}, nil
}

func configMapCells(obj runtime.Object, _ time.Time) ([]string, []string) {
	c, ok := obj.(*corev1.ConfigMap)
	if !ok {
		return Unknown(1), nil
	}
	return []string{strconv.Itoa(len(c.Data) + len(c.BinaryData))}, nil
}

func nodeCells(obj runtime.Object, _ time.Time) ([]string, []string) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return Unknown(3), Unknown(5)
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
	roles := map[string]bool{}
	for k, v := range n.Labels {
		switch {
		case strings.HasPrefix(k, "node-role.kubernetes.io/"):
			if r := strings.TrimPrefix(k, "node-role.kubernetes.io/"); r != "" {
				roles[r] = true
			}
		case k == "kubernetes.io/role" && v != "":
			roles[v] = true
		}
	}
	names := make([]string, 0, len(roles))
	for r := range roles {
		names = append(names, r)
	}
	sort.Strings(names)
	address := func(t corev1.NodeAddressType) string {
		for _, a := range n.Status.Addresses {
			if a.Type == t {
				return a.Address
			}
		}
		return "<none>"
	}
	orUnknown := func(s string) string {
		if s == "" {
			return "<unknown>"
		}
		return s
	}
	info := n.Status.NodeInfo
	return []string{status, orNone(strings.Join(names, ",")), orNone(info.KubeletVersion)},
		[]string{address(corev1.NodeInternalIP), address(corev1.NodeExternalIP), orUnknown(info.OSImage),
			orUnknown(info.KernelVersion), orUnknown(info.ContainerRuntimeVersion)}
}

func serviceCells(obj runtime.Object, _ time.Time) ([]string, []string) {
	s, ok := obj.(*corev1.Service)
	if !ok {
		return Unknown(4), Unknown(1)
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
	return []string{string(s.Spec.Type), orNone(s.Spec.ClusterIP), serviceExternalIP(s), orNone(strings.Join(ports, ","))},
		[]string{orNone(strings.Join(sel, ","))}
}

// serviceExternalIP is kubectl's EXTERNAL-IP of a Service: its external
// IPs, a load balancer's ingress addresses ("<pending>" before it has
// any), an ExternalName's name.
func serviceExternalIP(s *corev1.Service) string {
	switch s.Spec.Type {
	case corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort:
		return orNone(strings.Join(s.Spec.ExternalIPs, ","))
	case corev1.ServiceTypeLoadBalancer:
		var addrs []string
		for _, in := range s.Status.LoadBalancer.Ingress {
			if in.IP != "" {
				addrs = append(addrs, in.IP)
			} else if in.Hostname != "" {
				addrs = append(addrs, in.Hostname)
			}
		}
		if len(addrs) == 0 && len(s.Spec.ExternalIPs) == 0 {
			return "<pending>"
		}
		return strings.Join(append(addrs, s.Spec.ExternalIPs...), ",")
	case corev1.ServiceTypeExternalName:
		return s.Spec.ExternalName
	}
	return "<unknown>"
}

func deploymentCells(obj runtime.Object, _ time.Time) ([]string, []string) {
	d, ok := obj.(*appsv1.Deployment)
	if !ok {
		return Unknown(3), Unknown(3)
	}
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	var names, images []string
	for _, c := range d.Spec.Template.Spec.Containers {
		names = append(names, c.Name)
		images = append(images, c.Image)
	}
	sel := "<invalid>"
	if s, err := metav1.LabelSelectorAsSelector(d.Spec.Selector); err == nil {
		sel = s.String()
	}
	return []string{fmt.Sprintf("%d/%d", d.Status.ReadyReplicas, want), strconv.Itoa(int(d.Status.UpdatedReplicas)),
			strconv.Itoa(int(d.Status.AvailableReplicas))},
		[]string{strings.Join(names, ","), strings.Join(images, ","), sel}
}

// podStatus is a Pod's READY, STATUS and RESTARTS as kube-apiserver prints
// them: sidecars (restartable init containers) count as containers; while
// the init containers run, STATUS is the first unfinished one's
// ("Init:1/3", "Init:CrashLoopBackOff") and RESTARTS counts theirs; then
// the first app container's waiting or terminated reason, a completed Pod
// with a container still running being Running (its Ready condition true)
// or NotReady; Terminating once deleted (Unknown on a lost node); RESTARTS
// with the time since the last restart.
func podStatus(p *corev1.Pod, now time.Time) (ready, status, restarts string) {
	sidecars := map[string]bool{}
	total := len(p.Spec.Containers)
	for _, c := range p.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			sidecars[c.Name] = true
			total++
		}
	}
	status = string(p.Status.Phase)
	if p.Status.Reason != "" {
		status = p.Status.Reason
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonSchedulingGated {
			status = corev1.PodReasonSchedulingGated
		}
	}
	nReady, nRestarts, sidecarRestarts := 0, 0, 0
	var last, sidecarLast time.Time
	lastTermination := func(cs *corev1.ContainerStatus, t *time.Time) {
		if term := cs.LastTerminationState.Terminated; term != nil && term.FinishedAt.After(*t) {
			*t = term.FinishedAt.Time
		}
	}
	initializing := false
	for i := range p.Status.InitContainerStatuses {
		cs := &p.Status.InitContainerStatuses[i]
		nRestarts += int(cs.RestartCount)
		lastTermination(cs, &last)
		sidecar := sidecars[cs.Name]
		if sidecar {
			sidecarRestarts += int(cs.RestartCount)
			lastTermination(cs, &sidecarLast)
		}
		term, wait := cs.State.Terminated, cs.State.Waiting
		if term != nil && term.ExitCode == 0 {
			continue // done
		}
		if sidecar && cs.Started != nil && *cs.Started {
			if cs.Ready {
				nReady++
			}
			continue // a running sidecar
		}
		initializing = true
		switch {
		case term != nil:
			status = "Init:" + exitReason(term)
		case wait != nil && wait.Reason != "" && wait.Reason != "PodInitializing":
			status = "Init:" + wait.Reason
		default:
			status = fmt.Sprintf("Init:%d/%d", i, len(p.Spec.InitContainers))
		}
		break
	}
	if !initializing || podConditionTrue(p, corev1.PodInitialized) {
		nRestarts, last = sidecarRestarts, sidecarLast
		running, failed := false, ""
		// The first container's reason is the one shown: walk backwards.
		for i := len(p.Status.ContainerStatuses) - 1; i >= 0; i-- {
			cs := &p.Status.ContainerStatuses[i]
			nRestarts += int(cs.RestartCount)
			lastTermination(cs, &last)
			switch {
			case cs.State.Waiting != nil && cs.State.Waiting.Reason != "":
				status = cs.State.Waiting.Reason
			case cs.State.Terminated != nil:
				status = exitReason(cs.State.Terminated)
				if cs.State.Terminated.ExitCode != 0 {
					failed = status
				}
			case cs.Ready && cs.State.Running != nil:
				running = true
				nReady++
			}
		}
		if status == "Completed" {
			switch {
			case running && podConditionTrue(p, corev1.PodReady):
				status = "Running"
			case failed != "":
				status = failed
			case running:
				status = "NotReady"
			}
		}
	}
	if p.DeletionTimestamp != nil {
		switch {
		case p.Status.Reason == "NodeLost":
			status = "Unknown"
		case p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed:
			status = "Terminating"
		}
	}
	restarts = strconv.Itoa(nRestarts)
	if nRestarts != 0 && !last.IsZero() {
		restarts = fmt.Sprintf("%d (%s ago)", nRestarts, Age(now, last))
	}
	return fmt.Sprintf("%d/%d", nReady, total), status, restarts
}

// exitReason is a terminated container's reason, else its signal or exit
// code.
func exitReason(t *corev1.ContainerStateTerminated) string {
	switch {
	case t.Reason != "":
		return t.Reason
	case t.Signal != 0:
		return fmt.Sprintf("Signal:%d", t.Signal)
	}
	return fmt.Sprintf("ExitCode:%d", t.ExitCode)
}

// podConditionTrue reports whether p has the condition t, true.
func podConditionTrue(p *corev1.Pod, t corev1.PodConditionType) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
