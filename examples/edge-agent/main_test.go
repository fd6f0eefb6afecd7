//go:build linux

package main

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// mainArgsEnv makes the test binary run the agent's main with the
// newline-separated arguments it holds (see TestMain).
const mainArgsEnv = "EDGE_AGENT_TEST_MAIN_ARGS"

func TestMain(m *testing.M) {
	if args, ok := os.LookupEnv(mainArgsEnv); ok {
		// The agent, exactly as its binary runs: main's flags, signal
		// handling and exit status.
		os.Args = append([]string{os.Args[0]}, strings.Split(args, "\n")...)
		main()
		os.Exit(0)
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// A SIGTERM while the caches are still cold-starting is a requested stop:
// the agent exits 0 and says it stopped before the caches synced (it
// exited 1 with "caches did not sync"). The API server answers the
// cluster-identity lookup and holds every list and watch, so the cold
// start cannot finish; the signal comes once the first one has arrived.
func TestRegressionSIGTERMDuringColdStartExitsZero(t *testing.T) {
	held := make(chan string, 16)
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1/namespaces/kube-system" {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"kind":"Namespace","apiVersion":"v1","metadata":{"name":"kube-system","uid":"cluster-uid"}}`)
			return
		}
		select {
		case held <- r.Method + " " + r.URL.String():
		default:
		}
		select { // until the agent goes away or the test ends
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	defer srv.Close()
	defer close(stop)

	dir := t.TempDir()
	kubeconfig, err := writeKubeconfig(dir, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), mainArgsEnv+"="+strings.Join([]string{
		"-kubeconfig=" + kubeconfig,
		"-cache=" + filepath.Join(dir, "agent.db"),
		"-listen=127.0.0.1:0",
		"-secrets=false",
	}, "\n"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive the test
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// A bound against a hang, not a timing threshold.
	guard := time.NewTimer(2 * time.Minute)
	defer guard.Stop()
	select {
	case req := <-held:
		t.Logf("the cold start is waiting on %s", req)
	case err := <-exited:
		t.Fatalf("the agent exited before its cold start: %v\n%s", err, stderr.String())
	case <-guard.C:
		_ = cmd.Process.Kill()
		<-exited
		t.Fatalf("no list or watch reached the server\n%s", stderr.String())
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err = <-exited:
	case <-guard.C:
		_ = cmd.Process.Kill()
		<-exited
		t.Fatalf("the agent did not stop after SIGTERM\n%s", stderr.String())
	}
	if err != nil {
		t.Errorf("exit: %v, want status 0", err)
	}
	want := "edge-agent: stopped before the caches synced (terminated signal received); not synced: "
	if !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr does not say %q:\n%s", want, stderr.String())
	}
	if strings.Contains(stderr.String(), "caches did not sync") {
		t.Errorf("stderr reports a failure:\n%s", stderr.String())
	}
}
