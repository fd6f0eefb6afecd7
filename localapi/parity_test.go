package localapi_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/boltinformer/boltinformer/localapi"
)

// sendGet sends a GET of path (with its query) to cfg's server with the
// headers, without client-go's transparent decompression; it returns the
// response and its body as sent.
func sendGet(t testing.TB, cfg *rest.Config, path string, header http.Header) (*http.Response, []byte) {
	t.Helper()
	c := rest.CopyConfig(cfg)
	c.DisableCompression = true
	hc := httpClient(t, c)
	req, err := http.NewRequest(http.MethodGet, strings.TrimSuffix(c.Host, "/")+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// The health checks and /version answer without the token, as
// kube-apiserver's do (to any probe, through system:public-info-viewer);
// everything else still needs it (issue 26 item 4: they got 401).
func TestRegressionProbesWithoutToken(t *testing.T) {
	a := startAgent(t, "", newPodSource(3))
	_, cfg, _ := serveAgent(t, a, &localapi.Options{Token: "s3cret"})
	anon := rest.AnonymousClientConfig(cfg)
	for _, path := range []string{"/healthz", "/livez", "/readyz", "/version", "/healthz/", "/version/"} {
		resp, body := sendGet(t, anon, path, nil)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s without a token: %d %s", path, resp.StatusCode, body)
		}
	}
	for _, path := range []string{"/api", "/apis", "/api/v1", "/api/v1/pods", "/openapi/v2", "/healthzx"} {
		if resp, body := sendGet(t, anon, path, nil); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s without a token: %d %s, want 401", path, resp.StatusCode, body)
		}
	}
	// /version is indented, as kube-apiserver writes it.
	resp, body := sendGet(t, anon, "/version", nil)
	var v map[string]any
	if err := json.Unmarshal(body, &v); err != nil || !bytes.Contains(body, []byte("{\n  \"major\": \"1\",\n")) {
		t.Errorf("/version: %v %v\n%s", resp.StatusCode, err, body)
	}
}

// A response over kube-apiserver's 128 KiB threshold is gzipped for a
// client that accepts it (issue 26 item 4: 1.0 MB sent where the
// apiserver sends 64 KB); smaller ones and clients that do not ask are
// answered plain.
func TestRegressionGzip(t *testing.T) {
	a := startAgent(t, "", newPodSource(400))
	_, cfg, _ := serveAgent(t, a, nil)
	gz := http.Header{"Accept-Encoding": {"gzip"}}
	plainResp, plain := sendGet(t, cfg, "/api/v1/pods", nil)
	if plainResp.Header.Get("Content-Encoding") != "" || len(plain) <= 128<<10 {
		t.Fatalf("plain list: %q, %d bytes (the test needs more than 128 KiB)", plainResp.Header.Get("Content-Encoding"), len(plain))
	}
	resp, body := sendGet(t, cfg, "/api/v1/pods", gz)
	if resp.Header.Get("Content-Encoding") != "gzip" || resp.Header.Get("Vary") != "Accept-Encoding" {
		t.Fatalf("Content-Encoding %q, Vary %q, want gzip and Accept-Encoding", resp.Header.Get("Content-Encoding"), resp.Header.Get("Vary"))
	}
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	unzipped, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(unzipped, plain) {
		t.Fatalf("the gzipped list is not the plain one (%d and %d bytes)", len(unzipped), len(plain))
	}
	t.Logf("400 Pods: %d bytes plain, %d gzipped", len(plain), len(body))
	// Small: plain, as from kube-apiserver.
	if resp, _ := sendGet(t, cfg, "/api/v1/namespaces/ns-0/pods?limit=1", gz); resp.Header.Get("Content-Encoding") != "" {
		t.Errorf("a small response is %q", resp.Header.Get("Content-Encoding"))
	}
	// client-go asks for gzip and decompresses: lists still work.
	l := &corev1.PodList{}
	if err := restClient(t, cfg, corev1.SchemeGroupVersion).Get().Resource("pods").Do(t.Context()).Into(l); err != nil || len(l.Items) != 400 {
		t.Fatalf("client-go: %v, %d Pods", err, len(l.Items))
	}
}

