package localapi

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// pythonClient is the script TestPythonClient runs with Debian's
// python3-kubernetes: a list, then a watch from its resourceVersion, as
// JSON lines.
const pythonClient = `
import json, sys
from kubernetes import client, config, watch
config.load_kube_config(config_file=sys.argv[1])
v1 = client.CoreV1Api()
pods = v1.list_namespaced_pod(sys.argv[2])
print(json.dumps({"names": sorted(p.metadata.name for p in pods.items), "rv": pods.metadata.resource_version}), flush=True)
for ev in watch.Watch().stream(v1.list_namespaced_pod, sys.argv[2], resource_version=pods.metadata.resource_version, timeout_seconds=120):
    print(json.dumps({"type": ev["type"], "name": ev["object"].metadata.name, "rv": ev["object"].metadata.resource_version}), flush=True)
`

// python is Debian's interpreter, the one python3-kubernetes installs
// for (a python3 first on PATH, e.g. pyenv's, does not see it).
func python() string {
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		return "/usr/bin/python3"
	}
	return "python3"
}

// ensurePython makes Debian's python3-kubernetes importable, installing
// it with apt-get when missing and running as root (CI); else the test is
// skipped, loudly.
func ensurePython(t *testing.T) {
	t.Helper()
	if exec.Command(python(), "-c", "import kubernetes").Run() == nil {
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED LOUDLY: python3-kubernetes is not installed and this is not root: apt-get install python3-kubernetes")
	}
	for _, args := range [][]string{{"update"}, {"install", "-y", "--no-install-recommends", "python3-kubernetes"}} {
		cmd := exec.Command("apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Skipf("SKIPPED LOUDLY: apt-get %s failed: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	if out, err := exec.Command(python(), "-c", "import kubernetes").CombinedOutput(); err != nil {
		t.Fatalf("python3-kubernetes installed but not importable: %v\n%s", err, out)
	}
}

// TestPythonClient: Python's kubernetes client lists and watches through
// the local API; the list and every event are the apiserver's.
func TestPythonClient(t *testing.T) {
	ensurePython(t)
	cs, err := cluster.Clientset()
	if err != nil {
		t.Fatal(err)
	}
	ns := seed(t, cs, "python", 6)
	dir := t.TempDir()
	a := startAgent(t, dir, "", 0)
	waitFor(t, "the agent to have the pods", func() bool { return countPods(t, a, ns) == 6 })
	script := filepath.Join(dir, "client.py")
	if err := os.WriteFile(script, []byte(pythonClient), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python(), script, a.kubeconfig, ns)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
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
	first := next()
	want, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range want.Items {
		names = append(names, p.Name)
	}
	if fmt.Sprint(first["names"]) != fmt.Sprint(toAny(names)) || first["rv"] == "" {
		t.Fatalf("Python's list %v, the apiserver's %v", first, names)
	}
	// Changes on the apiserver: the Python client sees each, with the
	// apiserver's resourceVersions.
	w, err := cs.CoreV1().Pods(ns).Watch(context.Background(), metav1.ListOptions{ResourceVersion: want.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	ctx := context.Background()
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, testPod(50), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods(ns).Patch(ctx, "pod-00001", types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().Pods(ns).Delete(ctx, "pod-00002", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		e := <-w.ResultChan()
		m, _ := meta.Accessor(e.Object)
		got := next()
		if got["type"] != string(e.Type) || got["name"] != m.GetName() || got["rv"] != m.GetResourceVersion() {
			t.Fatalf("event %d: Python saw %v, the apiserver sent %s %s@%s", i, got, e.Type, m.GetName(), m.GetResourceVersion())
		}
	}
}

func toAny(s []string) []any {
	sort.Strings(s)
	out := make([]any, len(s))
	for i, v := range s {
		out[i] = v
	}
	return out
}

// countPods counts the Pods of ns the agent's local API lists (-1 on an
// error).
func countPods(t testing.TB, a *agentProc, ns string) int {
	cs := agentClient(t, a)
	l, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return -1
	}
	return len(l.Items)
}

func agentClient(t testing.TB, a *agentProc) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", a.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS = -1
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// journal records an informer's Pod events of one namespace, in order.
type journal struct {
	mu     sync.Mutex
	events []string
}

func (j *journal) handler(ns string) cache.ResourceEventHandler {
	rec := func(kind string, obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
			kind += "-unknown"
		}
		m, err := meta.Accessor(obj)
		if err != nil || m.GetNamespace() != ns {
			return
		}
		j.mu.Lock()
		j.events = append(j.events, fmt.Sprintf("%s %s@%s", kind, m.GetName(), m.GetResourceVersion()))
		j.mu.Unlock()
	}
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			if !initial {
				rec("ADD", obj)
			}
		},
		UpdateFunc: func(old, obj any) {
			om, _ := meta.Accessor(old)
			nm, _ := meta.Accessor(obj)
			if om.GetResourceVersion() != nm.GetResourceVersion() {
				rec("UPDATE", obj)
			}
		},
		DeleteFunc: func(obj any) { rec("DELETE", obj) },
	}
}

func (j *journal) snapshot() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.events)
}

