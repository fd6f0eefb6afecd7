package localapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
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
