package crashtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
)

// Handler serves Sources over HTTP as a Kubernetes API server, for agents
// that build their informers from a rest.Config (a boltinformer.Factory),
// so that a restart test goes through the agent's own wiring: give it to
// an httptest.Server (which listens on 127.0.0.1) and the agent a
// kubeconfig for that server. It serves, in JSON:
//
//   - GET /api/v1/namespaces/kube-system: the namespace, with ClusterUID
//     (a Factory's cluster identity);
//   - LIST of each resource given to Serve, cluster-wide or in one
//     namespace, through Source.ListWithContext (resourceVersion semantics,
//     pagination, 410 and "too large" errors as Statuses), filtered by
//     label selector and by field selector (any field by its JSON path,
//     e.g. spec.nodeName; metadata.namespace for namespaced requests);
//   - metadata-only lists (Accept: ...;as=PartialObjectMetadataList),
//     through Source.ListMetadata (an exact read, below, through
//     Source.GetAt), and metadata-only watches (Accept:
//     ...;as=PartialObjectMetadata), whose events carry each object's
//     metadata, as client-go's metadata client asks;
//   - a LIST with a metadata.name field selector and
//     resourceVersionMatch=Exact, through Source.GetAt (boltinformer's
//     exact reads);
//   - WATCH (watch=true), through Source.WatchWithContext, streaming
//     events as JSON lines, filtered as lists are. An object that stops
//     matching a field selector is not turned into a DELETED event (a
//     kube-apiserver does that): keep the agent's selectors true of every
//     object of the history, or leave them out.
//
// WatchList requests (sendInitialEvents=true) get 400, as from a server
// without the feature; client-go then lists. A Source that is down
// (SetDown) answers 503. Anything else gets 404. Its methods are safe for
// concurrent use.
type Handler struct {
	// ClusterUID is the kube-system namespace's UID. Default
	// "crashtest-cluster".
	ClusterUID string

	// mu guards resources.
	mu        sync.Mutex
	resources map[schema.GroupVersionResource]*Source
}

// NewHandler returns a Handler serving no resource yet.
func NewHandler() *Handler {
	return &Handler{resources: map[schema.GroupVersionResource]*Source{}}
}

// Serve makes the handler serve src as gvr (e.g. the "pods" of group ""
// version "v1").
func (h *Handler) Serve(gvr schema.GroupVersionResource, src *Source) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.resources[gvr] = src
}

