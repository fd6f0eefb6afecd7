package localapi_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/boltinformer/boltinformer/localapi"
)

// TestRegressionWatchTimeoutSecondsZero: timeoutSeconds=0 is no timeout
// given, as in the apiserver (its default of 30 to 60 minutes); the local
// API ended such a watch at once, after its initial events.
func TestRegressionWatchTimeoutSecondsZero(t *testing.T) {
	a := startAgent(t, "", newPodSource(3))
	_, _, rc := serveAgent(t, a, nil)
	l, err := listPods(t, rc, "", metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := rc.Get().Resource("pods").Param("watch", "true").Param("resourceVersion", l.ResourceVersion).
		Param("timeoutSeconds", "0").Watch(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	changePods(t, a.src, 0, 1)
	a.caughtUp(t)
	if e := next(t, w, 1)[0]; e.Type == watch.Error {
		t.Fatalf("watch with timeoutSeconds=0: %v", e.Object)
	}
}

// TestRegressionGetInvalidNameIsBadRequest: a GET of a name that is no
// valid path segment ("..", ".", one with "%") is the apiserver's 400
// "Name parameter invalid", not 404 NotFound.
func TestRegressionGetInvalidNameIsBadRequest(t *testing.T) {
	a := startAgent(t, "", newPodSource(3))
	_, cfg, _ := serveAgent(t, a, nil)
	for _, name := range []string{"%2e%2e", ".", "a%25b"} {
		resp, err := httpClient(t, cfg).Get(cfg.Host + "/api/v1/namespaces/ns-1/pods/" + name)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var st metav1.Status
		if err := json.Unmarshal(b, &st); err != nil || resp.StatusCode != http.StatusBadRequest ||
			st.Reason != metav1.StatusReasonBadRequest || !strings.HasPrefix(st.Message, "Name parameter invalid: ") {
			t.Errorf("GET pods/%s: %d %s", name, resp.StatusCode, b)
		}
	}
	// A valid name that is not there is still 404.
	if err := restClient(t, cfg, scheme.Scheme.PrioritizedVersionsForGroup("")[0]).Get().Namespace("ns-1").
		Resource("pods").Name("nope").Do(t.Context()).Error(); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("GET pods/nope: %v", err)
	}
}

// TestRegressionBearerSchemeAnyCase: the bearer scheme's name is not case
// sensitive (RFC 7235; kube-apiserver lower-cases it): "bearer TOKEN"
// authenticates as "Bearer TOKEN" does. The local API answered 401.
func TestRegressionBearerSchemeAnyCase(t *testing.T) {
	a := startAgent(t, "", newPodSource(3))
	tok, err := localapi.LoadOrCreateToken(filepath.Join(t.TempDir(), "token"))
	if err != nil {
		t.Fatal(err)
	}
	_, cfg, _ := serveAgent(t, a, &localapi.Options{Token: tok})
	anon := rest.CopyConfig(cfg)
	anon.BearerToken = ""
	for auth, want := range map[string]int{"Bearer " + tok: 200, "bearer " + tok: 200, "BEARER " + tok: 200,
		"Bearer  " + tok: 401, "Basic " + tok: 401, "bearer wrong": 401, tok: 401} {
		req, _ := http.NewRequest(http.MethodGet, cfg.Host+"/api/v1/pods", nil)
		req.Header.Set("Authorization", auth)
		resp, err := httpClient(t, anon).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Authorization %q: %d, want %d", strings.Replace(auth, tok, "TOKEN", 1), resp.StatusCode, want)
		}
	}
}

