package e2e

import (
	"context"
	"errors"
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
	"k8s.io/client-go/kubernetes"
)

var (
	buildOnce   sync.Once
	buildDir    string
	operatorBin string
	buildErr    error
)

// operatorBinary builds examples/operator once per test binary.
func operatorBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "boltcr-e2e-")
		if buildErr != nil {
			return
		}
		operatorBin = filepath.Join(buildDir, "operator")
		cmd := exec.Command("go", "build", "-o", operatorBin, ".")
		cmd.Dir = filepath.Join("..", "..", "examples", "operator")
		cmd.Env = append(os.Environ(), "GOWORK=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("building examples/operator: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return operatorBin
}

// cleanupBuilds removes what operatorBinary built.
func cleanupBuilds() {
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
}

// process is a child process (an operator).
type process struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

// startProcess runs bin with args; its output goes to a log file of dir.
func startProcess(t testing.TB, dir, name string, env []string, bin string, args ...string) *process {
	t.Helper()
	logPath := filepath.Join(dir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		t.Fatal(err)
	}
	p := &process{cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = f.Close()
		close(p.done)
	}()
	t.Cleanup(func() { p.signal(t, syscall.SIGKILL) })
	return p
}

// signal sends sig and waits for the process to exit.
func (p *process) signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	select {
	case <-p.done:
		return
	default:
	}
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("signal %v: %v", sig, err)
	}
	select {
	case <-p.done:
	case <-time.After(waitTimeout):
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Errorf("the process did not exit after %v", sig)
	}
}

// logText returns the process's log.
func (p *process) logText(t testing.TB) string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// listCounter counts the LISTs a test makes itself, so that the
// apiserver's count can be checked against the proxy's.
type listCounter struct{ n int }

func (l *listCounter) state(t testing.TB, cs kubernetes.Interface, ns string, total int, c churn) string {
	l.n++
	return derivedState(t, cs, ns, total, c)
}

