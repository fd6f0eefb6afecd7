package boltcr

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/tools/cache"
)

// How an informer's scope is learned without guessing: controller-runtime
// gives NewInformer a ListerWatcher whose List builds the request with the
// informer's namespace and selectors, through the cache's HTTP client.
// NewCache wraps that client's transport (scopeTransport); NewInformer
// calls the List once with a probe in its context, and the transport
// records the request's path and query and answers errProbed without any
// network call. The exact reads of a partial relist go through the same
// List, with the object's name added to the field selector by the
// transport.

type ctxKey int

const (
	probeKey ctxKey = iota // *probeRecord: record the request, send nothing
	exactKey               // exactRead: add the object's name to the field selector
)

// errProbed is what the transport answers a probe.
var errProbed = errors.New("boltcr: scope probe (no request sent)")

// probeRecord receives the requests of one probe.
type probeRecord struct {
	mu       sync.Mutex // guards the fields below
	requests int
	method   string
	path     string
	query    url.Values
}

func (r *probeRecord) record(req *http.Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests++
	r.method = req.Method
	r.path = req.URL.Path
	r.query = req.URL.Query()
}

// exactRead names the one object a List through an informer's
// ListerWatcher is to read (ObjectGetter).
type exactRead struct{ namespace, name string }

// scopeTransport answers probes and rewrites exact reads; every other
// request goes to base unchanged.
type scopeTransport struct{ base http.RoundTripper }

// RoundTrip implements http.RoundTripper.
func (t *scopeTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	if rec, ok := ctx.Value(probeKey).(*probeRecord); ok {
		rec.record(req)
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, errProbed
	}
	if ex, ok := ctx.Value(exactKey).(exactRead); ok {
		req = exactRequest(req, ex)
	}
	return t.base.RoundTrip(req)
}

// WrappedRoundTripper lets client-go see through the wrapper
// (k8s.io/apimachinery/pkg/util/net.RoundTripperWrapper).
func (t *scopeTransport) WrappedRoundTripper() http.RoundTripper { return t.base }

// exactRequest returns a copy of req whose field selector also selects
// the object ex by namespace and name.
func exactRequest(req *http.Request, ex exactRead) *http.Request {
	out := req.Clone(req.Context())
	q := out.URL.Query()
	terms := []string{}
	if fs := q.Get("fieldSelector"); fs != "" {
		terms = append(terms, fs)
	}
	if ex.namespace != "" {
		terms = append(terms, fields.OneTermEqualSelector("metadata.namespace", ex.namespace).String())
	}
	terms = append(terms, fields.OneTermEqualSelector("metadata.name", ex.name).String())
	q.Set("fieldSelector", strings.Join(terms, ","))
	q.Del("limit")
	q.Del("continue")
	out.URL.RawQuery = q.Encode()
	return out
}

// scope is what an informer's ListerWatcher lists, as its request said.
type scope struct {
	namespace string // "" for all namespaces or a cluster-scoped resource
	label     string
	field     string
}

// listOptions returns the scope's selectors as list options.
func (s scope) listOptions() metav1.ListOptions {
	return metav1.ListOptions{LabelSelector: s.label, FieldSelector: s.field}
}

// probeScope calls lw's List once with a probe and returns the scope its
// request had, checked against mapping: the path must be mapping's
// resource, in a namespace only if the resource is namespaced.
func probeScope(ctx context.Context, lw cache.ListerWatcher, mapping *meta.RESTMapping) (scope, error) {
	rec := &probeRecord{}
	_, err := cache.ToListerWatcherWithContext(lw).ListWithContext(context.WithValue(ctx, probeKey, rec), metav1.ListOptions{ResourceVersion: "0", Limit: 1})
	rec.mu.Lock()
	defer rec.mu.Unlock()
	switch {
	case rec.requests == 0 && err != nil:
		return scope{}, fmt.Errorf("the probe List failed before any request reached the cache's transport: %w", err)
	case rec.requests == 0:
		return scope{}, errors.New("the probe List made no request through the cache's transport")
	case rec.requests > 1:
		return scope{}, fmt.Errorf("the probe List made %d requests", rec.requests)
	case rec.method != http.MethodGet:
		return scope{}, fmt.Errorf("the probe List sent %s, not GET", rec.method)
	}
	return parseScope(rec.path, rec.query, mapping)
}

// parseScope returns the scope of a list request for mapping's resource.
// The path may have a prefix (a server URL with a path).
func parseScope(path string, query url.Values, mapping *meta.RESTMapping) (scope, error) {
	gvr := mapping.Resource
	gvPath := "/apis/" + gvr.Group + "/" + gvr.Version
	if gvr.Group == "" {
		gvPath = "/api/" + gvr.Version
	}
	sc := scope{label: query.Get("labelSelector"), field: query.Get("fieldSelector")}
	if query.Get("watch") != "" {
		return scope{}, fmt.Errorf("the probe List sent a watch: %s?%s", path, query.Encode())
	}
	if strings.HasSuffix(path, gvPath+"/"+gvr.Resource) {
		return sc, nil
	}
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		if i := strings.LastIndex(path, gvPath+"/namespaces/"); i >= 0 {
			ns, res, ok := strings.Cut(path[i+len(gvPath+"/namespaces/"):], "/")
			if ok && ns != "" && res == gvr.Resource {
				sc.namespace = ns
				return sc, nil
			}
		}
	}
	return scope{}, fmt.Errorf("the probe List's path %q is not a list of %s", path, gvr)
}