var jsonCodec = scheme.Codecs.LegacyCodec(scheme.Scheme.PrioritizedVersionsAllGroups()...)

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		writeStatus(w, apierrors.NewMethodNotSupported(schema.GroupResource{}, r.Method))
		return
	}
	gvr, namespace, name, ok := parsePath(r.URL.Path)
	if !ok {
		writeStatus(w, apierrors.NewNotFound(schema.GroupResource{}, r.URL.Path))
		return
	}
	if gvr.Group == "" && gvr.Resource == "namespaces" && name == "kube-system" {
		uid := h.ClusterUID
		if uid == "" {
			uid = "crashtest-cluster"
		}
		ns := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(uid)}}
		ns.APIVersion, ns.Kind = "v1", "Namespace"
		writeJSON(w, http.StatusOK, ns)
		return
	}
	h.mu.Lock()
	src := h.resources[gvr]
	h.mu.Unlock()
	if src == nil || name != "" {
		writeStatus(w, apierrors.NewNotFound(gvr.GroupResource(), name))
		return
	}
	var opts metav1.ListOptions
	if err := scheme.ParameterCodec.DecodeParameters(r.URL.Query(), schema.GroupVersion{Version: "v1"}, &opts); err != nil {
		writeStatus(w, apierrors.NewBadRequest(err.Error()))
		return
	}
	f, err := newFilter(namespace, &opts)
	if err != nil {
		writeStatus(w, apierrors.NewBadRequest(err.Error()))
		return
	}
	switch {
	case opts.Watch && opts.SendInitialEvents != nil && *opts.SendInitialEvents:
		writeStatus(w, apierrors.NewBadRequest("crashtest: sendInitialEvents is not supported"))
	case opts.Watch:
		h.watch(w, r, src, f, opts)
	case strings.Contains(r.Header.Get("Accept"), "as=PartialObjectMetadataList") && opts.ResourceVersionMatch == metav1.ResourceVersionMatchExact && f.name != "":
		list := &metav1.PartialObjectMetadataList{ListMeta: metav1.ListMeta{ResourceVersion: opts.ResourceVersion}}
		list.APIVersion, list.Kind = "meta.k8s.io/v1", "PartialObjectMetadataList"
		obj, err := src.GetAt(r.Context(), namespace, f.name, opts.ResourceVersion)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			writeStatus(w, err)
			return
		default:
			m, err := asMetadata(obj)
			if err != nil {
				writeStatus(w, err)
				return
			}
			list.Items = []metav1.PartialObjectMetadata{*m}
		}
		writeJSON(w, http.StatusOK, list)
	case strings.Contains(r.Header.Get("Accept"), "as=PartialObjectMetadataList"):
		list, err := src.ListMetadata(r.Context(), opts)
		if err != nil {
			writeStatus(w, err)
			return
		}
		list.Items = filterItems(list.Items, func(m *metav1.PartialObjectMetadata) bool { return f.matches(m) })
		list.APIVersion, list.Kind = "meta.k8s.io/v1", "PartialObjectMetadataList"
		for i := range list.Items {
			list.Items[i].APIVersion, list.Items[i].Kind = "meta.k8s.io/v1", "PartialObjectMetadata"
		}
		writeJSON(w, http.StatusOK, list)
	case opts.ResourceVersionMatch == metav1.ResourceVersionMatchExact && f.name != "":
		list := src.newList()
		obj, err := src.GetAt(r.Context(), namespace, f.name, opts.ResourceVersion)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			writeStatus(w, err)
			return
		default:
			if err := meta.SetList(list, []runtime.Object{obj}); err != nil {
				writeStatus(w, err)
				return
			}
		}
		if lm, err := meta.ListAccessor(list); err == nil {
			lm.SetResourceVersion(opts.ResourceVersion)
		}
		writeObject(w, list)
	default:
		list, err := src.ListWithContext(r.Context(), opts)
		if err != nil {
			writeStatus(w, err)
			return
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			writeStatus(w, err)
			return
		}
		kept := items[:0]
		for _, it := range items {
			if f.matches(it) {
				kept = append(kept, it)
			}
		}
		if err := meta.SetList(list, kept); err != nil {
			writeStatus(w, err)
			return
		}
		writeObject(w, list)
	}
}

// watch streams src's events as JSON lines until the watch or the request
// ends.
func (h *Handler) watch(w http.ResponseWriter, r *http.Request, src *Source, f *filter, opts metav1.ListOptions) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	wi, err := src.WatchWithContext(ctx, opts)
	if err != nil {
		writeStatus(w, err)
		return
	}
	defer wi.Stop()
	metadataOnly := strings.Contains(r.Header.Get("Accept"), "as=PartialObjectMetadata")
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	if flusher != nil {
		flusher.Flush()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-wi.ResultChan():
			if !ok {
				return
			}
			if e.Type != watch.Error && e.Type != watch.Bookmark && !f.matches(e.Object) {
				continue
			}
			raw, err := encodeEvent(e, metadataOnly)
			if err != nil {
				return
			}
			line, err := json.Marshal(&metav1.WatchEvent{Type: string(e.Type), Object: runtime.RawExtension{Raw: raw}})
			if err != nil {
				return
			}
			if _, err := w.Write(append(line, '\n')); err != nil {
				return
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
	}
}

// parsePath splits /api/v1[/namespaces/NS]/RESOURCE[/NAME] and
// /apis/GROUP/VERSION/...; a namespace itself is RESOURCE namespaces.
func parsePath(path string) (gvr schema.GroupVersionResource, namespace, name string, ok bool) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		gvr.Version, parts = parts[1], parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		gvr.Group, gvr.Version, parts = parts[1], parts[2], parts[3:]
	default:
		return gvr, "", "", false
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		namespace, parts = parts[1], parts[2:]
	}
	switch len(parts) {
	case 1:
		gvr.Resource = parts[0]
	case 2:
		gvr.Resource, name = parts[0], parts[1]
	default:
		return gvr, "", "", false
	}
	return gvr, namespace, name, true
}

