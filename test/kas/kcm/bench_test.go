package kcm

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/boltinformer/boltinformer/test/kas/harness"
)

// envInt is the integer in $name, or def.
func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("$%s=%q: want a positive integer", name, v)
	}
	return n
}

// tracker follows the Deployments, ReplicaSets and Pods of the cluster
// through informers of the test's own, and says when kube-controller-
// manager has converged: every Deployment has its replicas in Pods and a
// status that says so, and no ReplicaSet or Pod is left of a deleted
// Deployment.
type tracker struct {
	mu sync.Mutex // guards the maps
	// replicas of each Deployment ("ns/name"); pods by Deployment (from the
	// Pod's ReplicaSet's name); replicaSets by Deployment.
	replicas map[string]int
	// statusLag are the Deployments whose status is not yet of their
	// spec (observedGeneration behind, or status.replicas not spec's).
	statusLag   map[string]bool
	pods        map[string]int
	replicaSets map[string]int
	// created counts Pod adds by Deployment after reset.
	created map[string]int
	synced  []cache.InformerSynced
}

// deployOf is the Deployment of a Pod owned by ReplicaSet "NAME-HASH".
func deployOf(ns string, refs []metav1.OwnerReference, kind string) string {
	for _, r := range refs {
		if r.Controller != nil && *r.Controller && r.Kind == kind {
			if kind == "Deployment" {
				return ns + "/" + r.Name
			}
			if i := strings.LastIndex(r.Name, "-"); i > 0 {
				return ns + "/" + r.Name[:i]
			}
		}
	}
	return ""
}

func newTracker(ctx context.Context, t *testing.T, c *cluster) *tracker {
	t.Helper()
	tr := &tracker{replicas: map[string]int{}, statusLag: map[string]bool{}, pods: map[string]int{}, replicaSets: map[string]int{}, created: map[string]int{}}
	f := informers.NewSharedInformerFactory(c.cs, 0)
	deps := f.Apps().V1().Deployments().Informer()
	setReplicas := func(obj any, gone bool) {
		d, ok := obj.(*appsv1.Deployment)
		if !ok {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				d, _ = tomb.Obj.(*appsv1.Deployment)
			}
		}
		if d == nil {
			return
		}
		key := d.Namespace + "/" + d.Name
		tr.mu.Lock()
		defer tr.mu.Unlock()
		if gone {
			delete(tr.replicas, key)
			delete(tr.statusLag, key)
			return
		}
		want := ptr.Deref(d.Spec.Replicas, 1)
		tr.replicas[key] = int(want)
		if d.Status.ObservedGeneration < d.Generation || d.Status.Replicas != want {
			tr.statusLag[key] = true
		} else {
			delete(tr.statusLag, key)
		}
	}
	_, err := deps.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { setReplicas(obj, false) },
		UpdateFunc: func(_, obj any) { setReplicas(obj, false) },
		DeleteFunc: func(obj any) { setReplicas(obj, true) },
	})
	must(t, err)
	mc, err := metadata.NewForConfig(c.RESTConfig())
	must(t, err)
	mf := metadatainformer.NewSharedInformerFactory(mc, 0)
	count := func(m map[string]int, kind string, created bool) func(obj any, delta int) {
		return func(obj any, delta int) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			o, ok := obj.(*metav1.PartialObjectMetadata)
			if !ok {
				return
			}
			d := deployOf(o.Namespace, o.OwnerReferences, kind)
			tr.mu.Lock()
			defer tr.mu.Unlock()
			m[d] += delta
			if created && delta > 0 {
				tr.created[d]++
			}
		}
	}
	for gvr, h := range map[schema.GroupVersionResource]func(any, int){
		corev1.SchemeGroupVersion.WithResource("pods"):        count(tr.pods, "ReplicaSet", true),
		appsv1.SchemeGroupVersion.WithResource("replicasets"): count(tr.replicaSets, "Deployment", false),
	} {
		inf := mf.ForResource(gvr).Informer()
		_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { h(obj, 1) },
			DeleteFunc: func(obj any) { h(obj, -1) },
		})
		must(t, err)
		tr.synced = append(tr.synced, inf.HasSynced)
	}
	tr.synced = append(tr.synced, deps.HasSynced)
	f.Start(ctx.Done())
	mf.Start(ctx.Done())
	t.Cleanup(func() { f.Shutdown(); mf.Shutdown() })
	if !cache.WaitForCacheSync(ctx.Done(), tr.synced...) {
		t.Fatal("tracker not synced")
	}
	return tr
}

