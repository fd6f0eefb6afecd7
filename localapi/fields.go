package localapi

import (
	"fmt"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes/scheme"
)

// fieldSet are one kind's own selectable fields, as the apiserver defines
// them (every kind has metadata.name and metadata.namespace besides): their
// names, and a function that returns an object's value of one of them.
type fieldSet struct {
	own   []string
	value func(obj runtime.Object, field string) string
}

var kindFields = map[schema.GroupKind]fieldSet{
	{Kind: "Pod"}: {[]string{"spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
		"spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName"}, podField},
	{Kind: "Node"}:                  {[]string{"spec.unschedulable"}, nodeField},
	{Kind: "Secret"}:                {[]string{"type"}, secretField},
	{Kind: "Service"}:               {[]string{"spec.clusterIP", "spec.type"}, serviceField},
	{Kind: "Namespace"}:             {[]string{"status.phase", "name"}, namespaceField},
	{Kind: "PersistentVolume"}:      {[]string{"name"}, nameField},
	{Kind: "PersistentVolumeClaim"}: {[]string{"name"}, nameField},
	{Kind: "ReplicationController"}: {[]string{"status.replicas"}, rcField},
	{Kind: "Event"}: {[]string{"involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
		"involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion", "involvedObject.fieldPath",
		"reason", "reportingComponent", "source", "type"}, eventField},
	{Group: "apps", Kind: "ReplicaSet"}:                               {[]string{"status.replicas"}, rsField},
	{Group: "batch", Kind: "Job"}:                                     {[]string{"status.successful"}, jobField},
	{Group: "certificates.k8s.io", Kind: "CertificateSigningRequest"}: {[]string{"spec.signerName"}, csrField},
}

// selector filters objects of one resource by a label and a field
// selector. It is used by one goroutine (its request's).
type selector struct {
	labels     labels.Selector
	fields     fields.Selector
	value      func(runtime.Object, string) string // the kind's own fields, or nil
	gvk        schema.GroupVersionKind             // the resource's kind
	namespaced bool
	everything bool
	// scratch is the object matches asks the field selector about: one
	// per selector, not one allocation per object.
	scratch objectFields
}

// newSelector checks the field selector's labels against what the kind
// supports: an unknown one is a BadRequest, as in the apiserver.
func newSelector(res *Resource, ls labels.Selector, fs fields.Selector) (*selector, error) {
	s := &selector{labels: ls, fields: fs, namespaced: res.namespaced(), gvk: res.gvk()}
	kf, known := kindFields[schema.GroupKind{Group: res.Group, Kind: res.Kind}]
	allowed := sets.New("metadata.name", "metadata.namespace")
	if known {
		allowed.Insert(kf.own...)
		s.value = kf.value
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
	s.scratch = objectFields{s: s, obj: obj, m: m}
	ok := s.fields.Matches(&s.scratch)
	s.scratch = objectFields{}
	return ok
}

// objectFields are an object's selectable fields, read as a field
// selector asks for them (no map built per object).
type objectFields struct {
	s   *selector
	obj runtime.Object
	m   metav1.Object
	// typed is obj as its built-in type, when obj is unstructured (a
	// dynamic informer's), converted at the first kind-specific field.
	typed runtime.Object
}

func (f *objectFields) Has(field string) bool { return true }

func (f *objectFields) Get(field string) string {
	switch field {
	case "metadata.name":
		return f.m.GetName()
	case "metadata.namespace":
		if f.s.namespaced {
			return f.m.GetNamespace()
		}
		return ""
	}
	if f.s.value != nil {
		return f.s.value(f.typedObject(), field)
	}
	return ""
}

// typedObject is the object as the kind's field functions read it (see
// typedOf), converted once.
func (f *objectFields) typedObject() runtime.Object {
	if f.typed == nil {
		f.typed = typedOf(f.obj, f.s.gvk)
	}
	return f.typed
}

// typedOf is obj as the kind's field and column functions read it: an
// unstructured object (a dynamic informer's) converted to gvk's built-in
// type, as they read typed objects only. Any other object, and one that
// does not convert, is obj itself (its kind-specific fields read empty,
// its cells "?").
func typedOf(obj runtime.Object, gvk schema.GroupVersionKind) runtime.Object {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj
	}
	typed, err := scheme.Scheme.New(gvk)
	if err != nil {
		return obj
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), typed); err != nil {
		return obj
	}
	return typed
}

