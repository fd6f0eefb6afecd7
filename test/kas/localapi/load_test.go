package localapi

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/boltinformer/boltinformer/test/kas/harness"
)

// The load: what the issue asks for, against the agent and then the
// apiserver, with the same requests.
const (
	loadPods       = 10000
	loadNamespaces = 100
	loadWatchers   = 50
	loadListRate   = 200 // lists per second
	loadWriteRate  = 20  // Pod updates per second, for the watchers
	loadDuration   = 20 * time.Second
	loadWorkers    = 16
)

// loadResult is one run's numbers.
type loadResult struct {
	target, format      string
	lists, failed, late int
	p50, p90, p99, max  time.Duration
	cpu                 time.Duration
	rss                 int64
	events              int64
}

// TestLoad: 50 watchers and 200 lists/s against a 10k-Pod cache, against
// the agent's local API and then against kube-apiserver (resourceVersion
// "0": its watch cache), in JSON and protobuf, with 20 Pod updates/s; it
// reports list latency percentiles, the server process's CPU and RSS, and
// the events the watchers got. BOLTINFORMER_LOCALAPI_LOAD=1 or
// BOLTINFORMER_HEAVY=1 runs it.
func TestLoad(t *testing.T) {
	if os.Getenv("BOLTINFORMER_LOCALAPI_LOAD") == "" && os.Getenv("BOLTINFORMER_HEAVY") == "" {
		t.Skip("the load test runs with BOLTINFORMER_LOCALAPI_LOAD=1 or BOLTINFORMER_HEAVY=1")
	}
	cs, err := cluster.Clientset()
	if err != nil {
		t.Fatal(err)
	}
	// The writes go over a connection of their own (client-go shares one
	// transport between clients of equal TLS configurations).
	wcfg := cluster.RESTConfig()
	wcfg.DisableCompression = true
	writer, err := kubernetes.NewForConfig(wcfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	prefix := fmt.Sprintf("load-%d", time.Now().Unix())
	var nss []string
	for i := range loadNamespaces {
		ns := fmt.Sprintf("%s-%d", prefix, i)
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		nss = append(nss, ns)
	}
	start := time.Now()
	if err := parallel(loadPods, 16, func(i int) error {
		p := testPod(i)
		p.Labels["shard"] = fmt.Sprint(i % 100)
		p.Spec.NodeName = fmt.Sprintf("node-%d", i%50)
		_, err := cs.CoreV1().Pods(nss[i%loadNamespaces]).Create(ctx, p, metav1.CreateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("created %d Pods in %s", loadPods, time.Since(start).Round(time.Second))
	a := startAgent(t, t.TempDir(), "", 0)
	waitFor(t, "the agent to list every Pod", func() bool {
		l, err := agentClient(t, a).CoreV1().Pods("").List(ctx, metav1.ListOptions{ResourceVersion: "0", LabelSelector: "shard"})
		return err == nil && len(l.Items) >= loadPods
	})
	agentCfg, err := clientcmd.BuildConfigFromFlags("", a.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	var results []loadResult
	for _, format := range []string{"json", "protobuf"} {
		for _, target := range []string{"localapi", "kube-apiserver"} {
			cfg, pid := agentCfg, a.pid()
			if target == "kube-apiserver" {
				cfg, pid = cluster.RESTConfig(), cluster.APIServerPID()
			}
			cfg = rest.CopyConfig(cfg)
			cfg.QPS, cfg.Burst = -1, 0
			if format == "protobuf" {
				cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf"
				cfg.ContentType = "application/vnd.kubernetes.protobuf"
			} else {
				cfg.AcceptContentTypes = "application/json"
				cfg.ContentType = "application/json"
			}
			r := runLoad(t, writer, cfg, pid, nss)
			r.target, r.format = target, format
			results = append(results, r)
			t.Logf("%s %s: %d lists (%d failed, %d late), p50 %s p90 %s p99 %s max %s; server CPU %s (%.2f cores), RSS %d MiB; watchers got %d events",
				target, format, r.lists, r.failed, r.late, r.p50, r.p90, r.p99, r.max, r.cpu.Round(time.Millisecond),
				r.cpu.Seconds()/loadDuration.Seconds(), r.rss>>20, r.events)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| server | format | lists | p50 | p90 | p99 | CPU (cores) | RSS MiB | watch events |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		fmt.Fprintf(&b, "| %s | %s | %d | %.1f ms | %.1f ms | %.1f ms | %.2f | %d | %d |\n", r.target, r.format, r.lists,
			ms(r.p50), ms(r.p90), ms(r.p99), r.cpu.Seconds()/loadDuration.Seconds(), r.rss>>20, r.events)
	}
	t.Logf("\n%s", b.String())
	if out := os.Getenv("BOLTINFORMER_LOCALAPI_LOAD_OUT"); out != "" {
		_ = os.WriteFile(out, []byte(b.String()), 0o644)
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// runLoad runs the watchers, the lists and the writes for loadDuration
// against cfg, measuring the process pid.
func runLoad(t *testing.T, writer kubernetes.Interface, cfg *rest.Config, pid int, nss []string) loadResult {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), loadDuration)
	defer cancel()
	var events atomic.Int64
	var watchErr atomic.Pointer[error]
	var wg, up sync.WaitGroup
	// One small list gives the watches their resourceVersion ("": a
	// consistent read that honours the limit; "0" would make kube-apiserver
	// send all 10k Pods).
	first, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range loadWatchers {
		wg.Add(1)
		up.Add(1)
		go func() {
			defer wg.Done()
			opts := metav1.ListOptions{ResourceVersion: first.ResourceVersion}
			if i%2 == 1 {
				opts.LabelSelector = fmt.Sprintf("shard=%d", i)
			}
			w, err := cs.CoreV1().Pods("").Watch(ctx, opts)
			up.Done()
			if err != nil {
				watchErr.CompareAndSwap(nil, &err)
				return
			}
			defer w.Stop()
			for e := range w.ResultChan() {
				if e.Type == watch.Error {
					err := fmt.Errorf("watch error event: %v", e.Object)
					watchErr.CompareAndSwap(nil, &err)
					continue
				}
				events.Add(1)
			}
		}()
	}
	up.Wait() // the watches are up
	cpu0, _ := harness.ProcessCPU(pid)
	// Writes: label patches on Pods across the namespaces, counted.
	var writes, writeErrs atomic.Int64
	var writeErr atomic.Pointer[error]
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Second / loadWriteRate)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			k := (i * 37) % loadPods
			_, err := writer.CoreV1().Pods(nss[k%len(nss)]).Patch(context.Background(), fmt.Sprintf("pod-%05d", k),
				types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"labels":{"gen":"%d"}}}`, i)), metav1.PatchOptions{})
			if err != nil {
				writeErrs.Add(1)
				writeErr.CompareAndSwap(nil, &err)
			} else {
				writes.Add(1)
			}
		}
	}()
	// Lists: an open loop at loadListRate; a request that finds every
	// worker busy counts as late (it is still made).
	type req struct {
		ns   string
		opts metav1.ListOptions
	}
	reqs := make(chan req, loadListRate)
	var mu sync.Mutex
	var lat []time.Duration
	var failed, late int
	for range loadWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range reqs {
				t0 := time.Now()
				_, err := cs.CoreV1().Pods(r.ns).List(context.Background(), r.opts)
				d := time.Since(t0)
				mu.Lock()
				if err != nil {
					failed++
				} else {
					lat = append(lat, d)
				}
				mu.Unlock()
			}
		}()
	}
	tick := time.NewTicker(time.Second / loadListRate)
	for i := 0; ctx.Err() == nil; i++ {
		<-tick.C
		var r req
		switch i % 4 {
		case 0:
			r = req{nss[i%len(nss)], metav1.ListOptions{ResourceVersion: "0"}}
		case 1:
			r = req{"", metav1.ListOptions{ResourceVersion: "0", LabelSelector: fmt.Sprintf("shard=%d", i%100)}}
		case 2:
			r = req{"", metav1.ListOptions{ResourceVersion: "0", FieldSelector: fmt.Sprintf("spec.nodeName=node-%d", i%50)}}
		case 3:
			r = req{nss[i%len(nss)], metav1.ListOptions{ResourceVersion: "0", LabelSelector: "tier=db"}}
		}
		select {
		case reqs <- r:
		default:
			late++
			reqs <- r
		}
	}
	tick.Stop()
	close(reqs)
	cpu1, _ := harness.ProcessCPU(pid)
	rss, _ := harness.ProcessRSS(pid)
	cancel()
	wg.Wait()
	if e := watchErr.Load(); e != nil {
		t.Logf("a watcher failed: %v", *e)
	}
	t.Logf("%d writes made, %d failed", writes.Load(), writeErrs.Load())
	if e := writeErr.Load(); e != nil {
		t.Logf("a write failed: %v", *e)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(p*float64(len(lat))))]
	}
	return loadResult{lists: len(lat), failed: failed, late: late, p50: pct(0.5), p90: pct(0.9), p99: pct(0.99), max: pct(1),
		cpu: cpu1 - cpu0, rss: rss, events: events.Load()}
}

// parallel runs f(0..n-1) on workers goroutines; the first error wins.
func parallel(n, workers int, f func(i int) error) error {
	var next atomic.Int64
	var first atomic.Pointer[error]
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || first.Load() != nil {
					return
				}
				if err := f(i); err != nil {
					first.CompareAndSwap(nil, &err)
				}
			}
		}()
	}
	wg.Wait()
	if e := first.Load(); e != nil {
		return *e
	}
	return nil
}