// check says what is not converged yet ("" when everything is).
func (tr *tracker) check(context.Context) string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var diffs []string
	for d, n := range tr.replicas {
		if tr.pods[d] != n {
			diffs = append(diffs, fmt.Sprintf("%s: %d Pods, want %d", d, tr.pods[d], n))
		}
	}
	for d, n := range tr.pods {
		if _, ok := tr.replicas[d]; !ok && n > 0 && d != "" {
			diffs = append(diffs, fmt.Sprintf("%d Pods of deleted %s", n, d))
		}
	}
	for d, n := range tr.replicaSets {
		if _, ok := tr.replicas[d]; !ok && n > 0 && d != "" {
			diffs = append(diffs, fmt.Sprintf("%d ReplicaSets of deleted %s", n, d))
		}
	}
	for d := range tr.statusLag {
		diffs = append(diffs, "the status of "+d+" is behind")
	}
	if len(diffs) == 0 {
		return ""
	}
	slices.Sort(diffs)
	if len(diffs) > 5 {
		diffs = append(diffs[:5], fmt.Sprintf("and %d more", len(diffs)-5))
	}
	return strings.Join(diffs, "; ")
}

// resetCreated starts counting Pod creations again.
func (tr *tracker) resetCreated() {
	tr.mu.Lock()
	tr.created = map[string]int{}
	tr.mu.Unlock()
}

func (tr *tracker) createdTotal() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	n := 0
	for _, c := range tr.created {
		n += c
	}
	return n
}

// syncMoment parses kcm's log: the time of the n-th "Caches are synced"
// line (every controller's wait for its informers has ended), or false.
func syncMoment(path string, n int) (time.Time, bool) {
	f, err := os.Open(path)
	if err != nil {
		return time.Time{}, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	seen := 0
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, `"Caches are synced"`) {
			continue
		}
		if seen++; seen == n {
			return klogTime(line)
		}
	}
	return time.Time{}, false
}

// countLines counts the lines of path that contain s.
func countLines(path, s string) int { return len(grepFile(path, s)) }

// klogTime is the time of a klog text line ("I1204 03:48:28.686909 ...").
func klogTime(line string) (time.Time, bool) {
	if len(line) < 21 {
		return time.Time{}, false
	}
	ts, err := time.ParseInLocation("0102 15:04:05.000000", line[1:21], time.Local)
	if err != nil {
		return time.Time{}, false
	}
	now := time.Now()
	ts = ts.AddDate(now.Year(), 0, 0)
	if ts.After(now.Add(time.Hour)) {
		ts = ts.AddDate(-1, 0, 0) // logged last year, read just after midnight on 1 January
	}
	return ts, true
}

// loadAvg is the machine's 1-minute load average.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}

// benchRun is one restart's figures.
type benchRun struct {
	mode              string
	round             int
	load              string
	synced, converged time.Duration
	apiserverCPU      time.Duration
	fullLists         int64 // informer LISTs and WatchLists of whole objects
	metaLists         int64 // informer metadata-only LISTs of every object
	reads             int64 // one-object reads (limit=1, byname)
	informerBytes     int64 // every informer request's response bytes
	allBytes          int64 // every kcm request's
	created, want     int   // Pods created during the restart, and needed
}

