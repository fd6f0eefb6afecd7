package localapi

import (
	"fmt"
	"reflect"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
)

// Scope says whether a resource's objects live in namespaces.
type Scope int

const (
	// ScopeAuto derives the scope: from the built-in kinds' scopes, else
	// from the objects (any object with a namespace: namespaced; objects
	// and none with a namespace: cluster; no objects: namespaced).
	ScopeAuto Scope = iota
	// ScopeNamespaced: objects live in namespaces.
	ScopeNamespaced
	// ScopeCluster: objects are cluster-wide.
	ScopeCluster
)

// Resource describes how one informer is served. Fields left empty are
// derived from the informer: its Resource (a Factory's informers carry
// their GroupVersionResource) and its objects' kind.
type Resource struct {
	// Informer is the informer's name in the DB (DB.NewInformer's name,
	// the informer's bucket in the file).
	Informer string
	// GroupVersionResource the informer is served as, e.g. v1 pods.
	schema.GroupVersionResource
	// Kind of the objects, e.g. Pod.
	Kind string
	// Scope; ScopeAuto derives it.
	Scope Scope
	// ShortNames and Categories for discovery (kubectl get po, get all);
	// nil takes the built-in resources' own.
	ShortNames, Categories []string
	// Skip leaves the informer out.
	Skip bool
}

// namespaced reports the resolved scope (after resolve).
func (r *Resource) namespaced() bool { return r.Scope != ScopeCluster }

// gvk is the resource's kind.
func (r *Resource) gvk() schema.GroupVersionKind { return r.GroupVersion().WithKind(r.Kind) }

// singular is the resource's singular name, as discovery reports it.
func (r *Resource) singular() string { return strings.ToLower(r.Kind) }

// describe fills in what r leaves empty for an informer that reports
// resource (InformerOptions.Resource: "g/v, Resource=r", a plural name, or
// a Go type "*v1.Pod"), whose example object is example (nil: unknown) and
// which holds objs.
func describe(r Resource, resource string, example runtime.Object, objs []runtime.Object) (Resource, error) {
	var gvk schema.GroupVersionKind
	if example != nil {
		if _, ok := example.(*unstructured.Unstructured); !ok {
			if gvks, _, err := scheme.Scheme.ObjectKinds(example); err == nil && len(gvks) > 0 {
				gvk = gvks[0]
			}
		}
	}
	return describeKind(r, resource, gvk, objs)
}

// describeKind is describe with the objects' kind given (empty: unknown).
func describeKind(r Resource, resource string, gvk schema.GroupVersionKind, objs []runtime.Object) (Resource, error) {
	if gvk.Empty() {
		for _, o := range objs {
			if k := o.GetObjectKind().GroupVersionKind(); k.Kind != "" {
				gvk = k
				break
			}
		}
	}
	var gvr schema.GroupVersionResource
	if gv, name, ok := strings.Cut(resource, ", Resource="); ok {
		g, err := schema.ParseGroupVersion(strings.TrimPrefix(gv, "/"))
		if err == nil {
			gvr = g.WithResource(name)
		}
	} else if resource != "" && !strings.ContainsAny(resource, "*./ ") {
		gvr = gvk.GroupVersion().WithResource(resource)
	}
	if gvr.Resource == "" && gvk.Kind != "" {
		gvr, _ = meta.UnsafeGuessKindToResource(gvk)
	}
	if gvk.Kind == "" && gvr.Resource != "" {
		gvk = kindOfResource(gvr)
	}
	if r.Resource == "" {
		r.GroupVersionResource = gvr
	}
	if r.Version == "" {
		r.Version = gvk.Version
		r.Group = gvk.Group
	}
	if r.Kind == "" {
		r.Kind = gvk.Kind
	}
	if r.Resource == "" || r.Version == "" || r.Kind == "" {
		return r, fmt.Errorf("%w: informer %q (resource %q, kind %q): set it in Options.Resources", ErrNoResource, r.Informer, resource, gvk.Kind)
	}
	if r.Scope == ScopeAuto {
		r.Scope = scopeOf(r.GroupVersionResource.GroupResource(), r.Kind, objs)
	}
	if r.ShortNames == nil {
		r.ShortNames = shortNames[r.GroupVersionResource.GroupResource()]
	}
	if r.Categories == nil && allCategory[r.GroupVersionResource.GroupResource()] {
		r.Categories = []string{"all"}
	}
	return r, nil
}