// filter is what a request selects: a namespace, labels and fields.
type filter struct {
	namespace string
	labels    labels.Selector
	fields    fields.Selector
	name      string // of a metadata.name=NAME field selector
}

func newFilter(namespace string, opts *metav1.ListOptions) (*filter, error) {
	f := &filter{namespace: namespace, labels: labels.Everything(), fields: fields.Everything()}
	var err error
	if opts.LabelSelector != "" {
		if f.labels, err = labels.Parse(opts.LabelSelector); err != nil {
			return nil, err
		}
	}
	if opts.FieldSelector != "" {
		if f.fields, err = fields.ParseSelector(opts.FieldSelector); err != nil {
			return nil, err
		}
		f.name, _ = f.fields.RequiresExactMatch("metadata.name")
	}
	return f, nil
}

// matches reports whether obj is selected.
func (f *filter) matches(obj runtime.Object) bool {
	m, err := meta.Accessor(obj)
	if err != nil {
		return false
	}
	if f.namespace != "" && m.GetNamespace() != f.namespace {
		return false
	}
	if !f.labels.Matches(labels.Set(m.GetLabels())) {
		return false
	}
	if f.fields.Empty() {
		return true
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return false
	}
	set := fields.Set{}
	for _, req := range f.fields.Requirements() {
		v, found, err := unstructuredField(u, req.Field)
		if err != nil {
			return false
		}
		if found {
			set[req.Field] = v
		} else {
			set[req.Field] = ""
		}
	}
	return f.fields.Matches(set)
}

// unstructuredField is the value at a dotted path, as a field selector
// compares it.
func unstructuredField(u map[string]any, path string) (string, bool, error) {
	var cur any = u
	for _, p := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return "", false, nil
		}
		if cur, ok = m[p]; !ok {
			return "", false, nil
		}
	}
	switch v := cur.(type) {
	case string:
		return v, true, nil
	case bool, int64, float64:
		return fmt.Sprint(v), true, nil
	case nil:
		return "", false, nil
	}
	return "", false, fmt.Errorf("field %s is not a scalar", path)
}

func filterItems(items []metav1.PartialObjectMetadata, keep func(*metav1.PartialObjectMetadata) bool) []metav1.PartialObjectMetadata {
	out := items[:0]
	for i := range items {
		if keep(&items[i]) {
			out = append(out, items[i])
		}
	}
	return out
}

func writeObject(w http.ResponseWriter, obj runtime.Object) {
	data, err := runtime.Encode(jsonCodec, obj)
	if err != nil {
		writeStatus(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(data)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		code, data = http.StatusInternalServerError, []byte(`{"kind":"Status","apiVersion":"v1","status":"Failure"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(data)
}

// writeStatus answers err as kube-apiserver does: a Status with its code.
func writeStatus(w http.ResponseWriter, err error) {
	var st apierrors.APIStatus
	switch {
	case errors.As(err, &st):
	case errors.Is(err, ErrOutage):
		st = apierrors.NewServiceUnavailable(err.Error())
	default:
		st = apierrors.NewInternalError(err)
	}
	s := st.Status()
	s.APIVersion, s.Kind = "v1", "Status"
	code := int(s.Code)
	if code == 0 {
		code = http.StatusInternalServerError
	}
	writeJSON(w, code, &s)
}

// encodeEvent is e's object as JSON; its metadata alone for a
// metadata-only watch (but an error's Status).
func encodeEvent(e watch.Event, metadataOnly bool) ([]byte, error) {
	if !metadataOnly || e.Type == watch.Error {
		return runtime.Encode(jsonCodec, e.Object)
	}
	m, err := asMetadata(e.Object)
	if err != nil {
		return nil, err
	}
	return json.Marshal(m)
}

// asMetadata is obj's metadata, as a metadata-only request gets it.
func asMetadata(obj runtime.Object) (*metav1.PartialObjectMetadata, error) {
	a, err := meta.Accessor(obj)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	m := meta.AsPartialObjectMetadata(a)
	m.APIVersion, m.Kind = "meta.k8s.io/v1", "PartialObjectMetadata"
	return m, nil
}