// TestBenchmarkKCMRestart restarts stock and persistent kube-controller-
// manager in turn over the same cluster (BOLTINFORMER_BENCH_KCM_DEPLOYMENTS
// Deployments of BOLTINFORMER_BENCH_KCM_REPLICAS Pods, default 1,000 x 10),
// after changes made while it is down, and measures each restart: the
// time until every controller has synced (the log's last "Caches are
// synced") and until the cluster has converged, the apiserver's CPU, the
// informers' LISTs and the bytes kcm read. BOLTINFORMER_BENCH_KCM_RUNS
// rounds (default 2), the modes alternating first (or grouped:
// BOLTINFORMER_BENCH_KCM_ORDER=grouped); BOLTINFORMER_BENCH_KCM_QPS is
// kcm's --kube-api-qps (default 100, burst twice that) in both modes.
func TestBenchmarkKCMRestart(t *testing.T) {
	if !runBench {
		t.Skip("BOLTINFORMER_BENCH_KCM=1 runs the kube-controller-manager restart benchmark (make bench-kcm)")
	}
	nDeploy := envInt(t, "BOLTINFORMER_BENCH_KCM_DEPLOYMENTS", 1000)
	replicas := envInt(t, "BOLTINFORMER_BENCH_KCM_REPLICAS", 10)
	rounds := envInt(t, "BOLTINFORMER_BENCH_KCM_RUNS", 2)
	qps := envInt(t, "BOLTINFORMER_BENCH_KCM_QPS", 100)
	const namespaces = 10
	ctx := t.Context()
	c := startCluster(t, &harness.Options{StartTimeout: 5 * time.Minute}, false)
	cache := filepath.Join(t.TempDir(), "kcm.db")
	tr := newTracker(ctx, t, c)

	// Setup: the Deployments, and a stock kcm with a generous client rate
	// creates their ReplicaSets and Pods.
	setupStart := time.Now()
	for i := range namespaces {
		_, err := c.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("ns-%d", i)}}, metav1.CreateOptions{})
		must(t, err)
	}
	for i := range nDeploy {
		ns := fmt.Sprintf("ns-%d", i%namespaces)
		_, err := c.cs.AppsV1().Deployments(ns).Create(ctx, deployment(ns, fmt.Sprintf("d-%d", i), int32(replicas)), metav1.CreateOptions{})
		must(t, err)
	}
	k := startKCM(t, c, kcmOptions{mode: modeStock, qps: 1000, burst: 2000})
	convergeWithin(t, "setup", 40*time.Minute, tr.check)
	waits := countLines(k.log, "Waiting for caches to sync")
	k.stop(t)
	t.Logf("setup: %d Deployments, %d Pods in %s; %d cache waits per start", nDeploy, nDeploy*replicas, time.Since(setupStart).Round(time.Second), waits)
	// The persistent file, filled by a cold start.
	k = startKCM(t, c, kcmOptions{mode: modePersistent, cache: cache, qps: qps, burst: 2 * qps})
	convergeWithin(t, "persistent cold start", 10*time.Minute, tr.check)
	k.freshStats(t)
	k.stop(t)
	if fi, err := os.Stat(cache); err == nil {
		t.Logf("cache file: %.1f MiB", float64(fi.Size())/(1<<20))
	}

	var runs []benchRun
	next := nDeploy
	// The restarts: the modes alternate (each restart of one mode then
	// also catches up with what the other's run wrote), or, with
	// BOLTINFORMER_BENCH_KCM_ORDER=grouped, every persistent restart in a
	// row, then every stock one.
	var plan [][2]int // mode index, round
	modes := []string{modePersistent, modeStock}
	if os.Getenv("BOLTINFORMER_BENCH_KCM_ORDER") == "grouped" {
		for m := range modes {
			for round := range rounds {
				plan = append(plan, [2]int{m, round})
			}
		}
	} else {
		for round := range rounds {
			plan = append(plan, [2]int{round % 2, round}, [2]int{(round + 1) % 2, round})
		}
	}
	for i, p := range plan {
		mode, round := modes[p[0]], p[1]
		want := changeWhileDown(t, c, tr, i, &next, nDeploy, replicas)
		r := restart(t, c, tr, kcmOptions{mode: mode, cache: cacheFor(mode, cache), qps: qps, burst: 2 * qps}, waits)
		r.round, r.want = round, want
		runs = append(runs, r)
		t.Logf("%s round %d: synced %s, converged %s, apiserver CPU %s, full lists %d, metadata lists %d, reads %d, informer bytes %d, all bytes %d, Pods created %d (needed %d), load %s",
			mode, round, r.synced, r.converged, r.apiserverCPU, r.fullLists, r.metaLists, r.reads, r.informerBytes, r.allBytes, r.created, r.want, r.load)
	}
	report(t, runs, nDeploy, replicas, qps)
}