// singleName returns the name a field selector pins (metadata.name=x), if
// any: a LIST or WATCH of one object.
func (s *selector) singleName() (string, bool) {
	return s.fields.RequiresExactMatch("metadata.name")
}

func podField(obj runtime.Object, field string) string {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return ""
	}
	switch field {
	case "spec.nodeName":
		return p.Spec.NodeName
	case "spec.restartPolicy":
		return string(p.Spec.RestartPolicy)
	case "spec.schedulerName":
		return p.Spec.SchedulerName
	case "spec.serviceAccountName":
		return p.Spec.ServiceAccountName
	case "spec.hostNetwork":
		return strconv.FormatBool(p.Spec.HostNetwork)
	case "status.phase":
		return string(p.Status.Phase)
	case "status.podIP":
		if len(p.Status.PodIPs) > 0 {
			return p.Status.PodIPs[0].IP
		}
		return ""
	case "status.nominatedNodeName":
		return p.Status.NominatedNodeName
	}
	return ""
}

func nodeField(obj runtime.Object, field string) string {
	if n, ok := obj.(*corev1.Node); ok && field == "spec.unschedulable" {
		return strconv.FormatBool(n.Spec.Unschedulable)
	}
	return ""
}

func secretField(obj runtime.Object, field string) string {
	if s, ok := obj.(*corev1.Secret); ok && field == "type" {
		return string(s.Type)
	}
	return ""
}

func serviceField(obj runtime.Object, field string) string {
	s, ok := obj.(*corev1.Service)
	if !ok {
		return ""
	}
	switch field {
	case "spec.clusterIP":
		return s.Spec.ClusterIP
	case "spec.type":
		return string(s.Spec.Type)
	}
	return ""
}

func namespaceField(obj runtime.Object, field string) string {
	n, ok := obj.(*corev1.Namespace)
	if !ok {
		return ""
	}
	switch field {
	case "status.phase":
		return string(n.Status.Phase)
	case "name":
		return n.Name
	}
	return ""
}

// nameField is the legacy "name" field some kinds still select on.
func nameField(obj runtime.Object, field string) string {
	if m, err := meta.Accessor(obj); err == nil && field == "name" {
		return m.GetName()
	}
	return ""
}

func rcField(obj runtime.Object, field string) string {
	if rc, ok := obj.(*corev1.ReplicationController); ok && field == "status.replicas" {
		return strconv.Itoa(int(rc.Status.Replicas))
	}
	return ""
}

func rsField(obj runtime.Object, field string) string {
	if rs, ok := obj.(*appsv1.ReplicaSet); ok && field == "status.replicas" {
		return strconv.Itoa(int(rs.Status.Replicas))
	}
	return ""
}

func jobField(obj runtime.Object, field string) string {
	if j, ok := obj.(*batchv1.Job); ok && field == "status.successful" {
		return strconv.Itoa(int(j.Status.Succeeded))
	}
	return ""
}

func csrField(obj runtime.Object, field string) string {
	if c, ok := obj.(*certificatesv1.CertificateSigningRequest); ok && field == "spec.signerName" {
		return c.Spec.SignerName
	}
	return ""
}

func eventField(obj runtime.Object, field string) string {
	e, ok := obj.(*corev1.Event)
	if !ok {
		return ""
	}
	io := e.InvolvedObject
	switch field {
	case "involvedObject.kind":
		return io.Kind
	case "involvedObject.namespace":
		return io.Namespace
	case "involvedObject.name":
		return io.Name
	case "involvedObject.uid":
		return string(io.UID)
	case "involvedObject.apiVersion":
		return io.APIVersion
	case "involvedObject.resourceVersion":
		return io.ResourceVersion
	case "involvedObject.fieldPath":
		return io.FieldPath
	case "reason":
		return e.Reason
	case "reportingComponent":
		return e.ReportingController
	case "source":
		if e.Source.Component != "" {
			return e.Source.Component
		}
		return e.ReportingController
	case "type":
		return e.Type
	}
	return ""
}
