package localapi

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// TestRegressionSecretsByKindKubectl (issue 23, finding 4): an agent
// caching the cluster's Secrets in an informer named and listed as
// "edge-secrets" (not "secrets") serves none of them through the local
// API, to real kubectl: get (every output), the raw list, a watch, and
// api-resources; kube-apiserver has them. Before, kubectl printed them.
func TestRegressionSecretsByKindKubectl(t *testing.T) {
	bins := kubectls(t)
	bin := bins[firstKey(bins)]
	cs, err := cluster.Clientset()
	if err != nil {
		t.Fatal(err)
	}
	ns := seed(t, cs, "secrets", 1)
	const value = "kas-secret-do-not-serve"
	if _, err := cs.CoreV1().Secrets(ns).Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Data: map[string][]byte{"password": []byte(value)}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if out, _, err := kubectl(bin, cluster.Kubeconfig(), "get", "secret", "-n", ns, "db", "-o", "name"); err != nil || out != "secret/db\n" {
		t.Fatalf("the apiserver: %v %q", err, out)
	}
	a := startAgentEnv(t, t.TempDir(), "", 0, agentSecretsEnv+"=edge-secrets")
	waitAgentHas(t, bin, a.kubeconfig, ns, 1)
	leaks := func(s string) bool {
		return strings.Contains(s, value) || strings.Contains(s, base64.StdEncoding.EncodeToString([]byte(value)))
	}
	// Until the Secrets informer has synced, its resource is 503 (or not
	// known yet): wait for another answer.
	var out, stderr string
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, stderr, err = kubectl(bin, a.kubeconfig, "get", "--raw", "/api/v1/namespaces/"+ns+"/edge-secrets")
		if !strings.Contains(stderr, "ServiceUnavailable") && !strings.Contains(stderr, "NotFound") && !strings.Contains(stderr, "not synced") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Secrets informer did not sync: %s", stderr)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err == nil || leaks(out+stderr) || !strings.Contains(stderr, "Forbidden") {
		t.Fatalf("kubectl get --raw edge-secrets through the local API: %v\n%s\n%s", err, out, stderr)
	}
	for _, args := range [][]string{
		{"get", "edge-secrets", "-n", ns, "-o", "yaml"},
		{"get", "edge-secrets", "-n", ns},
		{"get", "edge-secrets", "-A", "-o", "json"},
		{"get", "edge-secrets", "-n", ns, "db", "-o", "yaml"},
		{"get", "edge-secrets", "-n", ns, "-w", "--request-timeout=10s"},
		{"get", "--raw", "/api/v1/edge-secrets?watch=1&timeoutSeconds=5"},
		{"get", "--raw", "/api/v1/namespaces/" + ns + "/edge-secrets/db"},
	} {
		out, stderr, err := kubectl(bin, a.kubeconfig, args...)
		if err == nil || leaks(out+stderr) {
			t.Errorf("kubectl %s through the local API: %v\n%s\n%s", strings.Join(args, " "), err, out, stderr)
		}
	}
	out, _, err = kubectl(bin, a.kubeconfig, "api-resources", "--no-headers")
	if err != nil || strings.Contains(out, "edge-secrets") || !strings.Contains(out, "pods") {
		t.Fatalf("api-resources through the local API: %v\n%s", err, out)
	}
}

// hugeSelector is the label selector of issue 23, finding 5: 114,746
// terms "!kI" (921 KB), and a last term no Pod has, so that the answer is
// small and every term is evaluated for every Pod (terms are sorted by
// key: "zz" last).
func hugeSelector() string {
	var b strings.Builder
	for i := range 114746 {
		fmt.Fprintf(&b, "!k%d,", i)
	}
	b.WriteString("zz=1")
	return b.String()
}

