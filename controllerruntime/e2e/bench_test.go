package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
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
// "synced <unix ns>" once the caches have synced, "changed <unix ns>" once
// every object named in BENCH_CHANGED_FILE (changed while it was down)
// has been reconciled, "reconciled <unix ns>" once every one of the
// BENCH_N objects has, and, with BENCH_DURABLE (a durable queue,
// boltcr.NewQueue), "idle <unix ns>" once the changed ones have and its
// queue has nothing left to do. It stops on SIGTERM, printing "count
// <reconciles>".
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
	changed := map[string]bool{}
	if path := os.Getenv("BENCH_CHANGED_FILE"); path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, name := range strings.Fields(string(b)) {
			changed[ns+"/"+name] = true
		}
	}
	var changedLeft atomic.Int64
	changedLeft.Store(int64(len(changed)))
	changedDone := make(chan struct{})
	if len(changed) == 0 {
		close(changedDone)
	}
	var queue atomic.Pointer[boltcr.Queue]
	bld := ctrl.NewControllerManagedBy(mgr).For(obj)
	if os.Getenv("BENCH_DURABLE") != "" {
		if db == nil {
			return fmt.Errorf("BENCH_DURABLE needs BENCH_CACHE")
		}
		newQueue := boltcr.NewQueue(db, nil)
		bld = bld.WithOptions(controller.Options{NewQueue: func(name string, rl workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
			q := newQueue(name, rl)
			queue.Store(q.(*boltcr.Queue))
			return q
		}})
	}
	var seen, seenChanged sync.Map
	var count, total atomic.Int64
	all := make(chan struct{})
	err = bld.Complete(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		total.Add(1)
		o := obj.DeepCopyObject().(client.Object)
		if err := mgr.GetClient().Get(ctx, req.NamespacedName, o); client.IgnoreNotFound(err) != nil {
			return reconcile.Result{}, err
		}
		if changed[req.String()] {
			if _, loaded := seenChanged.LoadOrStore(req, true); !loaded && changedLeft.Add(-1) == 0 {
				fmt.Printf("changed %d\n", time.Now().UnixNano())
				close(changedDone)
			}
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
	if os.Getenv("BENCH_DURABLE") != "" {
		go func() {
			select {
			case <-changedDone:
			case <-ctx.Done():
				return
			}
			for ctx.Err() == nil {
				if d := queue.Load(); d != nil && d.Started() && d.Busy() == 0 {
					fmt.Printf("idle %d\n", time.Now().UnixNano())
					return
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	select {
	case <-all:
		fmt.Printf("reconciled %d\n", time.Now().UnixNano())
	case <-ctx.Done():
	}
	<-ctx.Done()
	err = <-done
	fmt.Printf("count %d\n", total.Load())
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
	// Changed: every object changed while down reconciled; Idle: a
	// durable queue's work done (its run ends there).
	Changed, Idle time.Duration
	// Reconciles is how many reconciles the run made in all (until
	// every object was reconciled, or until idle).
	Reconciles   int
	APIServerCPU time.Duration // the apiserver's CPU meanwhile (gross)
	Traffic      traffic       // its requests through the proxy until reconciled
}

// benchOpts are a run's changes while down and its queue.
type benchOpts struct {
	changed []string // names of the objects changed while it was down
	durable bool     // a durable queue (boltcr.NewQueue)
}

// runBenchChild starts the benchmark's operator, waits until every
// object is reconciled, and stops it.
func runBenchChild(t *testing.T, p *proxy, kc, kind, ns string, n int, cachePath, policy string, bo benchOpts) benchRun {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=bench", "BENCH_KUBECONFIG="+kc, "BENCH_KIND="+kind, "BENCH_NS="+ns,
		"BENCH_N="+strconv.Itoa(n), "BENCH_CACHE="+cachePath, "BENCH_POLICY="+policy)
	if len(bo.changed) > 0 {
		f := filepath.Join(t.TempDir(), "changed")
		if err := os.WriteFile(f, []byte(strings.Join(bo.changed, "\n")), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd.Env = append(cmd.Env, "BENCH_CHANGED_FILE="+f)
	}
	if bo.durable {
		cmd.Env = append(cmd.Env, "BENCH_DURABLE=1")
	}
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
	finished := func() bool {
		if bo.durable {
			return r.Idle != 0
		}
		return r.Reconciled != 0
	}
	for !finished() {
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
			case strings.HasPrefix(line, "changed "):
				r.Changed = at(line, "changed ")
			case strings.HasPrefix(line, "idle "):
				r.Idle = at(line, "idle ")
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
	for line := range lines {
		if c, ok := strings.CutPrefix(line, "count "); ok {
			r.Reconciles, _ = strconv.Atoi(c)
		}
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
	m.Changed = med(func(r benchRun) time.Duration { return r.Changed })
	m.Idle = med(func(r benchRun) time.Duration { return r.Idle })
	m.Reconciles = int(med(func(r benchRun) time.Duration { return time.Duration(r.Reconciles) }))
	m.APIServerCPU = med(func(r benchRun) time.Duration { return r.APIServerCPU })
	m.Traffic.Bytes = int64(med(func(r benchRun) time.Duration { return time.Duration(r.Traffic.Bytes) }))
	return m
}

func logRun(t *testing.T, kind string, n int, name string, m benchRun) {
	t.Helper()
	t.Logf("%s %d %s: main %s, synced %s, first reconciled %s, changed reconciled %s, all reconciled %s, idle %s, %d reconciles, apiserver CPU %s, %s read, %+v", kind, n, name,
		m.Main.Round(time.Millisecond), m.Synced.Round(time.Millisecond), m.First.Round(time.Millisecond), m.Changed.Round(time.Millisecond),
		m.Reconciled.Round(time.Millisecond), m.Idle.Round(time.Millisecond), m.Reconciles,
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
// against NewCache, side by side in one run, 10k ConfigMaps and 10k Pods,
// 1% of them changed while the operator is down before each start: the
// time from the operator process's start until its caches have synced,
// until every changed object has been reconciled and until every object
// has been reconciled once, how many reconciles that took, the apiserver's
// CPU (gross) and the bytes it served (decoded), median of
// BOLTINFORMER_BENCH_CR_RUNS interleaved runs (default 5). The durable
// queue (boltcr.NewQueue) runs on a file of its own and ends once its
// work is done (it does not reconcile the unchanged objects).
// BOLTINFORMER_BENCH_LARGE=1 adds 100k; BOLTINFORMER_BENCH_CR_N sets one
// size instead.
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
	if s := os.Getenv("BOLTINFORMER_BENCH_CR_N"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 100 {
			t.Fatalf("BOLTINFORMER_BENCH_CR_N=%q (at least 100)", s)
		}
		sizes = []int{n}
	}
	if la, err := os.ReadFile("/proc/loadavg"); err == nil {
		t.Logf("load average at the start: %s", strings.TrimSpace(string(la)))
	}
	cs := clientset(t)
	p := newProxy(t)
	dir := t.TempDir()
	kc := p.kubeconfig(t, dir)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 24))
	var report strings.Builder
	fmt.Fprintf(&report, "| objects | start | synced | changed reconciled | all reconciled | reconciles | apiserver CPU | bytes read | full LISTs / metadata LISTs / one-object reads | vs stock: time to changed reconciled | vs stock: time to all reconciled | vs stock: reconciles | vs stock: CPU | vs stock: bytes |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
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
			file := func(v string) string { return filepath.Join(dir, fmt.Sprintf("%s-%d-%s.db", kind, n, v)) }
			// The variants take turns, round after round, so that the
			// machine's load (shared here) weighs on each alike; the
			// cold starts are first (they write the files). Each variant
			// has a file of its own, and 1% of the objects change before
			// each round: each variant starts with those changed since
			// its last run.
			type variant struct {
				name, cachePath, policy string
				durable                 bool
				runs                    []benchRun
			}
			vs := []*variant{{name: "stock controller-runtime"}, {name: "boltcr warm (Fresh)", cachePath: file("fresh"), policy: "fresh"},
				{name: "boltcr warm (Fresh by metadata list)", cachePath: file("fresh-list"), policy: "fresh-list"},
				{name: "boltcr warm (disk load)", cachePath: file("diskload"), policy: "diskload"},
				{name: "boltcr warm, durable queue", cachePath: file("durable"), policy: "fresh", durable: true},
				{name: "boltcr warm, durable queue, disk load", cachePath: file("durable-diskload"), policy: "diskload", durable: true}}
			var cold benchRun
			for i, v := range vs[1:] {
				r := runBenchChild(t, p, kc, kind, ns, n, v.cachePath, "fresh", benchOpts{durable: v.durable})
				logRun(t, kind, n, "boltcr cold ("+v.name+"'s file)", r)
				if i == 0 {
					cold = r
				}
			}
			for range runs {
				changed := changeBench(t, cs, rng, kind, ns, n, n/100)
				for _, v := range vs {
					r := runBenchChild(t, p, kc, kind, ns, n, v.cachePath, v.policy, benchOpts{changed: changed, durable: v.durable})
					logRun(t, kind, n, v.name, r)
					v.runs = append(v.runs, r)
				}
			}
			stock, fresh, freshList, disk, durable, durableDisk := medianRun(vs[0].runs), medianRun(vs[1].runs), medianRun(vs[2].runs), medianRun(vs[3].runs), medianRun(vs[4].runs), medianRun(vs[5].runs)
			for _, v := range vs {
				logRun(t, kind, n, v.name+" (median)", medianRun(v.runs))
			}
			dur := func(d time.Duration) string {
				if d == 0 {
					return "-"
				}
				return d.Round(time.Millisecond).String()
			}
			for _, row := range []struct {
				name string
				r    benchRun
			}{{"stock controller-runtime", stock}, {"boltcr cold", cold}, {"boltcr warm, Fresh (bookmark)", fresh},
				{"boltcr warm, Fresh by metadata list", freshList}, {"boltcr warm, disk load", disk}, {"boltcr warm, durable queue (NewQueue)", durable},
				{"boltcr warm, durable queue, disk load", durableDisk}} {
				allRatio := "-"
				if row.r.Reconciled != 0 {
					allRatio = ratio(float64(row.r.Reconciled), float64(stock.Reconciled))
				}
				fmt.Fprintf(&report, "| %d %s | %s | %s | %s | %s | %d | %s | %s | %d / %d / %d | %s | %s | %s | %s | %s |\n", n, kind, row.name,
					dur(row.r.Synced), dur(row.r.Changed), dur(row.r.Reconciled), row.r.Reconciles, dur(row.r.APIServerCPU),
					mib(row.r.Traffic.Bytes), row.r.Traffic.FullLists, row.r.Traffic.MetadataLists, row.r.Traffic.MetadataReads,
					ratio(float64(row.r.Changed), float64(stock.Changed)), allRatio, ratio(float64(row.r.Reconciles), float64(stock.Reconciles)),
					ratio(float64(row.r.APIServerCPU), float64(stock.APIServerCPU)), ratio(float64(row.r.Traffic.Bytes), float64(stock.Traffic.Bytes)))
			}
			for _, target := range []struct {
				what      string
				got, want float64
			}{
				{"warm (Fresh) time to changed reconciled vs stock", float64(fresh.Changed) / float64(stock.Changed), 1.0 / 5},
				{"warm (Fresh) time to all reconciled vs stock", float64(fresh.Reconciled) / float64(stock.Reconciled), 1},
				{"durable queue reconciles at the warm start vs stock", float64(durable.Reconciles) / float64(stock.Reconciles), 0.02},
				{"durable queue time to changed reconciled vs stock", float64(durable.Changed) / float64(stock.Changed), 1.0 / 5},
				{"warm (disk load) time to changed reconciled vs stock", float64(disk.Changed) / float64(stock.Changed), 1.0 / 5},
				{"durable queue, disk load, reconciles at the warm start vs stock", float64(durableDisk.Reconciles) / float64(stock.Reconciles), 0.02},
				{"durable queue, disk load, time to changed reconciled vs stock", float64(durableDisk.Changed) / float64(stock.Changed), 1.0 / 5},
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
	if la, err := os.ReadFile("/proc/loadavg"); err == nil {
		t.Logf("load average at the end: %s", strings.TrimSpace(string(la)))
	}
	t.Logf("controller-runtime startup, stock vs boltcr, %d%% changed while down before each start (median of %d interleaved runs):\n%s", 1, runs, report.String())
}

// changeBench changes count distinct objects of ns (an annotation) and
// returns their names.
func changeBench(t *testing.T, cs kubernetes.Interface, rng *rand.Rand, kind, ns string, n, count int) []string {
	t.Helper()
	prefix := "cm-"
	if kind == "pods" {
		prefix = "p-"
	}
	picked := map[int]bool{}
	for len(picked) < count {
		picked[rng.IntN(n)] = true
	}
	names := make([]string, 0, count)
	for i := range picked {
		names = append(names, fmt.Sprintf("%s%05d", prefix, i))
	}
	slices.Sort(names)
	patch := []byte(fmt.Sprintf(`{"metadata":{"annotations":{"bench/changed":"%d"}}}`, time.Now().UnixNano()))
	err := parallel(context.Background(), len(names), 16, func(ctx context.Context, i int) error {
		var err error
		if kind == "pods" {
			_, err = cs.CoreV1().Pods(ns).Patch(ctx, names[i], types.MergePatchType, patch, metav1.PatchOptions{})
		} else {
			_, err = cs.CoreV1().ConfigMaps(ns).Patch(ctx, names[i], types.MergePatchType, patch, metav1.PatchOptions{})
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func ratio(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", a/b)
}
