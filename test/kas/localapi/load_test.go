package localapi

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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
	"k8s.io/client-go/kubernetes/scheme"
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
	// loadDrain bounds the wait, after the load, for the events of the
	// writes made during it.
	loadDrain = 15 * time.Second
)

// The load test's knobs (environment variables), for diagnosis.
const (
	// loadTargetsEnv lists the servers, comma-separated: localapi,
	// kube-apiserver (the default: both).
	loadTargetsEnv = "BOLTINFORMER_LOCALAPI_LOAD_TARGETS"
	// loadFormatsEnv lists the formats: json, protobuf (default: both).
	loadFormatsEnv = "BOLTINFORMER_LOCALAPI_LOAD_FORMATS"
	// loadConnEnv is how the clients connect: "own" (the default: each
	// watcher and each list worker a client with a connection of its own,
	// as 50 programs on a node would be) or "shared" (every watcher and
	// every list on one client: kube-apiserver's HTTP/2 multiplexes them on
	// one connection; the local API, HTTP/1.1 only, opens one per request
	// in flight anyway).
	loadConnEnv = "BOLTINFORMER_LOCALAPI_LOAD_CONN"
	// loadGenEnv "repeat" makes every run write the same label values as
	// the first (the load test before 3 December did): a merge patch that
	// sets a label to the value it has changes nothing, kube-apiserver
	// then writes nothing and sends no event, and the run's watchers get
	// none. For the record; the default gives each run values of its own.
	loadGenEnv = "BOLTINFORMER_LOCALAPI_LOAD_GEN"
	// loadDecodeEnv "1" makes the lists decode their responses into a
	// PodList (as the load test before 3 December did): the latency then
	// includes the client's decoding, on the same 2 cores. The default
	// measures from the request to the last byte of the response.
	loadDecodeEnv = "BOLTINFORMER_LOCALAPI_LOAD_DECODE"
	// loadDebugEnv is a directory where, halfway through each run, the
	// server's goroutines and CPU profile (10 s) are written, and
	// kube-apiserver's /metrics.
	loadDebugEnv = "BOLTINFORMER_LOCALAPI_LOAD_DEBUG"
	// loadOutEnv is a file the results table is written to.
	loadOutEnv = "BOLTINFORMER_LOCALAPI_LOAD_OUT"
)

// loadResult is one run's numbers.
type loadResult struct {
	target, format      string
	lists, failed, late int
	p50, p90, p99, max  time.Duration
	cpu                 time.Duration
	rss                 int64
	watch               watchResult
}

// watchResult is what the watchers received of the writes made during a
// run: expected counts each successful write once per watcher whose
// selector matches it; got those delivered (inLoad of them before the
// load ended, the rest within loadDrain after it); latency is from the
// write's request to the event's arrival at the watcher, decoded.
type watchResult struct {
	writes, writeErrs int64
	noops             int64 // writes that changed nothing (no new resourceVersion)
	expected, got     int64
	inLoad            int64
	other             int64 // events of writes not known to have succeeded
	dups, foreign     int64 // events of a write received twice; of no write of the run
	closed            int   // watches the server ended before the client did
	firstErr          string
	p50, p99, max     time.Duration
	// From kube-apiserver's /metrics, differences over the run.
	terminated, sent, dispatched float64
	registered                   float64 // open Pod watches at the load's end
}