func apiserverLists(t testing.TB, resource string) float64 {
	t.Helper()
	n, err := cluster.RequestCount(context.Background(), "LIST", resource)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// apiserverWatchEvents returns the watch events (bookmarks included) the
// apiserver has sent of a resource, from its metrics.
func apiserverWatchEvents(t testing.TB, resource string) float64 {
	t.Helper()
	n, err := cluster.MetricSum(context.Background(), "apiserver_watch_events_total", map[string]string{"resource": resource})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestOperatorKillAndRestart runs the example operator (the binary, as a
// user builds it) against the real apiserver: a cold start over 500
// sources; changes and a kill -9 right after them; deletes, updates and
// creates while it is down; a warm restart; then a clean stop (SIGTERM),
// more changes and a warm restart again. After each start every change is
// reconciled (the derived objects on the server say so, deletes
// included), the restarts list no ConfigMap in full (the proxy's record),
// every LIST the apiserver counted is accounted for, and it sent fewer
// watch events than there are sources (no WatchList's initial events; its
// metrics). It runs twice: as is, and with -durable-queue (the
// controller's queue in the file, boltcr.NewQueue), whose warm restarts
// resume the queue from its checkpoint.
func TestOperatorKillAndRestart(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flags []string
	}{{"stock queue", nil}, {"durable queue", []string{"--durable-queue"}}} {
		t.Run(tc.name, func(t *testing.T) { testOperatorKillAndRestart(t, tc.flags) })
	}
}

func testOperatorKillAndRestart(t *testing.T, flags []string) {
	const sources = 500
	bin := operatorBinary(t)
	cs := clientset(t)
	ns := newNamespace(t, cs, "operator")
	seedSources(t, cs, ns, sources)
	p := newProxy(t)
	dir := t.TempDir()
	kc := p.kubeconfig(t, dir)
	cacheFile := filepath.Join(dir, "cache.db")
	args := append([]string{"--kubeconfig", kc, "--cache-file", cacheFile, "--namespace", ns}, flags...)
	durable := len(flags) > 0
	lc := &listCounter{}

	// Cold start.
	op := startProcess(t, dir, "operator-1", nil, bin, args...)
	if !eventually(waitTimeout, func() bool { return lc.state(t, cs, ns, sources, churn{}) == "" }) {
		t.Fatalf("cold start: %s\n%s", derivedState(t, cs, ns, sources, churn{}), op.logText(t))
	}

	// Changes, then kill -9 at once: some are reconciled and committed,
	// some not.
	var running churn
	for i := range 50 {
		running.updated = append(running.updated, i)
	}
	cms := cs.CoreV1().ConfigMaps(ns)
	if err := parallel(context.Background(), 50, 8, func(ctx context.Context, i int) error {
		_, err := cms.Update(ctx, source(ns, i, 1), metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	op.signal(t, syscall.SIGKILL)
	down := churn{}
	for i := range 30 {
		down.deleted = append(down.deleted, 100+i)
		down.updated = append(down.updated, 130+i)
		down.created = append(down.created, sources+i)
	}
	down.apply(t, cs, ns)
	want := churn{deleted: down.deleted, updated: append(append([]int(nil), running.updated...), down.updated...), created: down.created}
	total := sources + len(down.created)

	restart := func(name string, want churn) {
		t.Helper()
		mark, lists0, own0 := p.mark(), apiserverLists(t, "configmaps"), lc.n
		events0 := apiserverWatchEvents(t, "configmaps")
		op := startProcess(t, dir, name, nil, bin, args...)
		if !eventually(waitTimeout, func() bool { return lc.state(t, cs, ns, total, want) == "" }) {
			t.Fatalf("%s: %s\n%s", name, derivedState(t, cs, ns, total, want), op.logText(t))
		}
		log := op.logText(t)
		if !strings.Contains(log, "Warm start from cache file") || strings.Contains(log, "Cold start") {
			t.Errorf("%s did not start warm:\n%s", name, log)
		}
		if resumed := strings.Contains(log, "The controller's queue resumes from its checkpoint"); resumed != durable {
			t.Errorf("%s: the controller's queue resumed from a checkpoint: %v, want %v:\n%s", name, resumed, durable, log)
		}
		tr := summarize(p.since(mark), "configmaps")
		lists := apiserverLists(t, "configmaps") - lists0
		t.Logf("%s: configmaps requests through the proxy %+v; apiserver LISTs %v (the test's own %d)", name, tr, lists, lc.n-own0)
		if tr.FullLists != 0 {
			t.Errorf("%s listed ConfigMaps in full: %v", name, p.since(mark))
		}
		// A WatchList would send every source as an initial event; the
		// resumed watch sends the changes and the operator's own writes.
		if events := apiserverWatchEvents(t, "configmaps") - events0; events >= float64(total) {
			t.Errorf("%s: the apiserver sent %v watch events of configmaps, as many as the %d sources: initial events?", name, events, total)
		} else {
			t.Logf("%s: the apiserver sent %v watch events of configmaps (%d sources)", name, events, total)
		}
		if want := float64(tr.MetadataLists + tr.MetadataReads + tr.ExactReads + lc.n - own0); lists != want {
			t.Errorf("%s: the apiserver counted %v LISTs of configmaps; the proxy saw %d metadata lists, %d one-object metadata reads and %d exact reads, the test made %d", name, lists, tr.MetadataLists, tr.MetadataReads, tr.ExactReads, lc.n-own0)
		}
		op.signal(t, syscall.SIGTERM)
		if op.err != nil {
			t.Errorf("%s exited with %v after SIGTERM:\n%s", name, op.err, op.logText(t))
		}
	}
	restart("operator-2", want) // after kill -9

	// A clean stop (restart's SIGTERM), more changes, a warm start again.
	more := churn{}
	for i := range 20 {
		more.deleted = append(more.deleted, 200+i)
		more.updated = append(more.updated, 220+i)
		more.created = append(more.created, total+i)
	}
	more.apply(t, cs, ns)
	total += len(more.created)
	want.deleted = append(want.deleted, more.deleted...)
	want.updated = append(want.updated, more.updated...)
	want.created = append(want.created, more.created...)
	restart("operator-3", want)
}
