package localapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
)

// readOnlyVerbs are the verbs every served resource has.
var readOnlyVerbs = metav1.Verbs{"get", "list", "watch"}

// serveDiscovery answers /version, the health checks and the discovery
// documents (the legacy, unaggregated format: clients that ask for the
// aggregated one fall back to it). It reports false for any other path.
func (h *Handler) serveDiscovery(w http.ResponseWriter, r *http.Request, path string) bool {
	path = strings.TrimSuffix(path, "/")
	parts := strings.Split(strings.TrimPrefix(path, "/"), "/")
	var obj any
	switch {
	case path == "/version":
		obj = h.version
	case path == "/healthz" || path == "/livez" || path == "/readyz":
		if !h.isReadOnly(w, r, path) {
			return true
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		_, _ = w.Write([]byte("ok"))
		return true
	case path == "/api":
		// v1 only when a core resource is served: client-go's cached
		// discovery (kubectl's) takes an announced version without
		// resources for a group that failed.
		versions := []string{}
		if len(h.resourceList(schema.GroupVersion{Version: "v1"}).APIResources) > 0 {
			versions = append(versions, "v1")
		}
		obj = &metav1.APIVersions{
			TypeMeta:                   metav1.TypeMeta{Kind: "APIVersions"},
			Versions:                   versions,
			ServerAddressByClientCIDRs: []metav1.ServerAddressByClientCIDR{{ClientCIDR: "0.0.0.0/0", ServerAddress: r.Host}},
		}
	case path == "/apis":
		obj = h.groupList()
	case path == "/api/v1":
		obj = h.resourceList(schema.GroupVersion{Version: "v1"})
	case len(parts) == 2 && parts[0] == "apis":
		g := h.group(parts[1])
		if g == nil {
			h.writeError(w, r, pathNotFound())
			return true
		}
		obj = g
	case len(parts) == 3 && parts[0] == "apis":
		obj = h.resourceList(schema.GroupVersion{Group: parts[1], Version: parts[2]})
	case len(parts) == 1 && (parts[0] == "openapi" || parts[0] == "swagger.json"),
		len(parts) >= 2 && parts[0] == "openapi":
		h.writeError(w, r, &apierrors.StatusError{ErrStatus: metav1.Status{
			Status: metav1.StatusFailure, Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound,
			Message: "the local API serves no OpenAPI documents (kubectl explain and client-side validation need the cluster)",
		}})
		return true
	default:
		return false
	}
	if !h.isReadOnly(w, r, path) {
		return true
	}
	if rl, ok := obj.(*metav1.APIResourceList); ok && len(rl.APIResources) == 0 {
		h.writeError(w, r, pathNotFound())
		return true
	}
	if ro, ok := obj.(runtime.Object); ok {
		var buf bytes.Buffer
		if err := jsonSerializer.Encode(ro, &buf); err != nil {
			h.writeError(w, r, err)
			return true
		}
		writeBody(w, r, formatJSON, buf.Bytes())
		return true
	}
	// /version: indented whatever the request, as kube-apiserver writes
	// it (WriteRawJSON), never gzipped.
	b, err := json.MarshalIndent(obj, "", "  ")
	if err != nil {
		h.writeError(w, r, err)
		return true
	}
	w.Header().Set("Content-Type", mediaJSON)
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(b)
	}
	return true
}

// isReadOnly refuses any method but GET and HEAD with a 405.
func (h *Handler) isReadOnly(w http.ResponseWriter, r *http.Request, path string) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	h.writeError(w, r, apierrors.NewMethodNotSupported(schema.GroupResource{Resource: path}, methodVerb(r.Method, true)))
	return false
}

// groupList is /apis: every group with a served resource, its versions
// in Kubernetes' order (the first preferred).
func (h *Handler) groupList() *metav1.APIGroupList {
	gl := &metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}, Groups: []metav1.APIGroup{}}
	versions := map[string][]string{}
	var groups []string
	for _, sv := range h.resources() {
		g := sv.res.Group
		if g == "" {
			continue
		}
		if _, ok := versions[g]; !ok {
			groups = append(groups, g)
		}
		if !contains(versions[g], sv.res.Version) {
			versions[g] = append(versions[g], sv.res.Version)
		}
	}
	sort.Strings(groups)
	for _, g := range groups {
		gl.Groups = append(gl.Groups, apiGroup(g, versions[g]))
	}
	return gl
}

// group is /apis/{group}, or nil when no resource of it is served.
func (h *Handler) group(name string) *metav1.APIGroup {
	var vs []string
	for _, sv := range h.resources() {
		if sv.res.Group == name && !contains(vs, sv.res.Version) {
			vs = append(vs, sv.res.Version)
		}
	}
	if len(vs) == 0 {
		return nil
	}
	g := apiGroup(name, vs)
	g.TypeMeta = metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}
	return &g
}

func apiGroup(name string, versions []string) metav1.APIGroup {
	// The apiserver's order: the preferred (highest) version first.
	sort.Slice(versions, func(i, j int) bool { return version.CompareKubeAwareVersionStrings(versions[i], versions[j]) > 0 })
	g := metav1.APIGroup{Name: name}
	for _, v := range versions {
		g.Versions = append(g.Versions, metav1.GroupVersionForDiscovery{GroupVersion: name + "/" + v, Version: v})
	}
	g.PreferredVersion = g.Versions[0]
	return g
}

// resourceList is a group version's resources.
func (h *Handler) resourceList(gv schema.GroupVersion) *metav1.APIResourceList {
	rl := &metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: gv.String(), APIResources: []metav1.APIResource{}}
	for _, sv := range h.resources() {
		r := &sv.res
		if r.GroupVersion() != gv {
			continue
		}
		rl.APIResources = append(rl.APIResources, metav1.APIResource{
			Name:         r.Resource,
			SingularName: r.singular(),
			Namespaced:   r.namespaced(),
			Kind:         r.Kind,
			Verbs:        readOnlyVerbs,
			ShortNames:   r.ShortNames,
			Categories:   r.Categories,
		})
	}
	return rl
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
