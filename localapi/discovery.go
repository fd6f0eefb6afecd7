package localapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"sort"
	"strings"

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
		writeOpenAPIRefused(w)
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
	h.writeError(w, r, readOnly(schema.GroupResource{Resource: path}, methodVerb(r.Method, true)))
	return false
}

// discoveryEntry is one resource in discovery, with its group version.
type discoveryEntry struct {
	gv  schema.GroupVersion
	res metav1.APIResource
}

// discoveryEntries are every resource discovery lists: the served ones
// (get, list, watch), then without verbs the refused ones (Secrets
// without Options.Secrets) and the built-in resources no informer serves
// (see notserved.go), sorted by group, version and resource.
func (h *Handler) discoveryEntries() []discoveryEntry {
	h.refresh()
	h.mu.Lock()
	svs := make([]*served, 0, len(h.byGVR))
	for _, sv := range h.byGVR {
		svs = append(svs, sv)
	}
	h.mu.Unlock()
	var out []discoveryEntry
	have := map[schema.GroupResource]bool{}
	for _, sv := range svs {
		r := &sv.res
		verbs := readOnlyVerbs
		if sv.refusedWhy() != "" {
			verbs = metav1.Verbs{}
		}
		have[r.GroupVersionResource.GroupResource()] = true
		out = append(out, discoveryEntry{gv: r.GroupVersion(), res: metav1.APIResource{
			Name:         r.Resource,
			SingularName: r.singular(),
			Namespaced:   r.namespaced(),
			Kind:         r.Kind,
			Verbs:        verbs,
			ShortNames:   r.ShortNames,
			Categories:   r.Categories,
		}})
	}
	gvs := map[schema.GroupVersion]bool{}
	for _, b := range builtinResources() {
		gvs[b.gvr.GroupVersion()] = true
	}
	for gv := range gvs {
		for _, r := range h.unservedResources(gv, have) {
			out = append(out, discoveryEntry{gv: gv, res: r})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.gv.Group != b.gv.Group {
			return a.gv.Group < b.gv.Group
		}
		if a.gv.Version != b.gv.Version {
			return a.gv.Version < b.gv.Version
		}
		return a.res.Name < b.res.Name
	})
	return out
}

// groupList is /apis: every group with a resource in discovery, its
// versions in Kubernetes' order (the first preferred).
func (h *Handler) groupList() *metav1.APIGroupList {
	gl := &metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}, Groups: []metav1.APIGroup{}}
	versions := map[string][]string{}
	var groups []string
	for _, e := range h.discoveryEntries() {
		g := e.gv.Group
		if g == "" {
			continue
		}
		if _, ok := versions[g]; !ok {
			groups = append(groups, g)
		}
		if !contains(versions[g], e.gv.Version) {
			versions[g] = append(versions[g], e.gv.Version)
		}
	}
	sort.Strings(groups)
	for _, g := range groups {
		gl.Groups = append(gl.Groups, apiGroup(g, versions[g]))
	}
	return gl
}

// group is /apis/{group}, or nil when no resource of it is in discovery.
func (h *Handler) group(name string) *metav1.APIGroup {
	var vs []string
	for _, e := range h.discoveryEntries() {
		if e.gv.Group == name && !contains(vs, e.gv.Version) {
			vs = append(vs, e.gv.Version)
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
	for _, e := range h.discoveryEntries() {
		if e.gv == gv {
			rl.APIResources = append(rl.APIResources, e.res)
		}
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
