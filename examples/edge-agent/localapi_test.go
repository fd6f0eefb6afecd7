//go:build linux

package main

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/boltinformer/boltinformer/localapi"
	"github.com/boltinformer/boltinformer/recovery/crashtest"
)

// TestRegressionLocalAPIKubectl (issue 26 item 1): the agent serves the
// node's cache as the local API, on a Unix socket by default and, with
// -api-listen, with TLS and a token on loopback, its kubeconfig written in
// -api-dir: kubectl reads the node's Pods and the namespace's ConfigMaps
// through it, and is told why Secrets are not served. Before, -listen
// served /metrics, /healthz and /status only, and kubectl against the
// agent failed. The agent is main itself, in a child process, against a
// fake API server on 127.0.0.1.
func TestRegressionLocalAPIKubectl(t *testing.T) {
	bin, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("SKIPPED LOUDLY: no kubectl on PATH (test/kas/localapi runs the agent with kubectl built from the Kubernetes sources)")
	}
	history := crashtest.NewHistory(3, &crashtest.HistoryOptions{Keys: 20, Nodes: 1})
	pods := history.Source(0, 60)
	srv := httptest.NewServer(edgeHandler(pods))
	defer srv.Close()
	dir := t.TempDir()
	kubeconfig, err := writeKubeconfig(dir, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	keyFile, err := writeKeyFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), mainArgsEnv+"="+strings.Join([]string{
		"-kubeconfig=" + kubeconfig,
		"-cache=" + filepath.Join(dir, "agent.db"),
		"-node=node-0",
		"-namespace=edge",
		"-listen=127.0.0.1:0",
		"-key-file=" + keyFile,
		"-api-listen=127.0.0.1:0",
	}, "\n"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	defer func() {
		if !stopped {
			_ = cmd.Process.Kill() // our own child, by its pid
			<-exited
		}
	}()

	var want []string
	for _, o := range pods.Objects() {
		p := o.(*corev1.Pod)
		want = append(want, "pod/"+p.Name)
	}
	sort.Strings(want)
	// The defaults beside -cache: the socket and the API directory.
	apiKubeconfig := filepath.Join(dir, "agent-api", "kubeconfig")
	run := func(args ...string) (string, string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig", apiKubeconfig}, args...)...)
		var o, e bytes.Buffer
		c.Stdout, c.Stderr = &o, &e
		err := c.Run()
		return o.String(), e.String(), err
	}
	var got []string
	deadline := time.Now().Add(2 * time.Minute) // a bound against a hang
	for {
		out, _, err := run("get", "pods", "-A", "-o", "name")
		got = strings.Fields(out)
		sort.Strings(got)
		if err == nil && strings.Join(got, " ") == strings.Join(want, " ") {
			break
		}
		select {
		case err := <-exited:
			stopped = true
			t.Fatalf("the agent exited: %v\n%s", err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("kubectl get pods -A through the agent's local API: %v\n%v\nwant %v\n%s", err, got, want, stderr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	out, _, err := run("get", "configmaps", "-n", "edge", "-o", "name")
	if err != nil || out != "configmap/cm-0\nconfigmap/cm-1\n" {
		t.Errorf("kubectl get configmaps: %v %q", err, out)
	}
	out, errOut, err := run("get", "secrets", "-n", "edge")
	if err == nil || !strings.Contains(errOut, "secrets are not served by this local API") || strings.Contains(out+errOut, secretPlaintext) {
		t.Errorf("kubectl get secrets: %v\n%s%s", err, out, errOut)
	}
	// The socket: client-go, no token.
	cfg := localapi.UnixConfig(filepath.Join(dir, "agent.sock"))
	gv := schema.GroupVersion{Version: "v1"}
	cfg.GroupVersion, cfg.APIPath, cfg.NegotiatedSerializer = &gv, "/api", scheme.Codecs.WithoutConversion()
	rc, err := rest.RESTClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var l corev1.PodList
	if err := rc.Get().Resource("pods").Do(context.Background()).Into(&l); err != nil || len(l.Items) != len(want) {
		t.Errorf("the socket lists %d Pods (%v), want %d", len(l.Items), err, len(want))
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	stopped = true
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("the agent after SIGTERM: %v\n%s", err, stderr.String())
		}
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		<-exited
		t.Fatalf("the agent did not stop after SIGTERM\n%s", stderr.String())
	}
}
