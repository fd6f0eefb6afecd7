package localapi_test

import (
	"net/http"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/boltinformer/boltinformer/localapi"
)

// What is not served says why, in the shapes kubectl prints (issue 26
// item 3: kubectl printed "the server could not find the requested
// resource", "the server doesn't have a resource type", "failed to
// download openapi" without the local API's reason):
//   - a built-in resource no informer serves is in discovery without
//     verbs, and its requests get a 404 naming what is served;
//   - the GET of a namespace, when no informer serves namespaces, is a 403
//     (kubectl asks for it after an object's 404, and prints a 404 of it
//     instead of the object's own);
//   - a subresource other than status (log, exec) is a 404 that says so;
//   - /openapi is a text/plain 403 (client-go keeps a raw request's text
//     only from those);
//   - a write's 405 says the local API is read-only;
//   - SelfSubjectAccessReview and SelfSubjectRulesReview answer (kubectl
//     auth can-i): get, list and watch of what is served.
func TestRegressionNotServedSaysWhy(t *testing.T) {
	a := startAgent(t, "", newPodSource(3))
	_, cfg, rc := serveAgent(t, a, &localapi.Options{Token: "tok"})
	var rl metav1.APIResourceList
	if err := rc.Get().AbsPath("/api/v1").Do(t.Context()).Into(&rl); err != nil {
		t.Fatal(err)
	}
	verbs := map[string]string{}
	for _, r := range rl.APIResources {
		verbs[r.Name] = strings.Join(r.Verbs, ",")
	}
	if verbs["pods"] != "get,list,watch" || verbs["events"] != "" || verbs["namespaces"] != "" {
		t.Fatalf("discovery: %v", verbs)
	}
	if _, ok := verbs["events"]; !ok {
		t.Fatalf("events are not in discovery: %v", verbs)
	}
	err := rc.Get().Namespace("ns-0").Resource("events").Do(t.Context()).Error()
	if !apierrors.IsNotFound(err) || err.Error() != "the local API does not serve events: it serves only what this agent caches (pods); ask the cluster's API server" {
		t.Errorf("events: %v", err)
	}
	err = rc.Get().Resource("namespaces").Name("ns-0").Do(t.Context()).Error()
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `it cannot tell whether namespace "ns-0" exists`) {
		t.Errorf("namespace ns-0: %v", err)
	}
	err = rc.Get().Namespace("ns-0").Resource("pods").Name("pod-000000").SubResource("log").Do(t.Context()).Error()
	if !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), "the local API does not serve pods/log") {
		t.Errorf("pods/log: %v", err)
	}
	err = rc.Delete().Namespace("ns-0").Resource("pods").Name("pod-000000").Do(t.Context()).Error()
	if !apierrors.IsMethodNotSupported(err) || err.Error() != `delete is not supported on resources of kind "pods": the local API is read-only; write through the cluster's API server` {
		t.Errorf("delete: %v", err)
	}
	resp, body := sendGet(t, cfg, "/openapi/v3", nil)
	if resp.StatusCode != http.StatusForbidden || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") || !strings.Contains(string(body), "serves no OpenAPI") {
		t.Errorf("/openapi/v3: %d %q %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	ac := restClient(t, cfg, authorizationv1.SchemeGroupVersion)
	for _, tc := range []struct {
		verb, resource string
		allowed        bool
		reason         string
	}{
		{"list", "pods", true, ""},
		{"watch", "pods", true, ""},
		{"delete", "pods", false, "the local API is read-only"},
		{"get", "secrets", false, "the local API does not serve secrets"},
	} {
		rev := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: tc.verb, Resource: tc.resource, Namespace: "ns-0"}}}
		out := &authorizationv1.SelfSubjectAccessReview{}
		if err := ac.Post().Resource("selfsubjectaccessreviews").Body(rev).Do(t.Context()).Into(out); err != nil {
			t.Fatal(err)
		}
		if out.Status.Allowed != tc.allowed || !strings.Contains(out.Status.Reason, tc.reason) {
			t.Errorf("can-i %s %s: %+v", tc.verb, tc.resource, out.Status)
		}
	}
	rules := &authorizationv1.SelfSubjectRulesReview{}
	if err := ac.Post().Resource("selfsubjectrulesreviews").Body(&authorizationv1.SelfSubjectRulesReview{Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: "ns-0"}}).Do(t.Context()).Into(rules); err != nil {
		t.Fatal(err)
	}
	if len(rules.Status.ResourceRules) != 2 || strings.Join(rules.Status.ResourceRules[0].Verbs, ",") != "get,list,watch" || rules.Status.ResourceRules[0].Resources[0] != "pods" {
		t.Errorf("rules: %+v", rules.Status)
	}
}