// TestLoad: 50 watchers and 200 lists/s against a 10k-Pod cache, against
// the agent's local API and then against kube-apiserver (resourceVersion
// "0": its watch cache), in JSON and protobuf, with 20 Pod updates/s; it
// reports list latency percentiles, the server process's CPU and RSS, and
// the watchers' delivery (events received of those expected, latency from
// the write). BOLTINFORMER_LOCALAPI_LOAD=1 or BOLTINFORMER_HEAVY=1 runs it.
func TestLoad(t *testing.T) {
	if os.Getenv("BOLTINFORMER_LOCALAPI_LOAD") == "" && os.Getenv("BOLTINFORMER_HEAVY") == "" {
		t.Skip("the load test runs with BOLTINFORMER_LOCALAPI_LOAD=1 or BOLTINFORMER_HEAVY=1")
	}
	targets := envList(t, loadTargetsEnv, "localapi", "kube-apiserver")
	formats := envList(t, loadFormatsEnv, "json", "protobuf")
	shared := false
	switch v := os.Getenv(loadConnEnv); v {
	case "", "own":
	case "shared":
		shared = true
	default:
		t.Fatalf("%s=%q: want own or shared", loadConnEnv, v)
	}
	lo := loadOptions{shared: shared, repeat: os.Getenv(loadGenEnv) == "repeat", decode: os.Getenv(loadDecodeEnv) == "1", debug: os.Getenv(loadDebugEnv)}
	t.Logf("connections %s, writes repeated %v, lists decoded %v", map[bool]string{true: "shared", false: "own"}[shared], lo.repeat, lo.decode)
	cs, err := cluster.Clientset()
	if err != nil {
		t.Fatal(err)
	}
	// The writes go over a connection of their own (client-go shares one
	// transport between clients of equal TLS configurations).
	writer, err := kubernetes.NewForConfig(ownConnection(cluster.RESTConfig()))
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
	if lo.debug != "" {
		t.Setenv(agentPprofEnv, "1")
	}
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
	for _, format := range formats {
		for _, target := range targets {
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
			lo.run++
			lo.name = target + "-" + format
			r := runLoad(t, writer, cfg, pid, nss, target == "kube-apiserver", a.pprof, lo)
			r.target, r.format = target, format
			results = append(results, r)
			w := r.watch
			t.Logf("%s %s: %d lists (%d failed, %d late), p50 %s p90 %s p99 %s max %s; server CPU %s (%.2f cores, %.1f ms per list), RSS %d MiB",
				target, format, r.lists, r.failed, r.late, r.p50, r.p90, r.p99, r.max, r.cpu.Round(time.Millisecond),
				r.cpu.Seconds()/loadDuration.Seconds(), perList(r), r.rss>>20)
			t.Logf("%s %s watch: %d writes (%d failed, %d changed nothing); events %d of %d expected (%d during the load, %d after), %d of unconfirmed writes, %d twice, %d of no write of the run; latency p50 %s p99 %s max %s; %d watches ended by the server; first error: %s",
				target, format, w.writes, w.writeErrs, w.noops, w.got, w.expected, w.inLoad, w.got-w.inLoad, w.other, w.dups, w.foreign,
				w.p50, w.p99, w.max, w.closed, w.firstErr)
			if missing := w.expected - w.got; target == "localapi" && (missing != 0 || w.dups != 0 || w.closed != 0) {
				// Not a timing threshold: the drain after the load is a
				// deadline for a hang; a watch must see every event once.
				t.Errorf("local API %s: %d of the writes' events missing at its watchers, %d received twice, %d watches ended", format, missing, w.dups, w.closed)
			}
			if target == "kube-apiserver" {
				t.Logf("%s %s metrics: Pod watches open at the end %.0f, watchers terminated %.0f, watch events sent %.0f, events dispatched by the watch cache %.0f",
					target, format, w.registered, w.terminated, w.sent, w.dispatched)
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| server | format | lists | p50 | p90 | p99 | CPU (cores) | CPU per list | RSS MiB | watch events (of expected) | event latency p50 | p99 |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range results {
		fmt.Fprintf(&b, "| %s | %s | %d | %.1f ms | %.1f ms | %.1f ms | %.2f | %.1f ms | %d | %d (%d) | %.1f ms | %.1f ms |\n", r.target, r.format, r.lists,
			ms(r.p50), ms(r.p90), ms(r.p99), r.cpu.Seconds()/loadDuration.Seconds(), perList(r), r.rss>>20,
			r.watch.got, r.watch.expected, ms(r.watch.p50), ms(r.watch.p99))
	}
	t.Logf("\n%s", b.String())
	if out := os.Getenv(loadOutEnv); out != "" {
		_ = os.WriteFile(out, []byte(b.String()), 0o644)
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func perList(r loadResult) float64 {
	if r.lists == 0 {
		return 0
	}
	return ms(r.cpu) / float64(r.lists)
}

// envList returns the comma-separated values of the environment variable
// name, each one of allowed, or allowed when it is unset.
func envList(t *testing.T, name string, allowed ...string) []string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return allowed
	}
	var out []string
	for _, s := range strings.Split(v, ",") {
		if !slices.Contains(allowed, s) {
			t.Fatalf("%s=%q: %q is not one of %v", name, v, s, allowed)
		}
		out = append(out, s)
	}
	return out
}

// ownConnection returns a copy of cfg whose clients get a transport, and
// so a connection, of their own: client-go shares one transport (one
// HTTP/2 connection) between configurations with equal TLS settings, but
// caches none with a Proxy function.
func ownConnection(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Proxy = func(*http.Request) (*url.URL, error) { return nil, nil }
	return cfg
}

// writeLog is the writer's record, by generation (the "gen" label each
// write sets): when it was sent, which Pod, and whether it succeeded.
type writeLog struct {
	mu   sync.Mutex // guards the slices
	sent []time.Time
	pod  []int
	ok   []bool
}

// deliveries records one watcher's events: when each write's arrived
// (the writes are told apart by their label value; whether a write
// succeeded is known only once it answered, which may be after its event
// arrived, so the events are matched with the writes after the load).
type deliveries struct {
	mu      sync.Mutex // guards the fields; lock order: writeLog.mu first
	arrived map[int]arrival
	dups    int64 // events of a write that arrived before
	foreign int64 // events of no write of the run (not counted)
	closed  bool
	errText string
}

// arrival is when a write's event arrived, and whether during the load.
type arrival struct {
	at     time.Time
	inLoad bool
}

// count returns how many of the arrived events are of successful writes.
// Caller holds wl.mu.
func (d *deliveries) count(wl *writeLog) int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	var n int64
	for g := range d.arrived {
		if wl.ok[g] {
			n++
		}
	}
	return n
}

// loadOptions are the knobs of the runs.
type loadOptions struct {
	shared, repeat, decode bool
	debug                  string // directory for profiles, or ""
	run                    int    // the run's number, from 1
	name                   string // the run's name, for the debug files
}

// runLoad runs the watchers, the lists and the writes for loadDuration
// against cfg, measuring the process pid; then waits up to loadDrain for
// the watchers to receive the events of the writes. kas says pid is
// kube-apiserver's (its metrics and profiles are read); else pprof is the
// agent's profiling address ("": none).
func runLoad(t *testing.T, writer kubernetes.Interface, cfg *rest.Config, pid int, nss []string, kas bool, pprof string, lo loadOptions) loadResult {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// client returns a client on a connection of its own, or cs.
	client := func() kubernetes.Interface {
		if lo.shared {
			return cs
		}
		c, err := kubernetes.NewForConfig(ownConnection(cfg))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	metric := func(name string, labels map[string]string) float64 {
		if !kas {
			return 0
		}
		v, err := cluster.MetricSum(context.Background(), name, labels)
		if err != nil {
			t.Logf("metric %s: %v", name, err)
		}
		return v
	}
	pods := map[string]string{"resource": "pods"}
	terminated0 := metric("apiserver_terminated_watchers_total", pods)
	sent0 := metric("apiserver_watch_events_total", pods)
	dispatched0 := metric("apiserver_watch_cache_events_dispatched_total", pods)

	ctx, cancel := context.WithTimeout(context.Background(), loadDuration)
	defer cancel()
	// The watchers outlive the load by the drain.
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	var loadOver atomic.Bool
	// One small list gives the watches their resourceVersion ("": a
	// consistent read that honours the limit; "0" would make kube-apiserver
	// send all 10k Pods).
	first, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	maxWrites := int(loadWriteRate*loadDuration/time.Second) + 1
	// The label values of this run's writes: gen, gen+1, ..., new to every
	// Pod (unless repeated, for the record), so that every write changes
	// its Pod.
	gen0 := 0
	if !lo.repeat {
		gen0 = (lo.run - 1) * maxWrites
	}
	startRV, err := strconv.ParseUint(first.ResourceVersion, 10, 64)
	if err != nil {
		t.Fatalf("the list's resourceVersion %q: %v", first.ResourceVersion, err)
	}
	wl := &writeLog{sent: make([]time.Time, maxWrites), pod: make([]int, maxWrites), ok: make([]bool, maxWrites)}
	dels := make([]*deliveries, loadWatchers)
	var wg, watchers, up sync.WaitGroup
	for i := range loadWatchers {
		d := &deliveries{arrived: map[int]arrival{}}
		dels[i] = d
		wcs := client()
		watchers.Add(1)
		up.Add(1)
		go func() {
			defer watchers.Done()
			opts := metav1.ListOptions{ResourceVersion: first.ResourceVersion}
			if i%2 == 1 {
				opts.LabelSelector = fmt.Sprintf("shard=%d", i)
			}
			w, err := wcs.CoreV1().Pods("").Watch(wctx, opts)
			up.Done()
			if err != nil {
				d.mu.Lock()
				d.errText, d.closed = err.Error(), true
				d.mu.Unlock()
				return
			}
			defer w.Stop()
			for e := range w.ResultChan() {
				now := time.Now()
				if e.Type == watch.Error {
					d.mu.Lock()
					if d.errText == "" && wctx.Err() == nil {
						d.errText = fmt.Sprintf("watch error event: %v", e.Object)
					}
					d.mu.Unlock()
					continue
				}
				p, _ := e.Object.(*corev1.Pod)
				gen := -1
				if p != nil {
					if g, err := strconv.Atoi(p.Labels["gen"]); err == nil && g-gen0 >= 0 && g-gen0 < maxWrites {
						gen = g - gen0
					}
				}
				d.mu.Lock()
				if _, dup := d.arrived[gen]; dup {
					d.dups++
				} else if gen < 0 {
					d.foreign++
				} else {
					d.arrived[gen] = arrival{at: now, inLoad: !loadOver.Load()}
				}
				d.mu.Unlock()
			}
			d.mu.Lock()
			d.closed = wctx.Err() == nil
			d.mu.Unlock()
		}()
	}
	up.Wait() // the watches are up
	cpu0, _ := harness.ProcessCPU(pid)
	// Writes: label patches on Pods across the namespaces, each with its
	// generation, logged.
	var writes, writeErrs, noops atomic.Int64
	var writeErr atomic.Pointer[error]
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Second / loadWriteRate)
		defer tick.Stop()
		for i := 0; i < maxWrites; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			k := (i * 37) % loadPods
			wl.mu.Lock()
			wl.sent[i], wl.pod[i] = time.Now(), k
			wl.mu.Unlock()
			p, err := writer.CoreV1().Pods(nss[k%len(nss)]).Patch(context.Background(), fmt.Sprintf("pod-%05d", k),
				types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"labels":{"gen":"%d"}}}`, gen0+i)), metav1.PatchOptions{})
			if err != nil {
				writeErrs.Add(1)
				writeErr.CompareAndSwap(nil, &err)
				continue
			}
			writes.Add(1)
			// A patch that changes nothing answers with the Pod as it was:
			// its resourceVersion predates the run, and no event follows.
			if rv, err := strconv.ParseUint(p.ResourceVersion, 10, 64); err == nil && rv <= startRV {
				noops.Add(1)
				continue
			}
			wl.mu.Lock()
			wl.ok[i] = true
			wl.mu.Unlock()
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
	var bodyBytes atomic.Int64
	for range loadWorkers {
		lcs := client()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range reqs {
				t0 := time.Now()
				var err error
				if lo.decode {
					_, err = lcs.CoreV1().Pods(r.ns).List(context.Background(), r.opts)
				} else {
					// The response read to its last byte, not decoded.
					var b []byte
					b, err = lcs.CoreV1().RESTClient().Get().Namespace(r.ns).Resource("pods").
						VersionedParams(&r.opts, scheme.ParameterCodec).DoRaw(context.Background())
					bodyBytes.Add(int64(len(b)))
				}
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
	if lo.debug != "" {
		wg.Add(1)
		go func() {
			defer wg.Done()
			debugProfiles(t, lo, kas, pprof)
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
	wg.Wait() // the lists and the writes are done
	loadOver.Store(true)
	registered := metric("apiserver_longrunning_requests", map[string]string{"verb": "WATCH", "resource": "pods"})

	// What each watcher should have received: every successful write its
	// selector matches.
	expect := make([]int64, loadWatchers)
	wl.mu.Lock()
	for g := range wl.ok {
		if !wl.ok[g] {
			continue
		}
		for i := range expect {
			if i%2 == 0 || wl.pod[g]%100 == i {
				expect[i]++
			}
		}
	}
	wl.mu.Unlock()
	drained := func() bool {
		wl.mu.Lock()
		defer wl.mu.Unlock()
		for i, d := range dels {
			if d.count(wl) < expect[i] {
				d.mu.Lock()
				closed := d.closed
				d.mu.Unlock()
				if !closed {
					return false
				}
			}
		}
		return true
	}
	for deadline := time.Now().Add(loadDrain); !drained() && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	wcancel()
	watchers.Wait()

	wr := watchResult{writes: writes.Load(), writeErrs: writeErrs.Load(), noops: noops.Load(), registered: registered}
	if e := writeErr.Load(); e != nil {
		t.Logf("a write failed: %v", *e)
	}
	var wlat []time.Duration
	for i, d := range dels {
		wr.expected += expect[i]
		for g, a := range d.arrived {
			if !wl.ok[g] {
				wr.other++ // a write that failed, or changed nothing
				continue
			}
			wr.got++
			if a.inLoad {
				wr.inLoad++
			}
			wlat = append(wlat, a.at.Sub(wl.sent[g]))
		}
		wr.dups += d.dups
		wr.foreign += d.foreign
		if d.closed {
			wr.closed++
		}
		if wr.firstErr == "" && d.errText != "" {
			wr.firstErr = d.errText
		}
	}
	wr.p50, wr.p99, wr.max = percentile(wlat, 0.5), percentile(wlat, 0.99), percentile(wlat, 1)
	wr.terminated = metric("apiserver_terminated_watchers_total", pods) - terminated0
	wr.sent = metric("apiserver_watch_events_total", pods) - sent0
	wr.dispatched = metric("apiserver_watch_cache_events_dispatched_total", pods) - dispatched0
	if n := len(lat); n > 0 && !lo.decode {
		t.Logf("%s: %d bytes per list on average (uncompressed)", lo.name, bodyBytes.Load()/int64(n))
	}
	return loadResult{lists: len(lat), failed: failed, late: late,
		p50: percentile(lat, 0.5), p90: percentile(lat, 0.9), p99: percentile(lat, 0.99), max: percentile(lat, 1),
		cpu: cpu1 - cpu0, rss: rss, watch: wr}
}

// debugProfiles writes, halfway through a run, the server's goroutines
// and a 10 s CPU profile into lo.debug (and kube-apiserver's /metrics):
// kube-apiserver's through its own /debug/pprof, the agent's through the
// address it serves pprof on.
func debugProfiles(t *testing.T, lo loadOptions, kas bool, pprof string) {
	time.Sleep(loadDuration / 4)
	var hc *http.Client
	var base string
	paths := []string{"/debug/pprof/goroutine?debug=2", "/debug/pprof/profile?seconds=10"}
	if kas {
		var err error
		if hc, err = rest.HTTPClientFor(cluster.RESTConfig()); err != nil {
			t.Logf("debug: %v", err)
			return
		}
		base = cluster.RESTConfig().Host
		paths = append(paths, "/metrics")
	} else {
		if pprof == "" {
			t.Logf("debug: the agent serves no pprof")
			return
		}
		hc, base = http.DefaultClient, "http://"+pprof
	}
	for _, p := range paths {
		resp, err := hc.Get(base + p)
		if err != nil {
			t.Logf("debug %s: %v", p, err)
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		name := lo.name + strings.NewReplacer("/", "_", "?", "_", "=", "_").Replace(p)
		if err := os.WriteFile(filepath.Join(lo.debug, name), b, 0o644); err != nil {
			t.Logf("debug: %v", err)
		}
	}
}

// percentile sorts d and returns its p-quantile (0 for none).
func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[min(len(d)-1, int(p*float64(len(d))))]
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