// ?pretty=true (and curl's, wget's and browsers' user agents, unless
// ?pretty=false) gets indented JSON, as from kube-apiserver (issue 26 item
// 4: it was ignored).
func TestRegressionPretty(t *testing.T) {
	a := startAgent(t, "", newPodSource(3))
	_, cfg, _ := serveAgent(t, a, nil)
	for _, path := range []string{"/api/v1/pods", "/api/v1/namespaces/ns-0/pods/pod-000000", "/api/v1/namespaces/ns-0/pods/nosuch", "/api", "/api/v1"} {
		_, compact := sendGet(t, cfg, path, nil)
		var want bytes.Buffer
		if err := json.Indent(&want, bytes.TrimRight(compact, "\n"), "", "  "); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			query  string
			agent  string
			pretty bool
		}{
			{"?pretty=true", "", true},
			{"?pretty=1", "", true},
			{"", "curl/8.5.0", true},
			{"?pretty=false", "curl/8.5.0", false},
			{"?pretty=0", "", false},
		} {
			h := http.Header{}
			if tc.agent != "" {
				h.Set("User-Agent", tc.agent)
			}
			_, got := sendGet(t, cfg, path+tc.query, h)
			exp := compact
			if tc.pretty {
				exp = want.Bytes()
			}
			if !bytes.Equal(got, exp) {
				t.Errorf("%s%s (agent %q): got\n%s\nwant\n%s", path, tc.query, tc.agent, got, exp)
			}
		}
	}
}

// resourceVersion=0 with a limit is the whole list, as kube-apiserver's
// watch cache answers it (issue 26 item 4: it paged).
func TestRegressionRV0IgnoresLimit(t *testing.T) {
	a := startAgent(t, "", newPodSource(10))
	_, _, rc := serveAgent(t, a, nil)
	l, err := listPods(t, rc, "", metav1.ListOptions{ResourceVersion: "0", Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Items) != 10 || l.Continue != "" || l.RemainingItemCount != nil {
		t.Fatalf("%d items, continue %q, remaining %v: want the 10 Pods in one page", len(l.Items), l.Continue, l.RemainingItemCount)
	}
	if l, err = listPods(t, rc, "", metav1.ListOptions{Limit: 3}); err != nil || len(l.Items) != 3 || l.Continue == "" {
		t.Fatalf("without resourceVersion=0: %v, %d items, continue %q", err, len(l.Items), l.Continue)
	}
}

// A bad selector or option gets kube-apiserver's own message and code
// (issue 26 item 4: the texts differed). The wanted texts are
// kube-apiserver v1.37's; test/kas/localapi compares against the real one.
func TestRegressionSelectorErrorsAsKubeAPIServer(t *testing.T) {
	a := startAgent(t, "", newPodSource(3))
	_, _, rc := serveAgent(t, a, nil)
	for _, tc := range []struct {
		opts    metav1.ListOptions
		want    string
		invalid bool // 422, else 400
	}{
		{opts: metav1.ListOptions{LabelSelector: "a in"}, want: "unable to parse requirement: found '' expected: '('"},
		{opts: metav1.ListOptions{LabelSelector: "a===b"}, want: "unable to parse requirement: found '=', expected: identifier"},
		{opts: metav1.ListOptions{FieldSelector: "a"}, want: "invalid selector: 'a'; can't understand 'a'"},
		{opts: metav1.ListOptions{FieldSelector: "spec.foo=bar"}, want: "field label not supported: spec.foo"},
		{opts: metav1.ListOptions{ResourceVersionMatch: metav1.ResourceVersionMatchExact}, want: `ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided`, invalid: true},
	} {
		_, err := listPods(t, rc, "", tc.opts)
		code := apierrors.IsBadRequest(err)
		if tc.invalid {
			code = apierrors.IsInvalid(err)
		}
		if !code || err.Error() != tc.want {
			t.Errorf("%+v: got %v (%d), want %q", tc.opts, err, codeOf(err), tc.want)
		}
	}
}

func codeOf(err error) int32 {
	if s, ok := err.(apierrors.APIStatus); ok {
		return s.Status().Code
	}
	return 0
}
