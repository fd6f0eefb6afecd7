package harness_test

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/boltinformer/boltinformer/test/kas/internal/kasbuild"

	"github.com/boltinformer/boltinformer/test/kas/harness"
)

// TestUpAndWait runs `kas up` as the README demo does, `kas wait` beside it,
// uses the cluster, and stops it with SIGTERM: exit 0, nothing left running.
func TestUpAndWait(t *testing.T) {
	ctx := t.Context()
	res, err := kasbuild.Build(ctx, kasbuild.Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	up := exec.Command(res.Binary, "up", "--dir", dir, "--compaction-interval", "1m")
	up.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := up.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderrFile, err := os.Create(filepath.Join(dir, "up.stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer stderrFile.Close()
	up.Stderr = stderrFile
	stderr := func() string { b, _ := os.ReadFile(stderrFile.Name()); return string(b) }
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	var waitErr error
	exited := make(chan struct{})
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
		waitErr = up.Wait()
		close(exited)
	}()
	t.Cleanup(func() { // in case the test fails before its own SIGTERM
		select {
		case <-exited:
		default:
			_ = up.Process.Kill()
			<-exited
		}
	})

	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(wctx, res.Binary, "wait", "--dir", dir, "--timeout", "90s").Output()
	if err != nil {
		t.Fatalf("kas wait: %v\nkas up stderr:\n%s", err, stderr())
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if got := strings.TrimSpace(string(out)); got != kubeconfig {
		t.Fatalf("kas wait printed %q, want %q", got, kubeconfig)
	}
	select {
	case line := <-lines:
		if line != kubeconfig {
			t.Fatalf("kas up printed %q, want %q", line, kubeconfig)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("kas up printed nothing\n%s", stderr())
	}

	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, configMap("up", "v0"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kids := harness.ChildrenOf(up.Process.Pid)
	if len(kids) != 1 {
		t.Fatalf("kas up has children %v, want one apiserver", kids)
	}

	t0 := time.Now()
	if err := up.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
		if waitErr != nil {
			t.Fatalf("kas up exited with %v\n%s", waitErr, stderr())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("kas up did not exit within 60s of SIGTERM")
	}
	t.Logf("kas up stopped in %s", time.Since(t0).Round(time.Millisecond))
	for _, pid := range kids {
		// Reparented to init after kas up exits, if it were still alive.
		if harness.ProcessAlive(pid) {
			t.Fatalf("apiserver %d still alive after kas up exited", pid)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "etcd-url")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("etcd-url left behind: %v", err)
	}
}
