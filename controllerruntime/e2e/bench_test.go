package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/boltinformer/boltinformer"
	boltcr "github.com/boltinformer/boltinformer/controllerruntime"
)

// childEnv selects a child mode of the test binary (TestMain).
const childEnv = "BOLTCR_E2E_CHILD"

// runChild runs the test binary as a child process of a test.
func runChild(mode string) int {
	switch mode {
	case "bench":
		if err := benchChild(); err != nil {
			fmt.Fprintln(os.Stderr, "bench child:", err)
			return 1
		}
		return 0
	case "durable":
		if err := durableChild(); err != nil {
			fmt.Fprintln(os.Stderr, "durable child:", err)
			return 1
		}
		return 0
	}
	fmt.Fprintf(os.Stderr, "unknown child mode %q\n", mode)
	return 2
}

// benchChild is the benchmark's operator: a manager over one kind in one
// namespace whose reconciler reads each object from the cache. It prints
// "synced <unix ns>" once the caches have synced, "reconciled <unix ns>"
// once every one of the BENCH_N objects has been reconciled, and stops on
// SIGTERM.
func benchChild() error {
	fmt.Printf("main %d\n", time.Now().UnixNano())
	ctrl.SetLogger(logr.Discard())
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("BENCH_KUBECONFIG"))
	if err != nil {
		return err
	}
	cfg.QPS = -1
	n, err := strconv.Atoi(os.Getenv("BENCH_N"))
	if err != nil {
		return err
	}
	ns := os.Getenv("BENCH_NS")
	var obj client.Object = &corev1.ConfigMap{}
	if os.Getenv("BENCH_KIND") == "pods" {
		obj = &corev1.Pod{}
	}
	opts := ctrl.Options{
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
	}
	var db *boltinformer.DB
	if path := os.Getenv("BENCH_CACHE"); path != "" {
		db, err = boltinformer.Open(path, nil)
		if err != nil {
			return err
		}
		bopts := &boltcr.Options{}
		switch os.Getenv("BENCH_POLICY") {
		case "diskload":
			bopts.SyncAfterDiskLoad = true
		case "fresh-list":
			bopts.FreshBookmarkWait = -1 // Fresh by a metadata list
		}
		opts.NewCache = boltcr.NewCache(db, bopts)
	}
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		return err
	}
	var seen sync.Map
	var count atomic.Int64
	all := make(chan struct{})
	err = ctrl.NewControllerManagedBy(mgr).For(obj).Complete(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		o := obj.DeepCopyObject().(client.Object)
		if err := mgr.GetClient().Get(ctx, req.NamespacedName, o); client.IgnoreNotFound(err) != nil {
			return reconcile.Result{}, err
		}
		if _, loaded := seen.LoadOrStore(req, true); !loaded {
			switch count.Add(1) {
			case 1:
				fmt.Printf("first %d\n", time.Now().UnixNano())
			case int64(n):
				close(all)
			}
		}
		return reconcile.Result{}, nil
	}))
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	// The informer exists before the manager starts (as with a field
	// index), so WaitForCacheSync waits for it.
	if _, err := mgr.GetCache().GetInformer(ctx, obj); err != nil {
		return err
	}
	if path := os.Getenv("BENCH_CPUPROFILE"); path != "" {
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer func() {
			pprof.StopCPUProfile()
			_ = f.Close()
		}()
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		return fmt.Errorf("caches not synced")
	}
	fmt.Printf("synced %d\n", time.Now().UnixNano())
	select {
	case <-all:
		fmt.Printf("reconciled %d\n", time.Now().UnixNano())
	case <-ctx.Done():
	}
	<-ctx.Done()
	err = <-done
	if db != nil {
		if cerr := db.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	fmt.Println("stopped")
	return err
}

// benchRun is one start of the benchmark's operator.
type benchRun struct {
	// From the process's start: main entered, caches synced, first and
	// last object reconciled.
	Main, Synced, First, Reconciled time.Duration
	APIServerCPU                    time.Duration // the apiserver's CPU meanwhile (gross)
	Traffic                         traffic       // its requests through the proxy until reconciled
}

