package localapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
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
