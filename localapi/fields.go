package localapi

import (
	"fmt"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
)

// fieldSet are one kind's own selectable fields, as the apiserver defines
// them (every kind has metadata.name and metadata.namespace besides): their
// names, and a function that adds an object's values to a set.
type fieldSet struct {
	own    []string
	fields func(obj runtime.Object, set fields.Set)
}

var kindFields = map[schema.GroupKind]fieldSet{
	{Kind: "Pod"}: {[]string{"spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
		"spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName"}, podFields},
	{Kind: "Node"}:                  {[]string{"spec.unschedulable"}, nodeFields},
	{Kind: "Secret"}:                {[]string{"type"}, secretFields},
	{Kind: "Service"}:               {[]string{"spec.clusterIP", "spec.type"}, serviceFields},
	{Kind: "Namespace"}:             {[]string{"status.phase", "name"}, namespaceFields},
	{Kind: "PersistentVolume"}:      {[]string{"name"}, nameField},
	{Kind: "PersistentVolumeClaim"}: {[]string{"name"}, nameField},
	{Kind: "ReplicationController"}: {[]string{"status.replicas"}, rcFields},
	{Kind: "Event"}: {[]string{"involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
		"involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion", "involvedObject.fieldPath",
		"reason", "reportingComponent", "source", "type"}, eventFields},
	{Group: "apps", Kind: "ReplicaSet"}:                               {[]string{"status.replicas"}, rsFields},
	{Group: "batch", Kind: "Job"}:                                     {[]string{"status.successful"}, jobFields},
	{Group: "certificates.k8s.io", Kind: "CertificateSigningRequest"}: {[]string{"spec.signerName"}, csrFields},
}

// selector filters objects of one resource by a label and a field
// selector.
type selector struct {
	labels     labels.Selector
	fields     fields.Selector
	fieldsFunc func(runtime.Object, fields.Set)
	namespaced bool
	everything bool
}

// newSelector checks the field selector's labels against what the kind
// supports: an unknown one is a BadRequest, as in the apiserver.
func newSelector(res *Resource, ls labels.Selector, fs fields.Selector) (*selector, error) {
	s := &selector{labels: ls, fields: fs, namespaced: res.namespaced()}
	kf, known := kindFields[schema.GroupKind{Group: res.Group, Kind: res.Kind}]
	allowed := sets.New("metadata.name", "metadata.namespace")
	if known {
		allowed.Insert(kf.own...)
		s.fieldsFunc = kf.fields
	}
	for _, r := range fs.Requirements() {
		if !allowed.Has(r.Field) {
			return nil, badRequest(fmt.Sprintf("field label not supported: %s", r.Field))
		}
	}
	s.everything = ls.Empty() && fs.Empty()
	return s, nil
}

// matches reports whether obj is selected.
func (s *selector) matches(obj runtime.Object) bool {
	if s.everything {
		return true
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return false
	}
	if !s.labels.Empty() && !s.labels.Matches(labels.Set(m.GetLabels())) {
		return false
	}
	if s.fields.Empty() {
		return true
	}
	set := fields.Set{"metadata.name": m.GetName()}
	if s.namespaced {
		set["metadata.namespace"] = m.GetNamespace()
	}
	if s.fieldsFunc != nil {
		s.fieldsFunc(obj, set)
	}
	return s.fields.Matches(set)
}

// singleName returns the name a field selector pins (metadata.name=x), if
// any: a LIST or WATCH of one object.
func (s *selector) singleName() (string, bool) {
	return s.fields.RequiresExactMatch("metadata.name")
}

func podFields(obj runtime.Object, set fields.Set) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	set["spec.nodeName"] = p.Spec.NodeName
	set["spec.restartPolicy"] = string(p.Spec.RestartPolicy)
	set["spec.schedulerName"] = p.Spec.SchedulerName
	set["spec.serviceAccountName"] = p.Spec.ServiceAccountName
	set["spec.hostNetwork"] = strconv.FormatBool(p.Spec.HostNetwork)
	set["status.phase"] = string(p.Status.Phase)
	ip := ""
	if len(p.Status.PodIPs) > 0 {
		ip = p.Status.PodIPs[0].IP
	}
	set["status.podIP"] = ip
	set["status.nominatedNodeName"] = p.Status.NominatedNodeName
}

func nodeFields(obj runtime.Object, set fields.Set) {
	if n, ok := obj.(*corev1.Node); ok {
		set["spec.unschedulable"] = strconv.FormatBool(n.Spec.Unschedulable)
	}
}

func secretFields(obj runtime.Object, set fields.Set) {
	if s, ok := obj.(*corev1.Secret); ok {
		set["type"] = string(s.Type)
	}
}

func serviceFields(obj runtime.Object, set fields.Set) {
	if s, ok := obj.(*corev1.Service); ok {
		set["spec.clusterIP"] = s.Spec.ClusterIP
		set["spec.type"] = string(s.Spec.Type)
	}
}

func namespaceFields(obj runtime.Object, set fields.Set) {
	if n, ok := obj.(*corev1.Namespace); ok {
		set["status.phase"] = string(n.Status.Phase)
		set["name"] = n.Name
	}
}

// nameField is the legacy "name" field some kinds still select on.
func nameField(obj runtime.Object, set fields.Set) {
	if m, err := meta.Accessor(obj); err == nil {
		set["name"] = m.GetName()
	}
}

func rcFields(obj runtime.Object, set fields.Set) {
	if rc, ok := obj.(*corev1.ReplicationController); ok {
		set["status.replicas"] = strconv.Itoa(int(rc.Status.Replicas))
	}
}

func rsFields(obj runtime.Object, set fields.Set) {
	if rs, ok := obj.(*appsv1.ReplicaSet); ok {
		set["status.replicas"] = strconv.Itoa(int(rs.Status.Replicas))
	}
}

func jobFields(obj runtime.Object, set fields.Set) {
	if j, ok := obj.(*batchv1.Job); ok {
		set["status.successful"] = strconv.Itoa(int(j.Status.Succeeded))
	}
}

func csrFields(obj runtime.Object, set fields.Set) {
	if c, ok := obj.(*certificatesv1.CertificateSigningRequest); ok {
		set["spec.signerName"] = c.Spec.SignerName
	}
}

func eventFields(obj runtime.Object, set fields.Set) {
	e, ok := obj.(*corev1.Event)
	if !ok {
		return
	}
	source := e.Source.Component
	if source == "" {
		source = e.ReportingController
	}
	io := e.InvolvedObject
	set["involvedObject.kind"] = io.Kind
	set["involvedObject.namespace"] = io.Namespace
	set["involvedObject.name"] = io.Name
	set["involvedObject.uid"] = string(io.UID)
	set["involvedObject.apiVersion"] = io.APIVersion
	set["involvedObject.resourceVersion"] = io.ResourceVersion
	set["involvedObject.fieldPath"] = io.FieldPath
	set["reason"] = e.Reason
	set["reportingComponent"] = e.ReportingController
	set["source"] = source
	set["type"] = e.Type
}