// runBenchChild starts the benchmark's operator, waits until every
// object is reconciled, and stops it.
func runBenchChild(t *testing.T, p *proxy, kc, kind, ns string, n int, cachePath, policy string, idle float64) benchRun {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=bench", "BENCH_KUBECONFIG="+kc, "BENCH_KIND="+kind, "BENCH_NS="+ns,
		"BENCH_N="+strconv.Itoa(n), "BENCH_CACHE="+cachePath, "BENCH_POLICY="+policy)
	if dir := os.Getenv("BOLTINFORMER_BENCH_CR_PROFILE"); dir != "" {
		profiles.Add(1)
		name := fmt.Sprintf("%s-%s-%d.pprof", kind, strings.NewReplacer("/", "_", ".", "_").Replace(filepath.Base(cachePath)+"-"+policy), profiles.Load())
		cmd.Env = append(cmd.Env, "BENCH_CPUPROFILE="+filepath.Join(dir, name))
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	mark := p.mark()
	cpu0, err := cluster.APIServerCPU()
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	var r benchRun
	at := func(line, prefix string) time.Duration {
		ns, err := strconv.ParseInt(strings.TrimPrefix(line, prefix), 10, 64)
		if err != nil {
			t.Fatalf("child: %q: %v", line, err)
		}
		return time.Unix(0, ns).Sub(t0)
	}
	timeout := time.After(10 * time.Minute)
	for r.Reconciled == 0 {
		select {
		case line, ok := <-lines:
			switch {
			case !ok:
				t.Fatal("the benchmark's operator exited before reconciling every object")
			case strings.HasPrefix(line, "main "):
				r.Main = at(line, "main ")
			case strings.HasPrefix(line, "first "):
				r.First = at(line, "first ")
			case strings.HasPrefix(line, "synced "):
				r.Synced = at(line, "synced ")
			case strings.HasPrefix(line, "reconciled "):
				r.Reconciled = at(line, "reconciled ")
			}
		case <-timeout:
			_ = cmd.Process.Kill()
			t.Fatal("the benchmark's operator did not reconcile every object within 10 minutes")
		}
	}
	cpu1, err := cluster.APIServerCPU()
	if err != nil {
		t.Fatal(err)
	}
	// Gross: the apiserver's own background work (about idle per second,
	// logged) is in it, for a longer start more of it.
	r.APIServerCPU = cpu1 - cpu0
	r.Traffic = summarize(p.since(mark), "")
	if testing.Verbose() {
		for _, req := range p.since(mark) {
			if req.Resource == kind {
				t.Logf("  %s +%s", req, req.Start.Sub(t0).Round(time.Millisecond))
			}
		}
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	for range lines {
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the benchmark's operator: %v", err)
	}
	return r
}

// profiles numbers the CPU profiles of BOLTINFORMER_BENCH_CR_PROFILE.
var profiles atomic.Int64

// medianRun returns the median of each measure of rs.
func medianRun(rs []benchRun) benchRun {
	med := func(f func(benchRun) time.Duration) time.Duration {
		v := make([]time.Duration, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	byReconciled := slices.Clone(rs)
	slices.SortFunc(byReconciled, func(a, b benchRun) int { return int(a.Reconciled - b.Reconciled) })
	m := byReconciled[len(rs)/2]
	m.Main = med(func(r benchRun) time.Duration { return r.Main })
	m.Synced = med(func(r benchRun) time.Duration { return r.Synced })
	m.First = med(func(r benchRun) time.Duration { return r.First })
	m.APIServerCPU = med(func(r benchRun) time.Duration { return r.APIServerCPU })
	m.Traffic.Bytes = int64(med(func(r benchRun) time.Duration { return time.Duration(r.Traffic.Bytes) }))
	return m
}

func logRun(t *testing.T, kind string, n int, name string, m benchRun) {
	t.Helper()
	t.Logf("%s %d %s: main %s, synced %s, first reconciled %s, all reconciled %s, apiserver CPU %s, %s read, %+v", kind, n, name,
		m.Main.Round(time.Millisecond), m.Synced.Round(time.Millisecond), m.First.Round(time.Millisecond), m.Reconciled.Round(time.Millisecond),
		m.APIServerCPU.Round(time.Millisecond), mib(m.Traffic.Bytes), m.Traffic)
}

// idleCPU returns the apiserver's CPU per second of wall time while
// nobody uses it.
func idleCPU(t *testing.T) float64 {
	c0, err := cluster.APIServerCPU()
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	time.Sleep(3 * time.Second)
	c1, err := cluster.APIServerCPU()
	if err != nil {
		t.Fatal(err)
	}
	return float64(c1-c0) / float64(time.Since(t0))
}

func seedBench(t *testing.T, cs kubernetes.Interface, kind, ns string, n int) {
	t.Helper()
	start := time.Now()
	err := parallel(context.Background(), n, 32, func(ctx context.Context, i int) error {
		var err error
		if kind == "pods" {
			_, err = cs.CoreV1().Pods(ns).Create(ctx, benchPod(ns, i), metav1.CreateOptions{})
		} else {
			_, err = cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("cm-%05d", i), Labels: map[string]string{"app": "bench", "shard": fmt.Sprint(i % 16)}},
				Data:       map[string]string{"config.yaml": strings.Repeat(fmt.Sprintf("key-%05d: value\n", i), 60)},
			}, metav1.CreateOptions{})
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("created %d %s in %s", n, kind, time.Since(start).Round(time.Second))
}

func benchPod(ns string, i int) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("p-%05d", i),
			Labels: map[string]string{"app": "bench", "pod-template-hash": "5d8f7c9b4"}},
		Spec: corev1.PodSpec{
			NodeName: fmt.Sprintf("node-%d", i%100),
			Containers: []corev1.Container{{
				Name: "app", Image: "registry.example/app:1.2.3",
				Args:  []string{"--port=8080", "--log-level=info"},
				Env:   []corev1.EnvVar{{Name: "POD_INDEX", Value: fmt.Sprint(i)}, {Name: "MODE", Value: "bench"}},
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
				},
			}},
		},
	}
}