const (
	modeStock      = "stock"
	modePersistent = "persistent"
)

func cacheFor(mode, cache string) string {
	if mode == modePersistent {
		return cache
	}
	return ""
}

// convergeWithin is converge with another bound.
func convergeWithin(t *testing.T, what string, bound time.Duration, check func(context.Context) string) time.Duration {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), bound)
	defer cancel()
	last := ""
	for {
		if last = check(ctx); last == "" {
			return time.Since(start)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not converged after %s: %s", what, bound, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// changeWhileDown makes one round's changes while kcm is down: 1% of the
// Deployments scaled up by 2, 20 Pods deleted, 5 Deployments deleted and 5
// created (in the first namespace). It returns how many Pods kcm must
// create.
func changeWhileDown(t *testing.T, c *cluster, tr *tracker, round int, next *int, nDeploy, replicas int) int {
	t.Helper()
	ctx := t.Context()
	want := 0
	for i := range max(1, nDeploy/100) {
		d := (round*97 + i*13) % nDeploy
		ns, name := fmt.Sprintf("ns-%d", d%10), fmt.Sprintf("d-%d", d)
		dep, err := c.cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			continue // deleted by an earlier round
		}
		c.scale(t, ns, name, ptr.Deref(dep.Spec.Replicas, 0)+2)
		want += 2
	}
	pods, err := c.cs.CoreV1().Pods("ns-1").List(ctx, metav1.ListOptions{Limit: 20})
	must(t, err)
	for i := range pods.Items {
		must(t, c.cs.CoreV1().Pods("ns-1").Delete(ctx, pods.Items[i].Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))
		want++
	}
	for i := range 5 {
		d := (round*31 + i*7 + 3) % nDeploy
		ns := fmt.Sprintf("ns-%d", d%10)
		_ = c.cs.AppsV1().Deployments(ns).Delete(ctx, fmt.Sprintf("d-%d", d), background)
		_, err := c.cs.AppsV1().Deployments("ns-0").Create(ctx, deployment("ns-0", fmt.Sprintf("d-%d", *next), int32(replicas)), metav1.CreateOptions{})
		must(t, err)
		*next++
		want += replicas
	}
	tr.resetCreated()
	return want
}

// restart starts kcm in o's mode and measures it until it has synced and
// the cluster has converged; then it stops kcm.
func restart(t *testing.T, c *cluster, tr *tracker, o kcmOptions, waits int) benchRun {
	t.Helper()
	r := benchRun{mode: o.mode, load: loadAvg()}
	cpu0, err := c.APIServerCPU()
	must(t, err)
	// The changes made while down must be seen by the tracker first.
	convergeWithin(t, "the tracker sees the changes", time.Minute, func(ctx context.Context) string {
		if tr.check(ctx) == "" {
			return "still converged"
		}
		return ""
	})
	o.extra = append(o.extra, strings.Fields(os.Getenv("BOLTINFORMER_BENCH_KCM_ARGS"))...)
	k := startKCM(t, c, o)
	check := tr.check
	if os.Getenv("BOLTINFORMER_BENCH_KCM_TRACE") == "1" {
		// What is not converged yet, once a second.
		var last time.Time
		check = func(ctx context.Context) string {
			s := tr.check(ctx)
			if now := time.Now(); s != "" && now.Sub(last) >= time.Second {
				last = now
				t.Logf("%s +%s: %s", o.mode, now.Sub(k.start).Round(100*time.Millisecond), s)
			}
			return s
		}
	}
	convergeWithin(t, o.mode+" restart", 10*time.Minute, check)
	r.converged = time.Since(k.start)
	k.readStatsSynced(t, waits)
	at, ok := syncMoment(k.log, waits)
	if !ok {
		t.Fatalf("%s: no %d-th \"Caches are synced\" in %s", o.mode, waits, k.log)
	}
	r.synced = at.Sub(k.start)
	cpu1, err := c.APIServerCPU()
	must(t, err)
	r.apiserverCPU = cpu1 - cpu0
	r.created = tr.createdTotal()
	k.stop(t)
	s := k.readStats(t) // the last write, at exit
	for key, n := range s.Requests {
		r.allBytes += n.Bytes
		client := key[strings.LastIndex(key, " ")+1:]
		if client == "@shared-informers" || client == "@metadata-informers" || client == "@factory" {
			r.informerBytes += n.Bytes
			if strings.Contains(key, "limit=1") || strings.Contains(key, "byname") {
				r.reads += n.Requests
			}
		}
	}
	for key, n := range s.informerLists() {
		if strings.HasPrefix(key, "LIST meta") {
			r.metaLists += n.Requests
		} else {
			r.fullLists += n.Requests
		}
	}
	return r
}

// readStatsSynced waits until kcm's log shows n cache waits ended and its
// stats file says the controllers started.
func (k *proc) readStatsSynced(t *testing.T, n int) {
	t.Helper()
	convergeWithin(t, "every controller synced", 10*time.Minute, func(context.Context) string {
		if got := countLines(k.log, `"Caches are synced"`); got < n {
			return fmt.Sprintf("%d of %d cache waits ended", got, n)
		}
		s, err := k.tryStats()
		if err != nil {
			return err.Error()
		}
		if s.ControllersStarted.IsZero() {
			return "controllers not started"
		}
		return ""
	})
}

// report logs the runs as a Markdown table, with each mode's median and the
// persistent/stock ratios, and writes it to $BOLTINFORMER_BENCH_KCM_OUT.
func report(t *testing.T, runs []benchRun, nDeploy, replicas, qps int) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "%d Deployments, %d Pods, kcm --kube-api-qps=%d --kube-api-burst=%d\n\n", nDeploy, nDeploy*replicas, qps, 2*qps)
	fmt.Fprintln(&b, "| mode | round | load | every controller synced | converged | apiserver CPU | full LISTs | metadata LISTs | one-object reads | informer bytes | all bytes | Pods created (needed) |")
	fmt.Fprintln(&b, "|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range runs {
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %d | %d | %d | %.2f MiB | %.2f MiB | %d (%d) |\n", r.mode, r.round, r.load,
			r.synced.Round(time.Millisecond), r.converged.Round(time.Millisecond), r.apiserverCPU.Round(10*time.Millisecond),
			r.fullLists, r.metaLists, r.reads, mib(r.informerBytes), mib(r.allBytes), r.created, r.want)
	}
	med := func(mode string, f func(benchRun) float64) float64 {
		var v []float64
		for _, r := range runs {
			if r.mode == mode {
				v = append(v, f(r))
			}
		}
		slices.Sort(v)
		if len(v) == 0 {
			return 0
		}
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	ratio := func(f func(benchRun) float64) string {
		s := med(modeStock, f)
		if s == 0 {
			return "-"
		}
		return fmt.Sprintf("%.3f", med(modePersistent, f)/s)
	}
	fmt.Fprintf(&b, "\npersistent / stock, medians: synced %s, converged %s, apiserver CPU %s, informer bytes %s, all bytes %s\n",
		ratio(func(r benchRun) float64 { return float64(r.synced) }),
		ratio(func(r benchRun) float64 { return float64(r.converged) }),
		ratio(func(r benchRun) float64 { return float64(r.apiserverCPU) }),
		ratio(func(r benchRun) float64 { return float64(r.informerBytes) }),
		ratio(func(r benchRun) float64 { return float64(r.allBytes) }))
	t.Log("\n" + b.String())
	if out := os.Getenv("BOLTINFORMER_BENCH_KCM_OUT"); out != "" {
		must(t, os.WriteFile(out, []byte(b.String()), 0o644))
	}
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }
