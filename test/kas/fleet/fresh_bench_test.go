package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clientfeatures "k8s.io/client-go/features"
	clientfeaturestesting "k8s.io/client-go/features/testing"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/test/kas/harness"
)

// applyRealisticPod writes Pod name the way a cluster does: its spec by
// server-side apply from one manager ("deployer"), then its status by
// another ("kubelet", on the status subresource), so that its
// managedFields hold two entries, as a running Pod's do.
func applyRealisticPod(ctx context.Context, cs kubernetes.Interface, ns, name string, i, gen int) error {
	// A Pod's spec is immutable but for a few fields: a change is a new
	// label and a new status.
	p := fleetPod(ns, name, fmt.Sprintf("bench-node-%d", i%100), 0)
	p.Labels["gen"] = fmt.Sprint(gen)
	p.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
	body, err := json.Marshal(p)
	if err != nil {
		return err
	}
	force := true
	if _, err := cs.CoreV1().Pods(ns).Patch(ctx, name, types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: "deployer", Force: &force}); err != nil {
		return err
	}
	started := metav1.NewTime(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	st := &corev1.Pod{
		TypeMeta:   p.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Status: corev1.PodStatus{
			Phase:  corev1.PodRunning,
			HostIP: fmt.Sprintf("10.0.%d.%d", i/250%250, i%250+1), PodIP: fmt.Sprintf("10.244.%d.%d", i/250%250, i%250+1),
			PodIPs:    []corev1.PodIP{{IP: fmt.Sprintf("10.244.%d.%d", i/250%250, i%250+1)}},
			StartTime: &started,
			QOSClass:  corev1.PodQOSBurstable,
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionTrue, LastTransitionTime: started},
				{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: started},
				{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: started},
				{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: started},
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: started},
			},
			ContainerStatuses: []corev1.ContainerStatus{{
				Name: "app", Ready: true, Started: &force, RestartCount: int32(gen),
				Image: "registry.k8s.io/pause:3.10", ImageID: "registry.k8s.io/pause@sha256:ee6521f290b2168b6e0935a181d4cff9be1ac3f505666ef0e3c98fae8199917a",
				ContainerID: fmt.Sprintf("containerd://%064x", i+1),
				State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}},
			}},
		},
	}
	body, err = json.Marshal(st)
	if err != nil {
		return err
	}
	_, err = cs.CoreV1().Pods(ns).Patch(ctx, name, types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: "kubelet", Force: &force}, "status")
	return err
}

// realisticNamespace returns a namespace holding n realistic Pods
// (applyRealisticPod), creating it once.
func realisticNamespace(b testing.TB, c *harness.Cluster, n int) string {
	b.Helper()
	seededMu.Lock()
	defer seededMu.Unlock()
	if ns, ok := seeded[-n]; ok {
		return ns
	}
	cs, err := c.Clientset()
	if err != nil {
		b.Fatal(err)
	}
	ns := fmt.Sprintf("fresh-%d", n)
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	if err := parallel(ctx, n, 16, func(ctx context.Context, i int) error {
		return applyRealisticPod(ctx, cs, ns, fmt.Sprintf("p-%06d", i), i, 0)
	}); err != nil {
		b.Fatal(err)
	}
	b.Logf("applied %d Pods (spec and status, two managers) in %s", n, time.Since(start).Round(time.Second))
	seeded[-n] = ns
	return ns
}

// freshAgent is a boltinformer Factory over one namespace's Pods with
// SyncAfterFresh, metered.
type freshAgent struct {
	db     *boltinformer.DB
	f      *boltinformer.Factory
	inf    *boltinformer.Informer
	tr     *transport
	cancel context.CancelFunc
}

// startFreshAgent starts a freshAgent; bookmarkWait is its
// FreshBookmarkWait (negative: fresh by the metadata list's diff; 0: the
// factory's default).
func startFreshAgent(c *harness.Cluster, ns, path string, m *meter, partialRatio float64, bookmarkWait time.Duration) (*freshAgent, error) {
	tr := newTransport(m)
	db, err := boltinformer.Open(path, nil)
	if err != nil {
		return nil, err
	}
	f, err := boltinformer.NewFactory(db, agentConfig(c.RESTConfig(), tr), &boltinformer.FactoryOptions{
		Namespace: ns, ClusterID: "fleet",
		Informer: boltinformer.InformerOptions{SyncPolicy: boltinformer.SyncAfterFresh, PartialRelistRatio: partialRatio, FreshBookmarkWait: bookmarkWait},
	})
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	inf, err := f.PersistentInformer(&corev1.Pod{})
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.StartWithContext(ctx)
	return &freshAgent{db: db, f: f, inf: inf, tr: tr, cancel: cancel}, nil
}

func (a *freshAgent) stop() error {
	a.cancel()
	a.f.Shutdown()
	return a.db.Close()
}

// BenchmarkFreshResume: one informer over 10k realistic Pods (100k with
// BOLTINFORMER_BENCH_LARGE=1; spec and status written by two managers, so
// managedFields are a large part of each Pod) against the real apiserver.
// ns/op is the time from the start until HasSynced: client-go's cold
// start (WatchList, the default, and LIST; over a REST client reading
// JSON, and as its generated informers build it over a clientset, which
// reads protobuf) against boltinformer's warm
// restart with SyncAfterFresh (synced means the cache equals the server's
// state), fresh by the metadata list's diff (fresh-list) or by a bookmark
// of the resumed watch (fresh-bookmark, FreshBookmarkWait), after 0, 10 or
// 10% of the Pods changed while it was down; then after an apiserver
// restart (410 for the saved resourceVersion) with 1% changed (and 10%,
// 20% with BOLTINFORMER_BENCH_CROSSOVER=1), the partial relist against a
// full one. Reported per start: MiB-read (decoded response bytes),
// apiserver-cpu-ms (and net of the idle rate), LISTs of every kind (of
// which metadata-lists and exact-reads), WATCHes, and the machine's load
// average at the end (load1). Run with -benchtime 3x.
func BenchmarkFreshResume(b *testing.B) {
	c := sharedCluster(b)
	cs, err := c.Clientset()
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range benchSizes() {
		b.Run(fmt.Sprintf("objects=%d", n), func(b *testing.B) {
			ns := realisticNamespace(b, c, n)
			gen := 0
			change := func(k int) {
				gen++
				if err := parallel(context.Background(), k, 16, func(ctx context.Context, i int) error {
					return applyRealisticPod(ctx, cs, ns, fmt.Sprintf("p-%06d", i), i, gen)
				}); err != nil {
					b.Fatal(err)
				}
			}
			// A live cluster: its leader elections renew leases every
			// 2 s (without any write kube-apiserver sends a resumed watch
			// no bookmark).
			stopBeat := heartbeat(b, cs, 2*time.Second)
			defer stopBeat()
			// The apiserver's own background work, subtracted from each
			// start's CPU (apiserver-cpu-net), once the seeding has
			// settled.
			time.Sleep(10 * time.Second)
			idle := idleRate(b, c, 10*time.Second)
			b.Logf("apiserver idle: %.0f ms/s", idle*1e3)
			report := func(b *testing.B, cpu, elapsed time.Duration, m *meter) {
				per := float64(b.N)
				b.ReportMetric(float64(cpu.Milliseconds())/per, "apiserver-cpu-ms/op")
				b.ReportMetric((float64(cpu)-idle*float64(elapsed))/1e6/per, "apiserver-cpu-net-ms/op")
				b.ReportMetric(float64(m.lists.Load())/per, "LISTs/op")
				b.ReportMetric(float64(m.metaLists.Load()-m.metaOne.Load())/per, "metadata-lists/op")
				b.ReportMetric(float64(m.metaOne.Load())/per, "rv-reads/op")
				b.ReportMetric(float64(m.exactLists.Load())/per, "exact-reads/op")
				b.ReportMetric(float64(m.watches.Load())/per, "WATCHes/op")
				b.ReportMetric(float64(m.bytes.Load())/per/(1<<20), "MiB-read/op")
				b.ReportMetric(float64(m.fullListBytes.Load())/per/(1<<20), "MiB-full-LIST/op")
				b.ReportMetric(loadAverage(), "load1")
				if q := m.fullListQuery.Load(); q != nil {
					b.Logf("full LISTs: %d, %.1f MiB, the last one ?%s", m.lists.Load()-m.metaLists.Load()-m.exactLists.Load(), float64(m.fullListBytes.Load())/(1<<20), *q)
				}
			}
			cold := func(b *testing.B, start func(base *rest.Config, ns string, m *meter) (*agent, error)) {
				b.StopTimer()
				m := &meter{}
				var cpu, elapsed time.Duration
				for range b.N {
					cpu0, _ := c.APIServerCPU()
					t0 := time.Now()
					b.StartTimer()
					a, err := start(c.RESTConfig(), ns, m)
					if err != nil {
						b.Fatal(err)
					}
					if !cache.WaitForCacheSync(b.Context().Done(), a.inf.HasSynced) {
						b.Fatal("not synced")
					}
					b.StopTimer()
					elapsed += time.Since(t0)
					cpu1, _ := c.APIServerCPU()
					cpu += cpu1 - cpu0
					if err := a.stop(); err != nil {
						b.Fatal(err)
					}
				}
				report(b, cpu, elapsed, m)
			}
			b.Run("client-go=watchlist", func(b *testing.B) { cold(b, startAgentJSON) })
			b.Run("client-go=list", func(b *testing.B) {
				clientfeaturestesting.SetFeatureDuringTest(b, clientfeatures.WatchListClient, false)
				cold(b, startAgentJSON)
			})
			// client-go's generated informer over a clientset, as
			// informers.NewSharedInformerFactory builds it: its typed
			// client asks for protobuf.
			b.Run("client-go=watchlist-protobuf", func(b *testing.B) { cold(b, startTypedClientGo) })
			b.Run("client-go=list-protobuf", func(b *testing.B) {
				clientfeaturestesting.SetFeatureDuringTest(b, clientfeatures.WatchListClient, false)
				cold(b, startTypedClientGo)
			})
			path := filepath.Join(b.TempDir(), "fresh.db")
			warm := func(b *testing.B, changes int, restart bool, ratio float64, bookmarkWait time.Duration) {
				b.StopTimer()
				m := &meter{}
				var cpu, elapsed time.Duration
				var loaded, live time.Duration
				defer func() {
					// From Run (the factory's Start) to the moments.
					b.ReportMetric(float64(loaded.Microseconds())/1e3/float64(b.N), "loaded-ms/op")
					b.ReportMetric(float64(live.Microseconds())/1e3/float64(b.N), "live-ms/op")
				}()
				for range b.N {
					change(changes)
					if restart {
						if err := c.StopAPIServer(); err != nil {
							b.Fatal(err)
						}
						if err := c.StartAPIServer(); err != nil {
							b.Fatal(err)
						}
					}
					cpu0, _ := c.APIServerCPU()
					t0 := time.Now()
					b.StartTimer()
					a, err := startFreshAgent(c, ns, path, m, ratio, bookmarkWait)
					if err != nil {
						b.Fatal(err)
					}
					if !cache.WaitForCacheSync(b.Context().Done(), a.inf.HasSynced) {
						b.Fatal("not synced")
					}
					b.StopTimer()
					elapsed += time.Since(t0)
					cpu1, _ := c.APIServerCPU()
					cpu += cpu1 - cpu0
					h := a.inf.Health()
					loaded += h.LoadedAfter
					live += h.LiveAfter
					if h := a.inf.Health(); !h.Fresh || !a.inf.Decision().Warm {
						b.Fatalf("not a fresh warm start: %+v %+v", h, a.inf.Decision())
					}
					if got := a.inf.Indexer().Len(); got != n {
						b.Fatalf("%d objects, want %d", got, n)
					}
					if err := a.stop(); err != nil {
						b.Fatal(err)
					}
				}
				report(b, cpu, elapsed, m)
			}
			// Write the file once (a cold start).
			a, err := startFreshAgent(c, ns, path, &meter{}, 0, -1)
			if err != nil {
				b.Fatal(err)
			}
			if !cache.WaitForCacheSync(b.Context().Done(), a.inf.HasSynced) {
				b.Fatal("not synced")
			}
			if err := a.stop(); err != nil {
				b.Fatal(err)
			}
			// Fresh by the metadata list's diff, and by a bookmark of the
			// resumed watch (FreshBookmarkWait, long enough here that the
			// bookmark decides: a metadata list there says it did not;
			// rv-reads are its one-object reads of the server's
			// resourceVersion), after 0, 10 and 10% of the Pods changed
			// while the agent was down.
			for _, k := range []int{0, 10, n / 10} {
				b.Run(fmt.Sprintf("boltinformer=fresh-list/changed=%d", k), func(b *testing.B) { warm(b, k, false, 0, -1) })
				b.Run(fmt.Sprintf("boltinformer=fresh-bookmark/changed=%d", k), func(b *testing.B) { warm(b, k, false, 0, benchBookmarkWait) })
			}
			// After an apiserver restart, 1% changed: the partial relist
			// (forced, ratio 1) against the full one. With
			// BOLTINFORMER_BENCH_CROSSOVER=1, at 10% and 20% too: where
			// they cross is PartialRelistRatio's default.
			pcts := []int{1}
			if os.Getenv("BOLTINFORMER_BENCH_CROSSOVER") != "" {
				pcts = append(pcts, 10, 20)
			}
			for _, pct := range pcts {
				k := n * pct / 100
				b.Run(fmt.Sprintf("boltinformer=410/changed=%d%%/partial", pct), func(b *testing.B) { warm(b, k, true, 1, -1) })
				b.Run(fmt.Sprintf("boltinformer=410/changed=%d%%/full", pct), func(b *testing.B) { warm(b, k, true, -1, -1) })
			}
		})
	}
}

// benchBookmarkWait is the fresh-bookmark starts' FreshBookmarkWait.
const benchBookmarkWait = 20 * time.Second

// loadAverage is the machine's 1-minute load average (0 if unknown): the
// machine is shared, and every published figure carries it.
func loadAverage() float64 {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	var l float64
	if _, err := fmt.Sscan(string(raw), &l); err != nil {
		return 0
	}
	return l
}

// heartbeat renews a Lease in kube-system every period until stop is
// called (harness.Heartbeat), as a live cluster's leader elections do.
func heartbeat(tb testing.TB, cs kubernetes.Interface, period time.Duration) (stop func()) {
	tb.Helper()
	stop, err := harness.Heartbeat(cs, "kube-system", "bench-heartbeat", period)
	if err != nil {
		tb.Fatal(err)
	}
	return stop
}

// startAgentJSON starts client-go's informer over a REST client that
// reads JSON (client-go's default content type for a rest.Config).
func startAgentJSON(base *rest.Config, ns string, m *meter) (*agent, error) {
	return startAgent(base, clientGo, ns, "", "", m)
}

// startTypedClientGo starts client-go's Pod informer as its generated
// informers build it over a clientset (informers.NewSharedInformerFactory):
// the typed client reads protobuf.
func startTypedClientGo(base *rest.Config, ns string, m *meter) (*agent, error) {
	tr := newTransport(m)
	cs, err := kubernetes.NewForConfig(agentConfig(base, tr))
	if err != nil {
		return nil, err
	}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	a := &agent{kind: clientGo, tr: tr, done: make(chan struct{}), inf: f.Core().V1().Pods().Informer()}
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	go func() {
		defer close(a.done)
		a.inf.RunWithContext(ctx)
	}()
	return a, nil
}
