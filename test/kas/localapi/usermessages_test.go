package localapi

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// TestRegressionKubectlMessages (issue 26 item 3): what a user types that
// the local API cannot answer prints what a user needs to read, with real
// kubectl (built and system), beside kube-apiserver: kube-apiserver's own
// text where it has one (a missing object), the local API's reason where
// not (it serves no OpenAPI, no logs, no Secrets or events of an agent
// that caches none, no writes). Before, kubectl printed "the server could
// not find the requested resource", "failed to download openapi" with
// it, or "the server doesn't have a resource type" without a reason.
func TestRegressionKubectlMessages(t *testing.T) {
	bins := kubectls(t)
	cs, err := cluster.Clientset()
	if err != nil {
		t.Fatal(err)
	}
	ns := seed(t, cs, "messages", 3)
	dir := t.TempDir()
	a := startAgent(t, dir, "", 0)
	server := cluster.Kubeconfig()
	manifest := filepath.Join(dir, "pod.yaml")
	if err := os.WriteFile(manifest, []byte("apiVersion: v1\nkind: Pod\nmetadata:\n  name: applied\n  namespace: "+ns+
		"\nspec:\n  containers:\n  - name: c\n    image: registry.example/app:v1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, bin := range bins {
		t.Run(name, func(t *testing.T) {
			waitAgentHas(t, bin, a.kubeconfig, ns, 3)
			// The same stderr as kube-apiserver's.
			for _, args := range [][]string{
				{"get", "pod", "nosuch", "-n", ns},
				{"get", "pods", "-n", ns, "-l", "a in"},
				{"get", "pods", "-n", ns, "--field-selector", "spec.foo=bar"},
				{"get", "pods", "-n", ns, "--field-selector", "a"},
			} {
				_, want, errK := kubectl(bin, server, args...)
				_, got, errL := kubectl(bin, a.kubeconfig, args...)
				if errK == nil || errL == nil || got != want {
					t.Errorf("kubectl %s:\nlocal API (%v): %s\nkube-apiserver (%v): %s", strings.Join(args, " "), errL, got, errK, want)
				}
			}
			// The same stdout.
			for _, args := range [][]string{{"auth", "can-i", "get", "pods", "-n", ns}, {"auth", "can-i", "watch", "pods", "-A"}} {
				want, _, errK := kubectl(bin, server, args...)
				got, stderr, errL := kubectl(bin, a.kubeconfig, args...)
				if errK != nil || errL != nil || got != want {
					t.Errorf("kubectl %s: local API %q (%v %s), kube-apiserver %q (%v)", strings.Join(args, " "), got, errL, stderr, want, errK)
				}
			}
			// The local API's reason.
			for _, tc := range []struct {
				args []string
				want string
			}{
				{[]string{"get", "pod", "nosuch", "-n", "no-such-namespace"}, `Error from server (NotFound): pods "nosuch" not found`},
				{[]string{"explain", "pods"}, "the local API serves no OpenAPI documents"},
				{[]string{"apply", "-f", manifest}, "the local API serves no OpenAPI documents"},
				{[]string{"create", "-f", manifest}, "the local API serves no OpenAPI documents"},
				{[]string{"replace", "-f", manifest}, "the local API serves no OpenAPI documents"},
				{[]string{"create", "--validate=false", "-f", manifest}, "the local API is read-only"},
				{[]string{"delete", "pod", "-n", ns, "pod-00000"}, "the local API is read-only"},
				{[]string{"get", "secrets", "-n", ns}, "the local API does not serve secrets: it serves only what this agent caches (configmaps, pods)"},
				{[]string{"get", "events", "-n", ns}, "the local API does not serve events"},
				{[]string{"get", "ns"}, "the local API does not serve namespaces"},
				{[]string{"get", "ns", ns}, `it cannot tell whether namespace "` + ns + `" exists`},
				{[]string{"logs", "-n", ns, "pod-00000"}, "the local API does not serve pods/log"},
				{[]string{"cluster-info"}, "the local API does not serve services"},
			} {
				out, stderr, err := kubectl(bin, a.kubeconfig, tc.args...)
				if err == nil || !strings.Contains(stderr, tc.want) {
					t.Errorf("kubectl %s: %v, stderr does not say %q:\n%s%s", strings.Join(tc.args, " "), err, tc.want, out, stderr)
				} else {
					t.Logf("kubectl %s: %s", strings.Join(tc.args, " "), strings.TrimSpace(stderr))
				}
			}
			out, _, err := kubectl(bin, a.kubeconfig, "auth", "can-i", "delete", "pods", "-n", ns)
			if err == nil || !strings.HasPrefix(out, "no - the local API is read-only") {
				t.Errorf("kubectl auth can-i delete pods: %v %q", err, out)
			}
			out, _, err = kubectl(bin, a.kubeconfig, "api-resources", "--no-headers")
			if err != nil || strings.Contains(out, "events") || !strings.Contains(out, "pods") {
				t.Errorf("kubectl api-resources lists what is not served: %v\n%s", err, out)
			}
		})
	}
}

// kasGet sends a GET of path to the server of cfg with the headers and no
// transparent decompression; it returns the response and its body as sent.
func kasGet(t *testing.T, cfg *rest.Config, path string, header http.Header) (*http.Response, []byte) {
	t.Helper()
	c := rest.CopyConfig(cfg)
	c.DisableCompression = true
	hc, err := rest.HTTPClientFor(c)
	if err != nil {
		t.Fatal(err)
	}
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
	if resp.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		if b, err = io.ReadAll(zr); err != nil {
			t.Fatal(err)
		}
	}
	return resp, b
}