// TestBenchmarkStartup (BOLTINFORMER_BENCH_CR=1): stock controller-runtime
// against NewCache, side by side in one run, 10k ConfigMaps and 10k Pods:
// the time from the operator process's start until its caches have synced
// and until every object has been reconciled once, the apiserver's CPU
// (net of idle) and the bytes it served (decoded), median of
// BOLTINFORMER_BENCH_CR_RUNS interleaved runs (default 5). BOLTINFORMER_BENCH_LARGE=1
// adds 100k.
func TestBenchmarkStartup(t *testing.T) {
	if os.Getenv("BOLTINFORMER_BENCH_CR") == "" {
		t.Skip("BOLTINFORMER_BENCH_CR=1 runs the controller-runtime startup benchmark")
	}
	runs := 5
	if s := os.Getenv("BOLTINFORMER_BENCH_CR_RUNS"); s != "" {
		var err error
		if runs, err = strconv.Atoi(s); err != nil || runs < 1 {
			t.Fatalf("BOLTINFORMER_BENCH_CR_RUNS=%q", s)
		}
	}
	sizes := []int{10_000}
	if os.Getenv("BOLTINFORMER_BENCH_LARGE") != "" {
		sizes = append(sizes, 100_000)
	}
	cs := clientset(t)
	p := newProxy(t)
	dir := t.TempDir()
	kc := p.kubeconfig(t, dir)
	var report strings.Builder
	fmt.Fprintf(&report, "| objects | start | synced | all reconciled | apiserver CPU | bytes read | full LISTs / metadata LISTs / one-object reads | vs stock: time to reconciled | vs stock: CPU | vs stock: bytes |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, n := range sizes {
		kinds := []string{"configmaps", "pods"}
		if s := os.Getenv("BOLTINFORMER_BENCH_CR_KINDS"); s != "" {
			kinds = strings.Split(s, ",")
		}
		for _, kind := range kinds {
			ns := newNamespace(t, cs, "bench-"+kind)
			seedBench(t, cs, kind, ns, n)
			idle := idleCPU(t)
			t.Logf("apiserver idle CPU: %.0f ms per second", idle*1000)
			path := filepath.Join(dir, fmt.Sprintf("%s-%d.db", kind, n))
			// The variants take turns, round after round, so that the
			// machine's load (shared here) weighs on each alike; the
			// cold start is first (it writes the file).
			type variant struct {
				name, cachePath, policy string
				runs                    []benchRun
			}
			vs := []*variant{{name: "stock controller-runtime"}, {name: "boltcr warm (Fresh)", cachePath: path, policy: "fresh"},
				{name: "boltcr warm (Fresh by metadata list)", cachePath: path, policy: "fresh-list"},
				{name: "boltcr warm (disk load)", cachePath: path, policy: "diskload"}}
			cold := runBenchChild(t, p, kc, kind, ns, n, path, "fresh", idle)
			logRun(t, kind, n, "boltcr cold", cold)
			for range runs {
				for _, v := range vs {
					r := runBenchChild(t, p, kc, kind, ns, n, v.cachePath, v.policy, idle)
					logRun(t, kind, n, v.name, r)
					v.runs = append(v.runs, r)
				}
			}
			stock, fresh, freshList, disk := medianRun(vs[0].runs), medianRun(vs[1].runs), medianRun(vs[2].runs), medianRun(vs[3].runs)
			for _, v := range vs {
				logRun(t, kind, n, v.name+" (median)", medianRun(v.runs))
			}
			for _, row := range []struct {
				name string
				r    benchRun
			}{{"stock controller-runtime", stock}, {"boltcr cold", cold}, {"boltcr warm, Fresh (bookmark)", fresh},
				{"boltcr warm, Fresh by metadata list", freshList}, {"boltcr warm, disk load", disk}} {
				fmt.Fprintf(&report, "| %d %s | %s | %s | %s | %s | %s | %d / %d / %d | %s | %s | %s |\n", n, kind, row.name,
					row.r.Synced.Round(time.Millisecond), row.r.Reconciled.Round(time.Millisecond), row.r.APIServerCPU.Round(time.Millisecond),
					mib(row.r.Traffic.Bytes), row.r.Traffic.FullLists, row.r.Traffic.MetadataLists, row.r.Traffic.MetadataReads,
					ratio(float64(row.r.Reconciled), float64(stock.Reconciled)), ratio(float64(row.r.APIServerCPU), float64(stock.APIServerCPU)),
					ratio(float64(row.r.Traffic.Bytes), float64(stock.Traffic.Bytes)))
			}
			for _, target := range []struct {
				what      string
				got, want float64
			}{
				{"warm (Fresh) time to all reconciled vs stock", float64(fresh.Reconciled) / float64(stock.Reconciled), 1.0 / 3},
				{"warm (Fresh) apiserver bytes vs stock", float64(fresh.Traffic.Bytes) / float64(stock.Traffic.Bytes), 0.5},
				{"warm (Fresh) apiserver CPU vs stock", float64(fresh.APIServerCPU) / float64(stock.APIServerCPU), 0.5},
				{"warm (disk load) apiserver bytes vs stock", float64(disk.Traffic.Bytes) / float64(stock.Traffic.Bytes), 0.1},
				{"warm (disk load) apiserver CPU vs stock", float64(disk.APIServerCPU) / float64(stock.APIServerCPU), 0.1},
			} {
				verdict := "met"
				if target.got > target.want {
					verdict = "MISSED"
				}
				t.Logf("target %s %d: %s: %.3f (target at most %.3f): %s", kind, n, target.what, target.got, target.want, verdict)
			}
		}
	}
	t.Logf("controller-runtime startup, stock vs boltcr (median of %d interleaved runs):\n%s", runs, report.String())
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func ratio(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", a/b)
}