// TestRegressionHugeSelectorDoesNotStallTheAgent (issue 23, finding 5):
// while one LIST with a 921 KB selector of 114,746 terms selects over
// 2,000 Pods (seconds of CPU), the agent's informer keeps applying events
// and other requests of the resource answer: a Pod created on the
// apiserver then is seen by kubectl through the local API before that
// LIST answers. Before, the informer's apply waited for the LIST, and
// every other request of the resource waited behind it (Go's RWMutex):
// the Pod appeared only after the LIST. The selector is sent as
// kube-apiserver takes it (raw in the request line, under its 1 MiB
// bound on headers), and kube-apiserver answers it too.
func TestRegressionHugeSelectorDoesNotStallTheAgent(t *testing.T) {
	bins := kubectls(t)
	bin := bins[firstKey(bins)]
	cs, err := cluster.Clientset()
	if err != nil {
		t.Fatal(err)
	}
	const n = 2000
	ns := seed(t, cs, "huge", n)
	a := startAgent(t, t.TempDir(), "", 0)
	waitAgentHas(t, bin, a.kubeconfig, ns, n)
	cfg, err := clientcmd.BuildConfigFromFlags("", a.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	sel := hugeSelector()
	if len(sel) < 900<<10 || len(sel) >= 1<<20 {
		t.Fatalf("selector of %d bytes", len(sel))
	}
	// kube-apiserver answers the same request (an empty list).
	if code, body, _ := rawList(t, cluster.RESTConfig(), "/api/v1/namespaces/"+ns+"/pods", sel); code != http.StatusOK || !strings.Contains(body, `"items":[]`) {
		t.Fatalf("kube-apiserver: %d %.300s", code, body)
	}

	var listDone atomic.Bool
	type result struct {
		code int
		body string
		took time.Duration
	}
	done := make(chan result, 1)
	go func() {
		code, body, took := rawList(t, cfg, "/api/v1/namespaces/"+ns+"/pods", sel)
		listDone.Store(true)
		done <- result{code, body, took}
	}()
	// Let the LIST start selecting: its request is sent and parsed (a
	// GET through the agent still answers meanwhile).
	time.Sleep(500 * time.Millisecond)
	if listDone.Load() {
		t.Fatalf("the LIST answered before the test went on: %+v", <-done)
	}
	p := testPod(n + 1)
	p.Name = "during-huge-list"
	created := time.Now()
	if _, err := cs.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var seenDuringList bool
	var seenAfter time.Duration
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, _, err := kubectl(bin, a.kubeconfig, "get", "pod", "-n", ns, p.Name, "-o", "name")
		if err == nil && out == "pod/"+p.Name+"\n" {
			seenAfter = time.Since(created)
			seenDuringList = !listDone.Load()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the agent never served the new Pod")
		}
		time.Sleep(50 * time.Millisecond)
	}
	r := <-done
	t.Logf("the huge LIST took %s through the local API; the Pod created %s after it started was seen by kubectl %s after its creation (while the LIST was selecting: %v)",
		r.took.Round(time.Millisecond), (500 * time.Millisecond), seenAfter.Round(time.Millisecond), seenDuringList)
	if r.code != http.StatusOK || !strings.Contains(r.body, `"items":[]`) {
		t.Fatalf("the huge LIST through the local API: %d %.300s", r.code, r.body)
	}
	if !seenDuringList {
		t.Fatalf("the Pod was seen through the local API only after the huge LIST answered (%s after its creation): the informer waited for the LIST", seenAfter)
	}
}

// rawList sends a LIST of path with the label selector sel raw in the
// request line (as a client that does not escape '!' and ',' does; it
// then fits kube-apiserver's 1 MiB bound on headers), and returns the
// status, the body and how long it took.
func rawList(t *testing.T, cfg *rest.Config, path, sel string) (int, string, time.Duration) {
	c, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Error(err)
		return 0, "", 0
	}
	u, err := url.Parse(cfg.Host + path)
	if err != nil {
		t.Error(err)
		return 0, "", 0
	}
	u.RawQuery = "labelSelector=" + sel
	req, err := http.NewRequest(http.MethodGet, u.String(), nil)
	if err != nil {
		t.Error(err)
		return 0, "", 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	resp, err := c.Do(req.WithContext(ctx))
	if err != nil {
		t.Error(err)
		return 0, "", 0
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Error(err)
	}
	return resp.StatusCode, string(b), time.Since(start)
}
