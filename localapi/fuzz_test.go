package localapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"
)

// FuzzParsePath: any path parses or is refused, never panics; what parses
// names a resource.
func FuzzParsePath(f *testing.F) {
	for _, s := range []string{"/api/v1/pods", "/api/v1/namespaces/ns/pods/p/status", "/apis/apps/v1/watch/namespaces/a/deployments/b",
		"/api/v1/namespaces/x", "/api/v1/namespaces/x/finalize", "/api//v1", "/apis/g/v/", "/api/v1/watch", "//", "/api/v1/a/b/c/d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, path string) {
		r, ok := parsePath(path)
		if ok && r.resource == "" {
			t.Fatalf("%q parsed without a resource: %+v", path, r)
		}
	})
}

// FuzzListOptions: any query is parsed or is a BadRequest (or Invalid, for
// options that do not go together), never a panic.
func FuzzListOptions(f *testing.F) {
	for _, s := range []string{"labelSelector=a%3Db,c+in+(d,e),!f", "fieldSelector=spec.nodeName%3Dn,metadata.name!%3Dx",
		"limit=10&continue=abc", "watch=1&resourceVersion=5&allowWatchBookmarks=true", "sendInitialEvents=true&resourceVersionMatch=NotOlderThan",
		"limit=-1", "timeoutSeconds=x", "labelSelector=a+in+(", "includeObject=Object", "fieldSelector=a%5C%3Db%3Dc"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, query string) {
		q, err := url.ParseQuery(query)
		if err != nil {
			return
		}
		o, err := parseListOptions(q)
		if err != nil {
			if s := toStatus(err); s.Code != http.StatusBadRequest && s.Code != http.StatusUnprocessableEntity {
				t.Fatalf("%q: %v is neither a BadRequest nor Invalid", query, err)
			}
			return
		}
		res := Resource{GroupVersionResource: schema.GroupVersionResource{Version: "v1", Resource: "pods"}, Kind: "Pod"}
		sel, err := newSelector(&res, o.labels, o.fields)
		if err != nil {
			return
		}
		sel.matches(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "n", Labels: map[string]string{"a": "b"}}})
		sel.singleName()
	})
}

// FuzzContinue: any token decodes or is a BadRequest; a decoded token
// encodes back to one that decodes the same.
func FuzzContinue(f *testing.F) {
	f.Add(encodeContinue("5", "ns/name"))
	f.Add(encodeContinue("123456789", ""))
	f.Add("eyJ2IjoibG9jYWxhcGkvdjEiLCJydiI6IjEifQ")
	f.Add("not base64!")
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := decodeContinue(s)
		if err != nil {
			if st := toStatus(err); st.Code != http.StatusBadRequest {
				t.Fatalf("%q: %v is not a BadRequest", s, err)
			}
			return
		}
		again, err := decodeContinue(encodeContinue(tok.ResourceVersion, tok.Start))
		if err != nil || again != tok {
			t.Fatalf("%q: %+v re-encoded as %+v, %v", s, tok, again, err)
		}
	})
}

// FuzzHandler sends any method, path, query and Accept header to a
// handler over a few Pods and a CRD: the answer is never a panic (a 500).
func FuzzHandler(f *testing.F) {
	for _, s := range [][4]string{
		{"GET", "/api/v1/namespaces/ns-1/pods", "limit=1", "application/json;as=Table;v=v1;g=meta.k8s.io"},
		{"GET", "/api/v1/pods", "watch=1&resourceVersion=3&labelSelector=a", "application/vnd.kubernetes.protobuf;stream=watch"},
		{"GET", "/apis/example.com/v1/widgets", "fieldSelector=metadata.name%3Dw", "application/yaml"},
		{"GET", "/api/v1/pods", "continue=" + encodeContinue("2", "ns-0/p"), "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"},
		{"POST", "/api/v1/namespaces/ns-1/pods", "", ""},
		{"GET", "/apis", "", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"},
		{"GET", "/api/v1/watch/namespaces/ns-0/pods/p-0", "sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan", ""},
		{"HEAD", "/version", "", ""},
	} {
		f.Add(s[0], s[1], s[2], s[3])
	}
	logger := klog.Background().V(10)
	var objs []runtime.Object
	for i := range 4 {
		objs = append(objs, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p-" + string(rune('0'+i)), Namespace: "ns-" + string(rune('0'+i%2)),
			ResourceVersion: string(rune('1' + i)), Labels: map[string]string{"a": "b"}}})
	}
	w := &unstructured.Unstructured{}
	w.SetAPIVersion("example.com/v1")
	w.SetKind("Widget")
	w.SetName("w")
	w.SetResourceVersion("7")
	h, err := NewStatic([]Snapshot{
		{Informer: "v1/pods", Resource: "/v1, Resource=pods", Objects: objs, ResourceVersion: "5"},
		{Informer: "widgets", Resource: "example.com/v1, Resource=widgets", Objects: []runtime.Object{w}, ResourceVersion: "7"},
	}, &Options{Logger: &logger, WaitForResourceVersion: 1})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = h.Close() })
	f.Fuzz(func(t *testing.T, method, path, query, accept string) {
		if !validMethod(method) {
			return
		}
		u := &url.URL{Path: path, RawQuery: query}
		req, err := http.NewRequest(method, "http://localapi"+u.String(), nil)
		if err != nil {
			return
		}
		req.Header.Set("Accept", accept)
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // a watch sends what it has and ends
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req.WithContext(ctx))
		if rec.Code == http.StatusInternalServerError {
			t.Fatalf("%s %s?%s (%s): %d %s", method, path, query, accept, rec.Code, rec.Body.String())
		}
	})
}

func validMethod(m string) bool {
	return m != "" && !strings.ContainsAny(m, " \t\r\n()<>@,;:\\\"/[]?={}") && len(m) < 20
}
