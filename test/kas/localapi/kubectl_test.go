package localapi

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/boltinformer/boltinformer/test/kas/internal/kasbuild"
)

// kubectls are the kubectl binaries to test with: the one built from this
// module's Kubernetes sources (the server's version; the build is cached)
// and the system's, when there is one. With neither, the test is skipped,
// loudly.
func kubectls(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	res, err := kasbuild.BuildKubectl(ctx, kasbuild.Options{Logf: t.Logf})
	if err != nil {
		t.Logf("WARNING: kubectl could not be built from the module's sources: %v", err)
	} else {
		out["built"] = res.Binary
	}
	if p, err := exec.LookPath("kubectl"); err == nil {
		out["system"] = p
	}
	if len(out) == 0 {
		t.Skip("SKIPPED LOUDLY: no kubectl: the build from k8s.io/kubernetes/cmd/kubectl failed (see the warning) and none is on PATH")
	}
	return out
}

// kubectl runs bin with the kubeconfig and args; it returns stdout,
// stderr and the error.
func kubectl(bin, kubeconfig string, args ...string) (string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig", kubeconfig}, args...)...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	return o.String(), e.String(), err
}

// seed makes a namespace with n Pods (on node-1 and node-2, tiers web and
// db) and a few ConfigMaps on the real apiserver.
func seed(t testing.TB, cs kubernetes.Interface, prefix string, n int) string {
	t.Helper()
	ctx := context.Background()
	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := cs.CoreV1().Pods(ns.Name).Create(ctx, testPod(i), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i)}, Data: map[string]string{"k": "v"}}
		if _, err := cs.CoreV1().ConfigMaps(ns.Name).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return ns.Name
}

func testPod(i int) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%05d", i), Labels: map[string]string{"tier": []string{"web", "db"}[i%2], "app": fmt.Sprintf("app-%d", i%7)}},
		Spec: corev1.PodSpec{NodeName: fmt.Sprintf("node-%d", 1+i%2),
			Containers: []corev1.Container{{Name: "main", Image: "registry.example/app:v1"}}},
	}
}

