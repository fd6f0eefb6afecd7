package boltcr

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
)

func mapping(group, version, resource string, namespaced bool) *meta.RESTMapping {
	sc := meta.RESTScopeRoot
	if namespaced {
		sc = meta.RESTScopeNamespace
	}
	return &meta.RESTMapping{Resource: schema.GroupVersionResource{Group: group, Version: version, Resource: resource}, Scope: sc}
}

func TestParseScope(t *testing.T) {
	cms := mapping("", "v1", "configmaps", true)
	deps := mapping("apps", "v1", "deployments", true)
	nodes := mapping("", "v1", "nodes", false)
	nss := mapping("", "v1", "namespaces", false)
	odd := mapping("namespaces", "v1", "widgets", false) // a group named "namespaces"
	for _, tc := range []struct {
		name    string
		path    string
		query   string
		m       *meta.RESTMapping
		want    scope
		wantErr string
	}{
		{name: "all namespaces", path: "/api/v1/configmaps", m: cms, want: scope{}},
		{name: "one namespace", path: "/api/v1/namespaces/ns1/configmaps", query: "labelSelector=a%3Db&limit=1&resourceVersion=0", m: cms, want: scope{namespace: "ns1", label: "a=b"}},
		{name: "group", path: "/apis/apps/v1/namespaces/x/deployments", query: "fieldSelector=metadata.namespace%21%3Dy", m: deps, want: scope{namespace: "x", field: "metadata.namespace!=y"}},
		{name: "server path prefix", path: "/k8s/clusters/c1/api/v1/namespaces/ns1/configmaps", m: cms, want: scope{namespace: "ns1"}},
		{name: "cluster-scoped", path: "/api/v1/nodes", m: nodes, want: scope{}},
		{name: "namespaces", path: "/api/v1/namespaces", m: nss, want: scope{}},
		{name: "group named namespaces", path: "/apis/namespaces/v1/widgets", m: odd, want: scope{}},
		{name: "cluster-scoped in a namespace", path: "/api/v1/namespaces/ns1/nodes", m: nodes, wantErr: "not a list of"},
		{name: "another resource", path: "/api/v1/namespaces/ns1/secrets", m: cms, wantErr: "not a list of"},
		{name: "another version", path: "/apis/apps/v1beta1/namespaces/x/deployments", m: deps, wantErr: "not a list of"},
		{name: "subresource", path: "/api/v1/namespaces/ns1/configmaps/x", m: cms, wantErr: "not a list of"},
		{name: "a watch", path: "/api/v1/configmaps", query: "watch=true", m: cms, wantErr: "watch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, err := url.ParseQuery(tc.query)
			if err != nil {
				t.Fatal(err)
			}
			got, err := parseScope(tc.path, q, tc.m)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("parseScope: %+v, %v; want an error with %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("parseScope: %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

// failTransport fails the test if a request reaches it.
type failTransport struct{ t *testing.T }

func (f failTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	f.t.Errorf("a request reached the network: %s", req.URL)
	return nil, errors.New("no network")
}

// recordTransport records the last request.
type recordTransport struct{ last *http.Request }

func (r *recordTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r.last = req
	return nil, errors.New("recorded")
}

func TestProbeSendsNothing(t *testing.T) {
	hc := &http.Client{Transport: &scopeTransport{base: failTransport{t}}}
	lw := &cache.ListWatch{ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://127.0.0.1:1/api/v1/namespaces/ns1/configmaps?labelSelector=app%3Dx&limit=1", nil)
		if err != nil {
			return nil, err
		}
		resp, err := hc.Do(req)
		if err == nil {
			_ = resp.Body.Close()
		}
		return nil, err
	}}
	sc, err := probeScope(t.Context(), lw, mapping("", "v1", "configmaps", true))
	if err != nil || sc != (scope{namespace: "ns1", label: "app=x"}) {
		t.Fatalf("probeScope: %+v, %v", sc, err)
	}
	// A ListerWatcher that does not go through the transport: no scope.
	direct := &cache.ListWatch{ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
		return &metav1.List{}, nil
	}}
	if sc, err := probeScope(t.Context(), direct, mapping("", "v1", "configmaps", true)); err == nil {
		t.Fatalf("probeScope of a ListerWatcher that sends nothing: %+v, want an error", sc)
	}
}

func TestExactRequest(t *testing.T) {
	rec := &recordTransport{}
	hc := &http.Client{Transport: &scopeTransport{base: rec}}
	ctx := context.WithValue(t.Context(), exactKey, exactRead{namespace: "ns1", name: "cm-1"})
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://127.0.0.1:1/api/v1/configmaps?fieldSelector=metadata.namespace%21%3Dkube-system&limit=500&resourceVersion=42&resourceVersionMatch=Exact", nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := hc.Do(req); err == nil {
		_ = resp.Body.Close()
	}
	if rec.last == nil {
		t.Fatal("the exact read did not reach the transport")
	}
	q := rec.last.URL.Query()
	if got, want := q.Get("fieldSelector"), "metadata.namespace!=kube-system,metadata.namespace=ns1,metadata.name=cm-1"; got != want {
		t.Errorf("fieldSelector %q, want %q", got, want)
	}
	if q.Has("limit") || q.Get("resourceVersion") != "42" || q.Get("resourceVersionMatch") != "Exact" {
		t.Errorf("query %v: want no limit, resourceVersion 42, Exact", q)
	}
	if req.URL.Query().Get("fieldSelector") != "metadata.namespace!=kube-system" {
		t.Errorf("the caller's request was changed: %s", req.URL)
	}
}

func TestInformerName(t *testing.T) {
	cms := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	deps := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	names := map[string]bool{}
	for _, tc := range []struct {
		kind objectKind
		gvr  schema.GroupVersionResource
		sc   scope
		want string
	}{
		{kindTyped, cms, scope{}, "controller-runtime/typed/core/v1/configmaps/_all"},
		{kindTyped, cms, scope{namespace: "a"}, "controller-runtime/typed/core/v1/configmaps/a"},
		{kindTyped, cms, scope{namespace: "b"}, "controller-runtime/typed/core/v1/configmaps/b"},
		{kindMetadata, cms, scope{namespace: "a"}, "controller-runtime/metadata/core/v1/configmaps/a"},
		{kindUnstructured, deps, scope{}, "controller-runtime/unstructured/apps/v1/deployments/_all"},
		{kindTyped, cms, scope{field: "metadata.namespace!=a,metadata.namespace!=b"}, ""},
		{kindTyped, cms, scope{label: "app=x"}, ""},
		{kindTyped, cms, scope{label: "app=y"}, ""},
		{kindTyped, cms, scope{namespace: "a", label: "app=x"}, ""},
	} {
		got := informerName(tc.kind, tc.gvr, tc.sc)
		if tc.want != "" && got != tc.want {
			t.Errorf("informerName(%s, %s, %+v) = %q, want %q", tc.kind, tc.gvr, tc.sc, got, tc.want)
		}
		if names[got] {
			t.Errorf("informerName(%s, %s, %+v) = %q, which another scope has", tc.kind, tc.gvr, tc.sc, got)
		}
		names[got] = true
	}
}
