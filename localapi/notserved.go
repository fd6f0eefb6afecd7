package localapi

import (
	"fmt"
	"net/http"
	"reflect"
	"sort"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/kubernetes/scheme"
)

// What the local API says about what it does not serve, so that a client
// reads a reason instead of kubectl's "the server doesn't have a resource
// type" or "the server could not find the requested resource".
//
// Discovery lists, besides the served resources, the refused ones
// (Secrets without Options.Secrets) and Kubernetes' built-in resources
// that no informer serves, all without verbs: kubectl api-resources (and
// every client that looks for the verbs it needs) leaves them out, while
// kubectl get maps their names and asks, and gets the reason.

// builtinResource is a built-in resource of Kubernetes, as discovery
// describes it.
type builtinResource struct {
	gvr        schema.GroupVersionResource
	kind       string
	namespaced bool
	shortNames []string
}

// notResources are kinds of client-go's scheme with object metadata that
// kube-apiserver serves as no resource of their own (subresources' bodies
// and internal kinds).
var notResources = map[schema.GroupKind]bool{
	{Group: "policy", Kind: "Eviction"}: true, {Group: "autoscaling", Kind: "Scale"}: true,
	{Group: "apps", Kind: "Scale"}: true, {Kind: "PodStatusResult"}: true, {Kind: "RangeAllocation"}: true,
	{Kind: "SerializedReference"}: true, {Group: "authentication.k8s.io", Kind: "TokenRequest"}: true,
	{Kind: "Binding"}: true,
}

// builtinResources are Kubernetes' built-in resources as kube-apiserver
// serves them by default: each kind with object metadata of client-go's
// scheme, at the highest generally available version (v1, v2) of its
// group that has it (beta and alpha versions are off by default), named
// as discovery names it. Built once.
var builtinResources = sync.OnceValue(func() []builtinResource {
	objectMeta := reflect.TypeOf(metav1.ObjectMeta{})
	best := map[schema.GroupKind]schema.GroupVersionKind{}
	for gvk, t := range scheme.Scheme.AllKnownTypes() {
		v := gvk.Version
		if len(v) < 2 || v[0] != 'v' || strings.ContainsAny(v, "ab") || !builtinGroups[gvk.Group] {
			continue // alpha, beta, internal, or not Kubernetes' own
		}
		if strings.HasSuffix(gvk.Kind, "List") || notResources[gvk.GroupKind()] || t.Kind() != reflect.Struct {
			continue
		}
		if f, ok := t.FieldByName("ObjectMeta"); !ok || f.Type != objectMeta {
			continue
		}
		if old, ok := best[gvk.GroupKind()]; !ok || version.CompareKubeAwareVersionStrings(v, old.Version) > 0 {
			best[gvk.GroupKind()] = gvk
		}
	}
	var out []builtinResource
	for gk, gvk := range best {
		gvr, _ := meta.UnsafeGuessKindToResource(gvk)
		out = append(out, builtinResource{gvr: gvr, kind: gvk.Kind, namespaced: !clusterScoped[gk], shortNames: shortNames[gvr.GroupResource()]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].gvr.String() < out[j].gvr.String() })
	return out
})

// builtinOf returns the built-in resource of gvr, if any.
func builtinOf(gvr schema.GroupVersionResource) (builtinResource, bool) {
	for _, b := range builtinResources() {
		if b.gvr == gvr {
			return b, true
		}
	}
	return builtinResource{}, false
}

// unservedResources returns, for discovery of gv, the built-in resources
// that no served or refused resource has (in any version), without verbs.
func (h *Handler) unservedResources(gv schema.GroupVersion, have map[schema.GroupResource]bool) []metav1.APIResource {
	var out []metav1.APIResource
	for _, b := range builtinResources() {
		if b.gvr.GroupVersion() != gv || have[b.gvr.GroupResource()] {
			continue
		}
		out = append(out, metav1.APIResource{
			Name: b.gvr.Resource, SingularName: strings.ToLower(b.kind), Namespaced: b.namespaced,
			Kind: b.kind, Verbs: metav1.Verbs{}, ShortNames: b.shortNames,
		})
	}
	return out
}

// servedNames are the served resources' names, as kubectl takes them
// ("pods", "deployments.apps"), for messages.
func (h *Handler) servedNames() string {
	var names []string
	for _, sv := range h.resources() {
		names = append(names, sv.res.GroupVersionResource.GroupResource().String())
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// notServed is the answer to a request of a resource no informer serves:
// for a built-in resource, a 404 that says what is served; for the GET of
// a namespace while namespaces are not served, a 403 (kubectl asks for the
// namespace after a 404 of an object in it, and would print a 404 of it
// instead of the object's own); for anything else kube-apiserver's 404.
func (h *Handler) notServed(req *request) error {
	gvr := req.gv.WithResource(req.resource)
	b, ok := builtinOf(gvr)
	if !ok {
		return pathNotFound()
	}
	gr := gvr.GroupResource()
	if gr == (schema.GroupResource{Resource: "namespaces"}) && req.name != "" && req.subresource == "" {
		return apierrors.NewForbidden(gr, req.name, fmt.Errorf("the local API serves no namespaces (this agent caches none): it cannot tell whether namespace %q exists; it serves %s", req.name, h.servedNames()))
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound,
		Message: fmt.Sprintf("the local API does not serve %s: it serves only what this agent caches (%s); ask the cluster's API server", gr, h.servedNames()),
		Details: &metav1.StatusDetails{Group: b.gvr.Group, Kind: b.gvr.Resource, Name: req.name},
	}}
}

// subresourceNotServed is the 404 of a subresource other than status
// (log, exec, scale...).
func (h *Handler) subresourceNotServed(gr schema.GroupResource, req *request) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound,
		Message: fmt.Sprintf("the local API does not serve %s/%s: it serves get, list and watch of the objects this agent caches (and their status); ask the cluster's API server", gr, req.subresource),
		Details: &metav1.StatusDetails{Group: gr.Group, Kind: gr.Resource, Name: req.name},
	}}
}

// openAPIRefused is what /openapi/... and /swagger.json answer. kubectl
// reads these through client-go's raw path, which keeps a server's text
// only from a text/plain 403 (a JSON Status or a 404 becomes "the server
// could not find the requested resource").
const openAPIRefused = "the local API serves no OpenAPI documents: it is a read-only cache of the objects this agent watches; " +
	"kubectl explain, apply, create, replace and edit need the cluster's API server"

// writeOpenAPIRefused answers an OpenAPI request (see openAPIRefused).
func writeOpenAPIRefused(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusForbidden)
	_, _ = w.Write([]byte(openAPIRefused + "\n"))
}

// readOnly is the 405 of a write: kube-apiserver's message, and why.
func readOnly(gr schema.GroupResource, verb string) error {
	err := apierrors.NewMethodNotSupported(gr, verb)
	err.ErrStatus.Message += ": the local API is read-only; write through the cluster's API server"
	return err
}