// TestRegressionHTTPAsKubeAPIServer (issue 26 item 4): the probes and
// /version without credentials, gzip, ?pretty and resourceVersion=0 with
// a limit, side by side with kube-apiserver.
func TestRegressionHTTPAsKubeAPIServer(t *testing.T) {
	cs, err := cluster.Clientset()
	if err != nil {
		t.Fatal(err)
	}
	ns := seed(t, cs, "http", 12)
	// A ConfigMap of 200 KB: its list is over the 128 KiB gzip threshold.
	big := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "big"}, Data: map[string]string{"k": strings.Repeat("0123456789", 20_000)}}
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(context.Background(), big, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a := startAgent(t, t.TempDir(), "", 0)
	local, err := clientcmd.BuildConfigFromFlags("", a.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	kas := cluster.RESTConfig()
	waitFor(t, "the agent to have the ConfigMaps and the Pods", func() bool {
		_, cms := kasGet(t, local, "/api/v1/namespaces/"+ns+"/configmaps", nil)
		_, pods := kasGet(t, local, "/api/v1/namespaces/"+ns+"/pods", nil)
		return bytes.Contains(cms, []byte(`"name":"big"`)) && bytes.Contains(pods, []byte(`"name":"pod-00011"`))
	})
	for _, path := range []string{"/healthz", "/livez", "/readyz", "/version"} {
		kr, kb := kasGet(t, rest.AnonymousClientConfig(kas), path, nil)
		lr, lb := kasGet(t, rest.AnonymousClientConfig(local), path, nil)
		if kr.StatusCode != http.StatusOK || lr.StatusCode != kr.StatusCode {
			t.Errorf("%s without credentials: local API %d %s, kube-apiserver %d %s", path, lr.StatusCode, lb, kr.StatusCode, kb)
		}
		if path == "/version" && (!bytes.HasPrefix(kb, []byte("{\n  \"major\"")) || !bytes.HasPrefix(lb, []byte("{\n  \"major\""))) {
			t.Errorf("/version is not indented as kube-apiserver's:\nlocal API %s\nkube-apiserver %s", lb, kb)
		}
	}
	gz := http.Header{"Accept-Encoding": {"gzip"}}
	items := func(b []byte) string {
		var l struct{ Items json.RawMessage }
		if err := json.Unmarshal(b, &l); err != nil {
			t.Fatal(err)
		}
		return string(l.Items)
	}
	kr, kb := kasGet(t, kas, "/api/v1/namespaces/"+ns+"/configmaps", gz)
	lr, lb := kasGet(t, local, "/api/v1/namespaces/"+ns+"/configmaps", gz)
	if kr.Header.Get("Content-Encoding") != "gzip" || lr.Header.Get("Content-Encoding") != "gzip" || items(kb) != items(lb) {
		t.Errorf("a 200 KB list with Accept-Encoding gzip: local API %q, kube-apiserver %q; same items %t",
			lr.Header.Get("Content-Encoding"), kr.Header.Get("Content-Encoding"), items(kb) == items(lb))
	}
	for _, path := range []string{"/api/v1/namespaces/" + ns + "/pods/pod-00001?pretty=true", "/api/v1/namespaces/" + ns + "/configmaps/cm-1?pretty=1",
		"/api/v1/namespaces/" + ns + "/pods/nosuch?pretty=true"} {
		_, kb := kasGet(t, kas, path, nil)
		_, lb := kasGet(t, local, path, nil)
		if !bytes.Equal(kb, lb) {
			t.Errorf("%s:\nlocal API:\n%s\nkube-apiserver:\n%s", path, lb, kb)
		}
	}
	_, kb = kasGet(t, kas, "/api/v1/namespaces/"+ns+"/pods?resourceVersion=0&limit=5", nil)
	_, lb = kasGet(t, local, "/api/v1/namespaces/"+ns+"/pods?resourceVersion=0&limit=5", nil)
	if items(kb) != items(lb) {
		t.Errorf("resourceVersion=0&limit=5: the lists differ\nlocal API %.300s\nkube-apiserver %.300s", lb, kb)
	}
	var l corev1.PodList
	if err := json.Unmarshal(lb, &l); err != nil || len(l.Items) != 12 || l.Continue != "" {
		t.Errorf("resourceVersion=0&limit=5 through the local API: %v, %d items, continue %q", err, len(l.Items), l.Continue)
	}
}
