package localapi

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
)

// edgeAgent is a running examples/edge-agent.
type edgeAgent struct {
	cmd  *exec.Cmd
	done chan error
	once sync.Once
}

// buildEdgeAgent builds examples/edge-agent from this repository.
func buildEdgeAgent(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "edge-agent")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./examples/edge-agent")
	cmd.Dir = "../../.."
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./examples/edge-agent: %v\n%s", err, out)
	}
	return bin
}

// startEdgeAgent runs the agent binary for node-1 and namespace ns (its
// ConfigMaps), with the local API on loopback too (-api-listen
// 127.0.0.1:0), its files in dir; it returns once the kubeconfig is
// written.
func startEdgeAgent(t *testing.T, bin, dir, ns string) *edgeAgent {
	t.Helper()
	cmd := exec.Command(bin,
		"-kubeconfig="+cluster.Kubeconfig(), "-cache="+filepath.Join(dir, "edge.db"), "-node=node-1", "-namespace="+ns,
		"-listen=127.0.0.1:0", "-secrets=false", "-api-listen=127.0.0.1:0")
	logf, err := os.OpenFile(filepath.Join(dir, "agent.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a := &edgeAgent{cmd: cmd, done: make(chan error, 1)}
	go func() { a.done <- cmd.Wait() }()
	t.Cleanup(func() { a.stop(t) })
	return a
}

// stop ends the agent with SIGTERM and waits for it.
func (a *edgeAgent) stop(t *testing.T) {
	a.once.Do(func() {
		_ = a.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-a.done:
			if err != nil {
				t.Errorf("edge agent: %v", err)
			}
		case <-time.After(time.Minute):
			_ = a.cmd.Process.Kill() // our own child, by its pid
			<-a.done
			t.Errorf("the edge agent did not stop within a minute of SIGTERM")
		}
	})
}

// TestEdgeAgentLocalAPI runs examples/edge-agent against kube-apiserver,
// as a user would, and reads the node's cache through its local API with
// kubectl (built and system) and Python's client (issue 26 items 1, 5, 6,
// 7): kubectl's answers are kube-apiserver's for the node's Pods and the
// namespace's ConfigMaps; a list wider than the cache warns that it is
// partial; the agent restarts on the same port; and a Python watch of a
// quiet namespace, whose resourceVersion is old (other namespaces
// changed), resumes across the restart without a 410, and sees the next
// change.
func TestEdgeAgentLocalAPI(t *testing.T) {
	bins := kubectls(t)
	ensurePython(t)
	bin := buildEdgeAgent(t)
	cs, err := cluster.Clientset()
	if err != nil {
		t.Fatal(err)
	}
	quiet := seed(t, cs, "edge-quiet", 6)
	busy := seed(t, cs, "edge-busy", 6)
	dir := t.TempDir()
	agent := startEdgeAgent(t, bin, dir, quiet)
	kc := filepath.Join(dir, "edge-api", "kubeconfig")
	server := cluster.Kubeconfig()
	onNode := "--field-selector=spec.nodeName=node-1"
	for name, k := range bins {
		t.Run(name, func(t *testing.T) {
			waitFor(t, "the agent's local API", func() bool {
				out, _, err := kubectl(k, kc, "get", "pods", "-n", quiet, onNode, "-o", "name")
				return err == nil && strings.Count(out, "\n") == 3
			})
			for _, args := range [][]string{
				{"get", "pods", "-n", quiet, onNode, "-o", "name"},
				{"get", "pods", "-n", busy, onNode, "-o", "yaml"},
				{"get", "configmaps", "-n", quiet, "-o", "jsonpath={.items[*].metadata.name}"},
			} {
				want, _, err := kubectl(k, server, args...)
				if err != nil {
					t.Fatal(err)
				}
				got, stderr, err := kubectl(k, kc, args...)
				if err != nil || got != want || stderr != "" {
					t.Errorf("kubectl %s:\nlocal API (%v, %q):\n%s\nkube-apiserver:\n%s", strings.Join(args, " "), err, stderr, got, want)
				}
			}
			for _, args := range [][]string{
				{"get", "pods", "-A"},
				{"get", "pods", "-n", quiet, "--field-selector=spec.nodeName=node-2"},
				{"get", "configmaps", "-A"},
			} {
				_, stderr, err := kubectl(k, kc, args...)
				if err != nil || !strings.Contains(stderr, "Warning: this local API serves only the") {
					t.Errorf("kubectl %s: %v, no warning that the list is partial:\n%s", strings.Join(args, " "), err, stderr)
				} else {
					t.Logf("kubectl %s: %s", strings.Join(args, " "), strings.TrimSpace(stderr))
				}
			}
		})
	}

	// Python watches the quiet namespace from its list.
	script := filepath.Join(dir, "watch.py")
	if err := os.WriteFile(script, []byte(pythonResume), 0o644); err != nil {
		t.Fatal(err)
	}
	py := exec.Command(python(), script, kc, quiet)
	py.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := py.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	py.Stderr = os.Stderr
	if err := py.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = py.Process.Kill(); _ = py.Wait() }() // our own child, by its pid
	lines := make(chan map[string]any, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				lines <- m
			}
		}
		close(lines)
	}()
	next := func() map[string]any {
		t.Helper()
		select {
		case m, ok := <-lines:
			if !ok {
				t.Fatal("the Python client exited")
			}
			return m
		case <-time.After(2 * time.Minute):
			t.Fatal("no output from the Python client")
		}
		return nil
	}
	if m := next(); m["type"] != "LIST" {
		t.Fatalf("Python: %v", m)
	}
	// The busy namespace changes: the quiet watch's resourceVersion gets
	// old. Then the agent restarts.
	ctx := context.Background()
	for i := range 10 {
		patch := fmt.Sprintf(`{"metadata":{"labels":{"round":"%d"}}}`, i)
		if _, err := cs.CoreV1().Pods(busy).Patch(ctx, "pod-00000", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	want, _, err := kubectl(bins[firstKey(bins)], server, "get", "pod", "-n", busy, "pod-00000", "-o", "jsonpath={.metadata.resourceVersion}")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the agent to have the busy namespace's changes", func() bool {
		got, _, err := kubectl(bins[firstKey(bins)], kc, "get", "pod", "-n", busy, "pod-00000", "-o", "jsonpath={.metadata.resourceVersion}")
		return err == nil && got == want
	})
	before, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	agent.stop(t)
	startEdgeAgent(t, bin, dir, quiet)
	waitFor(t, "the restarted agent's local API", func() bool {
		_, _, err := kubectl(bins[firstKey(bins)], kc, "get", "pods", "-n", quiet, onNode, "-o", "name")
		return err == nil
	})
	after, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	if after.Host != before.Host {
		t.Errorf("the restarted agent serves on %s, before on %s (item 6)", after.Host, before.Host)
	}
	// The quiet namespace's next change reaches Python, through the
	// restarted agent, with no 410 before it.
	p, err := cs.CoreV1().Pods(quiet).Patch(ctx, "pod-00002", types.MergePatchType, []byte(`{"metadata":{"labels":{"after":"restart"}}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		m := next()
		if m["type"] == "EXPIRED" {
			t.Fatalf("Python's watch got 410 after the restart: %v", m)
		}
		if m["type"] == "MODIFIED" && m["name"] == "pod-00002" {
			if m["rv"] != p.ResourceVersion {
				t.Fatalf("Python saw pod-00002 at %v, the apiserver wrote %s", m["rv"], p.ResourceVersion)
			}
			break
		}
		t.Logf("Python: %v", m)
	}
}

// pythonResume lists the Pods of a namespace on node-1, then watches them
// from the list's resourceVersion, and from each event's after an error
// (the agent's restart: a refused connection), as a long-running client
// does; a 410 is printed as EXPIRED, and it lists again.
const pythonResume = `
import json, sys, time
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException
config.load_kube_config(config_file=sys.argv[1])
v1 = client.CoreV1Api()
ns, sel = sys.argv[2], "spec.nodeName=node-1"
def relist():
    pods = v1.list_namespaced_pod(ns, field_selector=sel)
    print(json.dumps({"type": "LIST", "rv": pods.metadata.resource_version}), flush=True)
    return pods.metadata.resource_version
rv = relist()
while True:
    try:
        w = watch.Watch()
        for ev in w.stream(v1.list_namespaced_pod, ns, field_selector=sel, resource_version=rv):
            rv = ev["object"].metadata.resource_version
            print(json.dumps({"type": ev["type"], "name": ev["object"].metadata.name, "rv": rv}), flush=True)
    except ApiException as e:
        if e.status == 410:
            print(json.dumps({"type": "EXPIRED", "rv": rv}), flush=True)
            rv = relist()
            continue
        print(json.dumps({"type": "RETRY", "error": str(e.status)}), flush=True)
        time.sleep(0.2)
    except Exception as e:
        print(json.dumps({"type": "RETRY", "error": type(e).__name__}), flush=True)
        time.sleep(0.2)
`