// waitAgentHas waits until the agent's local API lists at least want pods
// in ns.
func waitAgentHas(t testing.TB, bin, kubeconfig, ns string, want int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		out, _, err := kubectl(bin, kubeconfig, "get", "pods", "-n", ns, "-o", "name")
		if err == nil && strings.Count(out, "\n") >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent lists %d pods in %s, want %d", strings.Count(out, "\n"), ns, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestKubectl runs kubectl against the agent's local API and against the
// apiserver, and compares: names, selectors, YAML, tables, discovery, a
// watch; then again with the apiserver stopped (the agent keeps
// answering). Writes get 405; explain fails (no OpenAPI), and says so.
func TestKubectl(t *testing.T) {
	bins := kubectls(t)
	cs, err := cluster.Clientset()
	if err != nil {
		t.Fatal(err)
	}
	ns := seed(t, cs, "kubectl", 20)
	dir := t.TempDir()
	a := startAgent(t, dir, "", 0)
	server := cluster.Kubeconfig()
	for name, bin := range bins {
		t.Run(name, func(t *testing.T) {
			waitAgentHas(t, bin, a.kubeconfig, ns, 20)
			same := func(args ...string) string {
				t.Helper()
				want, _, err := kubectl(bin, server, args...)
				if err != nil {
					t.Fatalf("kubectl %v against the apiserver: %v", args, err)
				}
				got, stderr, err := kubectl(bin, a.kubeconfig, args...)
				if err != nil || got != want {
					t.Fatalf("kubectl %s:\nlocal API (%v, %s):\n%s\napiserver:\n%s", strings.Join(args, " "), err, stderr, got, want)
				}
				return got
			}
			same("get", "pods", "-n", ns, "-o", "name")
			same("get", "po", "-n", ns, "-l", "tier=db", "-o", "name")
			same("get", "pods", "-A", "--field-selector", "spec.nodeName=node-1,metadata.namespace="+ns, "-o", "name")
			same("get", "pod", "-n", ns, "pod-00003", "-o", "yaml")
			same("get", "configmaps", "-n", ns, "-o", "jsonpath={.items[*].metadata.name}")
			same("get", "pods", "-n", ns, "--chunk-size=7", "-o", "name")
			table := same("get", "pods", "-n", ns, "-l", "app=app-3", "--no-headers", "-o", "custom-columns=NAME:.metadata.name,NODE:.spec.nodeName")
			got, _, err := kubectl(bin, a.kubeconfig, "get", "pods", "-n", ns)
			header, rows, _ := strings.Cut(got, "\n")
			if err != nil || strings.Join(strings.Fields(header), " ") != "NAME READY STATUS RESTARTS AGE" || !strings.Contains(strings.Join(strings.Fields(rows), " "), "pod-00003 0/1 Pending 0") {
				t.Fatalf("kubectl get pods (table): %v\n%s", err, got)
			}
			t.Logf("kubectl (%s) get pods -l app=app-3 through the local API:\n%s", name, table)
			got, _, err = kubectl(bin, a.kubeconfig, "api-resources")
			if err != nil || !strings.Contains(got, "pods") || !strings.Contains(got, "configmaps") {
				t.Fatalf("api-resources: %v\n%s", err, got)
			}
			if _, stderr, err := kubectl(bin, a.kubeconfig, "delete", "pod", "-n", ns, "pod-00001"); err == nil || !strings.Contains(stderr, "MethodNotAllowed") {
				t.Fatalf("delete: %v %s", err, stderr)
			}
			_, stderr, err := kubectl(bin, a.kubeconfig, "explain", "pods")
			t.Logf("kubectl explain pods through the local API (expected to fail: no OpenAPI): %v: %s", err, strings.TrimSpace(stderr))
			if err == nil {
				t.Fatal("explain worked: the local API serves no OpenAPI")
			}
			watchPod(t, bin, a.kubeconfig, cs, ns, "watched-"+name)
		})
	}

	// The apiserver stops: the agent keeps answering from its cache.
	want, _, err := kubectl(bins[firstKey(bins)], a.kubeconfig, "get", "pods", "-n", ns, "-o", "name")
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.StopAPIServer(); err != nil {
		// A graceful stop that overruns ends in SIGKILL: down all the same.
		t.Logf("stopping the apiserver: %v", err)
	}
	defer func() {
		if err := cluster.StartAPIServer(); err != nil {
			t.Fatal(err)
		}
	}()
	if _, _, err := kubectl(bins[firstKey(bins)], server, "get", "pods", "-n", ns); err == nil {
		t.Fatal("the apiserver still answers")
	}
	for name, bin := range bins {
		got, stderr, err := kubectl(bin, a.kubeconfig, "get", "pods", "-n", ns, "-o", "name")
		if err != nil || got != want {
			t.Fatalf("%s kubectl with the apiserver stopped: %v %s\n%s", name, err, stderr, got)
		}
		got, _, err = kubectl(bin, a.kubeconfig, "get", "pods", "-n", ns, "-l", "tier=db")
		if err != nil || strings.Count(got, "\n") != 11 {
			t.Fatalf("%s kubectl -l with the apiserver stopped: %v\n%s", name, err, got)
		}
	}
}

func firstKey(m map[string]string) string {
	if _, ok := m["built"]; ok {
		return "built"
	}
	return "system"
}

// watchPod runs kubectl get pods -w through the local API, creates a Pod
// on the apiserver, and waits for kubectl to print it.
func watchPod(t *testing.T, bin, kubeconfig string, cs kubernetes.Interface, ns, name string) {
	t.Helper()
	cmd := exec.Command(bin, "--kubeconfig", kubeconfig, "get", "pods", "-n", ns, "-w", "-o", "name")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill() // our own child, by its pid
		_ = cmd.Wait()
	}()
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	created := false
	timeout := time.After(2 * time.Minute)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("kubectl -w exited")
			}
			if l == "pod/"+name {
				return
			}
			if !created && l == "pod/pod-00019" { // the initial list is in
				p := testPod(100)
				p.Name = name
				if _, err := cs.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
				created = true
			}
		case <-timeout:
			t.Fatalf("kubectl -w did not show pod/%s", name)
		}
	}
}