// startInformer runs client-go's shared informer factory's Pod informer on
// cs until the test ends, recording ns's events.
func startInformer(t testing.TB, cs kubernetes.Interface, ns string) (cache.SharedIndexInformer, *journal) {
	t.Helper()
	f := informers.NewSharedInformerFactory(cs, 0)
	inf := f.Core().V1().Pods().Informer()
	j := &journal{}
	if _, err := inf.AddEventHandler(j.handler(ns)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.Start(ctx.Done())
	t.Cleanup(func() { cancel(); f.Shutdown() })
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("informer did not sync")
	}
	return inf, j
}

func podState(inf cache.SharedIndexInformer, ns string) string {
	var out []string
	for _, o := range inf.GetStore().List() {
		p := o.(*corev1.Pod)
		if p.Namespace == ns {
			out = append(out, p.Name+"@"+p.ResourceVersion)
		}
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// lastDeleted is the index (from 0; Pod 1000+index) of the last Pod
// change(from, n) deletes.
func lastDeleted(from, n int) int {
	for i := from + n - 1; i >= from; i-- {
		if i%4 == 3 {
			return i - 3
		}
	}
	return -1
}

// change makes n changes to ns's Pods on the apiserver: creates, label
// patches and deletes.
func change(t testing.TB, cs kubernetes.Interface, ns string, from, n int) {
	t.Helper()
	ctx := context.Background()
	for i := from; i < from+n; i++ {
		var err error
		switch i % 4 {
		case 0, 1:
			_, err = cs.CoreV1().Pods(ns).Create(ctx, testPod(1000+i), metav1.CreateOptions{})
		case 2:
			_, err = cs.CoreV1().Pods(ns).Patch(ctx, fmt.Sprintf("pod-%05d", i%10), types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"labels":{"gen":"%d"}}}`, i)), metav1.PatchOptions{})
		case 3:
			err = cs.CoreV1().Pods(ns).Delete(ctx, fmt.Sprintf("pod-%05d", 1000+i-3), metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestWatchAcrossAgentRestart: client-go's informer watches the agent's
// local API while the agent stops (SIGTERM) and restarts warm on the same
// address, with changes on the apiserver before, during and after. The
// client resumes from its resourceVersion, sees every event an informer of
// the apiserver itself sees, in the same order, and ends with the
// apiserver's state.
func TestWatchAcrossAgentRestart(t *testing.T) {
	cs, err := cluster.Clientset()
	if err != nil {
		t.Fatal(err)
	}
	ns := seed(t, cs, "restart", 10)
	ref, refJ := startInformer(t, cs, ns)
	dir := t.TempDir()
	a := startAgent(t, dir, "", 0)
	waitFor(t, "the agent to have the pods", func() bool { return countPods(t, a, ns) == 10 })
	client, clientJ := startInformer(t, agentClient(t, a), ns)
	// converged waits for the last event of change(from, n) too: a Pod
	// deleted with grace 0 is an UPDATE (its deletionTimestamp), then the
	// DELETE; both informers at the UPDATE looked converged, and an agent
	// stopped then had the DELETE in its file but not its client, which
	// got 410 after the restart and relisted.
	converged := func(from, n int) func() bool {
		last := fmt.Sprintf("DELETE pod-%05d@", 1000+lastDeleted(from, n))
		return func() bool {
			events := refJ.snapshot()
			return len(events) > 0 && strings.HasPrefix(events[len(events)-1], last) &&
				podState(client, ns) == podState(ref, ns) && len(clientJ.snapshot()) == len(events)
		}
	}
	change(t, cs, ns, 0, 20)
	waitFor(t, "the client to converge", converged(0, 20))
	a.stop(t)
	change(t, cs, ns, 20, 20) // while the agent is down
	a = startAgent(t, dir, a.addr, 0)
	change(t, cs, ns, 40, 20)
	waitFor(t, "the client to converge after the restart", converged(40, 20))
	if got, want := clientJ.snapshot(), refJ.snapshot(); !slices.Equal(got, want) {
		t.Fatalf("through the local API:\n%v\nfrom the apiserver:\n%v", got, want)
	}
	t.Logf("%d events seen in the apiserver's order through the local API, across a restart", len(refJ.snapshot()))
}