// kindOfResource finds the kind of a built-in resource in client-go's
// scheme: the one whose guessed plural is the resource.
func kindOfResource(gvr schema.GroupVersionResource) schema.GroupVersionKind {
	var found []schema.GroupVersionKind
	for gvk, t := range scheme.Scheme.AllKnownTypes() {
		if gvk.GroupVersion() != gvr.GroupVersion() || strings.HasSuffix(gvk.Kind, "List") || t.Kind() != reflect.Struct {
			continue
		}
		if plural, _ := meta.UnsafeGuessKindToResource(gvk); plural.Resource == gvr.Resource {
			found = append(found, gvk)
		}
	}
	if len(found) == 0 {
		return schema.GroupVersionKind{}
	}
	sort.Slice(found, func(i, j int) bool { return found[i].Kind < found[j].Kind })
	return found[0]
}

// scopeOf is the scope of a resource: the built-in table, else the objects'.
func scopeOf(gr schema.GroupResource, kind string, objs []runtime.Object) Scope {
	if clusterScoped[schema.GroupKind{Group: gr.Group, Kind: kind}] {
		return ScopeCluster
	}
	if builtinGroups[gr.Group] {
		return ScopeNamespaced
	}
	for _, o := range objs {
		if m, err := meta.Accessor(o); err == nil && m.GetNamespace() != "" {
			return ScopeNamespaced
		}
	}
	if len(objs) > 0 {
		return ScopeCluster
	}
	return ScopeNamespaced
}

// builtinGroups are the API groups of Kubernetes itself, whose cluster-wide
// kinds are all in clusterScoped.
var builtinGroups = map[string]bool{
	"": true, "apps": true, "batch": true, "autoscaling": true, "policy": true,
	"networking.k8s.io": true, "rbac.authorization.k8s.io": true, "storage.k8s.io": true,
	"scheduling.k8s.io": true, "node.k8s.io": true, "coordination.k8s.io": true,
	"discovery.k8s.io": true, "events.k8s.io": true, "certificates.k8s.io": true,
	"admissionregistration.k8s.io": true, "flowcontrol.apiserver.k8s.io": true,
	"resource.k8s.io": true, "apiextensions.k8s.io": true, "apiregistration.k8s.io": true,
	"internal.apiserver.k8s.io": true, "storagemigration.k8s.io": true,
}