// TestRegressionDiscoveryWithoutCoreResources: a local API that serves no
// core/v1 resource (an agent of Deployments or custom resources only)
// does not announce the core version: /api announced v1 and /api/v1 was
// 404, which client-go's cached discovery (kubectl's) takes for a group
// that failed: `kubectl api-resources` failed with "unable to retrieve
// the complete list of server APIs: v1".
func TestRegressionDiscoveryWithoutCoreResources(t *testing.T) {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "d", Namespace: "ns", ResourceVersion: "5"}}
	h, err := localapi.NewStatic([]localapi.Snapshot{{Informer: "deployments", Resource: "apps/v1, Resource=deployments",
		Kind: appsv1.SchemeGroupVersion.WithKind("Deployment"), Objects: []runtime.Object{d}, ResourceVersion: "5"}}, &localapi.Options{Logger: &quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	cfg := serve(t, h, "")
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, lists, err := memory.NewMemCacheClient(dc).ServerGroupsAndResources()
	if err != nil {
		t.Fatalf("discovery: %v", err)
	}
	var got []string
	for _, l := range lists {
		for _, r := range l.APIResources {
			if len(r.Verbs) > 0 { // the others are not served (listed for kubectl to read why)
				got = append(got, l.GroupVersion+" "+r.Name)
			}
		}
	}
	if strings.Join(got, ",") != "apps/v1 deployments" {
		t.Fatalf("resources %v", got)
	}
}

// TestRegressionPreferredVersionKubeAware: a group served at several
// versions prefers the highest by Kubernetes' version order (v2 over
// v1beta1, v1beta2 over v1beta1), listed first, as the apiserver does; it
// preferred the first in string order.
func TestRegressionPreferredVersionKubeAware(t *testing.T) {
	var snaps []localapi.Snapshot
	for _, v := range []string{"v1beta1", "v2", "v1alpha1", "v1beta2"} {
		snaps = append(snaps, localapi.Snapshot{Informer: "widgets-" + v, Resource: "example.com/" + v + ", Resource=widgets",
			Kind: schema.GroupVersionKind{Group: "example.com", Version: v, Kind: "Widget"}, ResourceVersion: "5"})
	}
	h, err := localapi.NewStatic(snaps, &localapi.Options{Logger: &quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	cfg := serve(t, h, "")
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	groups, err := dc.ServerGroups()
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range groups.Groups {
		if g.Name != "example.com" {
			continue
		}
		var vs []string
		for _, v := range g.Versions {
			vs = append(vs, v.Version)
		}
		if strings.Join(vs, ",") != "v2,v1beta2,v1beta1,v1alpha1" || g.PreferredVersion.Version != "v2" {
			t.Fatalf("versions %v, preferred %s", vs, g.PreferredVersion.Version)
		}
		return
	}
	t.Fatalf("no group example.com in %v", groups.Groups)
}

// TestRegressionNamedGetWithWatchParam: ?watch=true on a named object's
// path is a GET, as in the apiserver (only a path without a name, or the
// /watch/ prefix, watches); the local API streamed a watch, and 404 for
// the status subresource.
func TestRegressionNamedGetWithWatchParam(t *testing.T) {
	a := startAgent(t, "", newPodSource(3))
	_, cfg, _ := serveAgent(t, a, nil)
	for _, path := range []string{"/api/v1/namespaces/ns-1/pods/pod-000001?watch=true", "/api/v1/namespaces/ns-1/pods/pod-000001/status?watch=1"} {
		resp, err := httpClient(t, cfg).Get(cfg.Host + path)
		if err != nil {
			t.Fatal(err)
		}
		// The first JSON value only: a watch's stream does not end.
		var m map[string]any
		err = json.NewDecoder(resp.Body).Decode(&m)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || m["kind"] != "Pod" {
			t.Errorf("GET %s: %d %v: type %v kind %v", path, resp.StatusCode, err, m["type"], m["kind"])
		}
	}
}

// TestRegressionFieldSelectorUnstructuredBuiltin: a dynamic informer of a
// built-in kind holds unstructured objects; the kind's own field selectors
// (spec.nodeName of Pods) read them too. They read only typed objects, and
// every unstructured Pod had an empty spec.nodeName: a selected list was
// silently empty.
func TestRegressionFieldSelectorUnstructuredBuiltin(t *testing.T) {
	var objs []runtime.Object
	for i, node := range []string{"node-1", "node-2", "node-1"} {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("v1")
		u.SetKind("Pod")
		u.SetNamespace("ns")
		u.SetName(fmt.Sprintf("pod-%d", i))
		u.SetResourceVersion(fmt.Sprint(10 + i))
		if err := unstructured.SetNestedField(u.Object, node, "spec", "nodeName"); err != nil {
			t.Fatal(err)
		}
		if err := unstructured.SetNestedField(u.Object, i == 2, "spec", "hostNetwork"); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, u)
	}
	h, err := localapi.NewStatic([]localapi.Snapshot{{Informer: "pods", Resource: "/v1, Resource=pods",
		Kind: corev1.SchemeGroupVersion.WithKind("Pod"), Objects: objs, ResourceVersion: "12"}}, &localapi.Options{Logger: &quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	cfg := serve(t, h, "")
	for sel, want := range map[string]string{
		"spec.nodeName=node-1":                        "pod-0,pod-2",
		"spec.nodeName!=node-1":                       "pod-1",
		"spec.hostNetwork=true":                       "pod-2",
		"spec.nodeName=node-1,spec.hostNetwork=false": "pod-0",
	} {
		var l metav1.PartialObjectMetadataList
		b, err := restClient(t, cfg, corev1.SchemeGroupVersion).Get().Namespace("ns").Resource("pods").Param("fieldSelector", sel).Do(t.Context()).Raw()
		if err != nil {
			t.Fatalf("%s: %v", sel, err)
		}
		if err := json.Unmarshal(b, &l); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, it := range l.Items {
			got = append(got, it.Name)
		}
		if strings.Join(got, ",") != want {
			t.Errorf("fieldSelector %s: %v, want %s", sel, got, want)
		}
	}
}

// TestRegressionTableUnstructuredBuiltin: the Table of a dynamic informer
// of a built-in kind (unstructured objects) has the kind's cells; it had
// "?" in every column but NAME and AGE.
func TestRegressionTableUnstructuredBuiltin(t *testing.T) {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("v1")
	u.SetKind("Pod")
	u.SetNamespace("ns")
	u.SetName("pod-0")
	u.SetResourceVersion("10")
	if err := unstructured.SetNestedField(u.Object, "node-1", "spec", "nodeName"); err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(u.Object, "Pending", "status", "phase"); err != nil {
		t.Fatal(err)
	}
	h, err := localapi.NewStatic([]localapi.Snapshot{{Informer: "pods", Resource: "/v1, Resource=pods",
		Kind: corev1.SchemeGroupVersion.WithKind("Pod"), Objects: []runtime.Object{u}, ResourceVersion: "10"}}, &localapi.Options{Logger: &quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	cfg := serve(t, h, "")
	b, err := restClient(t, cfg, corev1.SchemeGroupVersion).Get().Namespace("ns").Resource("pods").
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").Do(t.Context()).Raw()
	if err != nil {
		t.Fatal(err)
	}
	var tb metav1.Table
	if err := json.Unmarshal(b, &tb); err != nil || len(tb.Rows) != 1 {
		t.Fatalf("%v: %s", err, b)
	}
	if got := fmt.Sprint(tb.Rows[0].Cells); strings.Contains(got, "?") || !strings.Contains(got, "Pending") || !strings.Contains(got, "node-1") {
		t.Fatalf("cells %s", got)
	}
}