// clusterScoped are the built-in kinds whose objects are cluster-wide.
var clusterScoped = map[schema.GroupKind]bool{
	{Kind: "Node"}: true, {Kind: "Namespace"}: true, {Kind: "PersistentVolume"}: true, {Kind: "ComponentStatus"}: true,
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"}:                         true,
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRoleBinding"}:                  true,
	{Group: "storage.k8s.io", Kind: "StorageClass"}:                                   true,
	{Group: "storage.k8s.io", Kind: "VolumeAttachment"}:                               true,
	{Group: "storage.k8s.io", Kind: "CSIDriver"}:                                      true,
	{Group: "storage.k8s.io", Kind: "CSINode"}:                                        true,
	{Group: "storage.k8s.io", Kind: "VolumeAttributesClass"}:                          true,
	{Group: "scheduling.k8s.io", Kind: "PriorityClass"}:                               true,
	{Group: "node.k8s.io", Kind: "RuntimeClass"}:                                      true,
	{Group: "networking.k8s.io", Kind: "IngressClass"}:                                true,
	{Group: "networking.k8s.io", Kind: "IPAddress"}:                                   true,
	{Group: "networking.k8s.io", Kind: "ServiceCIDR"}:                                 true,
	{Group: "certificates.k8s.io", Kind: "CertificateSigningRequest"}:                 true,
	{Group: "certificates.k8s.io", Kind: "ClusterTrustBundle"}:                        true,
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingWebhookConfiguration"}:   true,
	{Group: "admissionregistration.k8s.io", Kind: "MutatingWebhookConfiguration"}:     true,
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicy"}:        true,
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicyBinding"}: true,
	{Group: "admissionregistration.k8s.io", Kind: "MutatingAdmissionPolicy"}:          true,
	{Group: "admissionregistration.k8s.io", Kind: "MutatingAdmissionPolicyBinding"}:   true,
	{Group: "flowcontrol.apiserver.k8s.io", Kind: "FlowSchema"}:                       true,
	{Group: "flowcontrol.apiserver.k8s.io", Kind: "PriorityLevelConfiguration"}:       true,
	{Group: "resource.k8s.io", Kind: "DeviceClass"}:                                   true,
	{Group: "resource.k8s.io", Kind: "ResourceSlice"}:                                 true,
	{Group: "resource.k8s.io", Kind: "DeviceTaintRule"}:                               true,
	{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}:                 true,
	{Group: "apiregistration.k8s.io", Kind: "APIService"}:                             true,
	{Group: "internal.apiserver.k8s.io", Kind: "StorageVersion"}:                      true,
	{Group: "storagemigration.k8s.io", Kind: "StorageVersionMigration"}:               true,
}

// shortNames of the built-in resources (kubectl get po).
var shortNames = map[schema.GroupResource][]string{
	{Resource: "pods"}: {"po"}, {Resource: "services"}: {"svc"}, {Resource: "nodes"}: {"no"},
	{Resource: "namespaces"}: {"ns"}, {Resource: "configmaps"}: {"cm"}, {Resource: "endpoints"}: {"ep"},
	{Resource: "events"}: {"ev"}, {Resource: "persistentvolumeclaims"}: {"pvc"},
	{Resource: "persistentvolumes"}: {"pv"}, {Resource: "serviceaccounts"}: {"sa"},
	{Resource: "replicationcontrollers"}: {"rc"}, {Resource: "limitranges"}: {"limits"},
	{Resource: "resourcequotas"}:             {"quota"},
	{Group: "apps", Resource: "deployments"}: {"deploy"}, {Group: "apps", Resource: "replicasets"}: {"rs"},
	{Group: "apps", Resource: "daemonsets"}: {"ds"}, {Group: "apps", Resource: "statefulsets"}: {"sts"},
	{Group: "batch", Resource: "cronjobs"}:                                 {"cj"},
	{Group: "autoscaling", Resource: "horizontalpodautoscalers"}:           {"hpa"},
	{Group: "policy", Resource: "poddisruptionbudgets"}:                    {"pdb"},
	{Group: "networking.k8s.io", Resource: "ingresses"}:                    {"ing"},
	{Group: "networking.k8s.io", Resource: "networkpolicies"}:              {"netpol"},
	{Group: "storage.k8s.io", Resource: "storageclasses"}:                  {"sc"},
	{Group: "scheduling.k8s.io", Resource: "priorityclasses"}:              {"pc"},
	{Group: "certificates.k8s.io", Resource: "certificatesigningrequests"}: {"csr"},
	{Group: "events.k8s.io", Resource: "events"}:                           {"ev"},
	{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}: {"crd", "crds"},
}

// allCategory are the built-in resources in the "all" category (kubectl get
// all).
var allCategory = map[schema.GroupResource]bool{
	{Resource: "pods"}: true, {Resource: "services"}: true, {Resource: "replicationcontrollers"}: true,
	{Group: "apps", Resource: "deployments"}: true, {Group: "apps", Resource: "replicasets"}: true,
	{Group: "apps", Resource: "daemonsets"}: true, {Group: "apps", Resource: "statefulsets"}: true,
	{Group: "batch", Resource: "jobs"}: true, {Group: "batch", Resource: "cronjobs"}: true,
	{Group: "autoscaling", Resource: "horizontalpodautoscalers"}: true,
}
