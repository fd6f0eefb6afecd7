package fleet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	clientfeatures "k8s.io/client-go/features"
	clientfeaturestesting "k8s.io/client-go/features/testing"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer"
)

// TestBenchmarkFreshTimes (issue 24, item 1; BOLTINFORMER_BENCH_FRESH=1):
// the time from the start until synced, client-go's cold start against
// boltinformer's warm restart with SyncAfterFresh (synced: the cache
// equals the server's state), interleaved run by run, at 1,000 and 10,000
// realistic Pods with 1% changed before each warm start, in a live cluster
// (a lease renewed every 2 s). Each variant's median and worst of
// BOLTINFORMER_BENCH_FRESH_RUNS runs (default 10) and their ratio to
// client-go's default (a clientset's informer: protobuf, WatchList) are
// logged, and written as a Markdown table to BOLTINFORMER_BENCH_FRESH_OUT
// when set. Synced is waited for on the informers' sync channels
// (cache.WaitFor), not client-go's 100 ms polls, in every variant.
func TestBenchmarkFreshTimes(t *testing.T) {
	if os.Getenv("BOLTINFORMER_BENCH_FRESH") == "" {
		t.Skip("set BOLTINFORMER_BENCH_FRESH=1 to run the fresh-time benchmark")
	}
	runs := 10
	if v := os.Getenv("BOLTINFORMER_BENCH_FRESH_RUNS"); v != "" {
		fmt.Sscan(v, &runs)
	}
	sizes := []int{1000, 10000}
	if v := os.Getenv("BOLTINFORMER_BENCH_FRESH_SIZES"); v != "" {
		sizes = nil
		for _, f := range strings.Split(v, ",") {
			var n int
			fmt.Sscan(f, &n)
			sizes = append(sizes, n)
		}
	}
	c := sharedCluster(t)
	cs, err := c.Clientset()
	if err != nil {
		t.Fatal(err)
	}
	stopBeat := heartbeat(t, cs, 2*time.Second)
	defer stopBeat()
	var table strings.Builder
	fmt.Fprintf(&table, "| objects | start | median | worst | median / client-go's | worst / client-go's worst | load1 |\n|---|---|---|---|---|---|---|\n")
	for _, n := range sizes {
		ns := realisticNamespace(t, c, n)
		gen := 1000 * n
		change := func(k int) {
			gen++
			if err := parallel(context.Background(), k, 16, func(ctx context.Context, i int) error {
				j := i * 97 % n // spread over the collection
				return applyRealisticPod(ctx, cs, ns, fmt.Sprintf("p-%06d", j), j, gen)
			}); err != nil {
				t.Fatal(err)
			}
		}
		path := filepath.Join(t.TempDir(), "fresh.db")
		start := func(listMax int, warm bool) func() time.Duration {
			return func() time.Duration {
				if warm {
					change(max(n/100, 1))
				}
				t0 := time.Now()
				db, err := boltinformer.Open(path, nil)
				if err != nil {
					t.Fatal(err)
				}
				f, err := boltinformer.NewFactory(db, agentConfig(c.RESTConfig(), newTransport(&meter{})), &boltinformer.FactoryOptions{
					Namespace: ns, ClusterID: "fleet",
					Informer: boltinformer.InformerOptions{SyncPolicy: boltinformer.SyncAfterFresh, FreshListMax: listMax},
				})
				if err != nil {
					t.Fatal(err)
				}
				inf, err := f.PersistentInformer(&corev1.Pod{})
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				built := time.Since(t0)
				f.StartWithContext(ctx)
				if !cache.WaitFor(t.Context(), "warm", inf.HasSyncedChecker()) {
					t.Fatal("not synced")
				}
				d := time.Since(t0)
				if os.Getenv("BOLTINFORMER_BENCH_FRESH_VERBOSE") != "" {
					h := inf.Health()
					t.Logf("warm start (FreshListMax %d): built %s, then loaded %s, live %s, fresh %s (fallback %q); total %s",
						listMax, built.Round(time.Millisecond), h.LoadedAfter.Round(time.Millisecond), h.LiveAfter.Round(time.Millisecond), h.FreshAfter.Round(time.Millisecond), h.FreshFallback, d.Round(time.Millisecond))
				}
				if h := inf.Health(); !h.Fresh || inf.Decision().Warm != warm {
					t.Fatalf("not a fresh warm start: %+v", h)
				}
				cancel()
				f.Shutdown()
				if err := db.Close(); err != nil {
					t.Fatal(err)
				}
				return d
			}
		}
		// The edge agent's start (SyncAfterDiskLoad): how soon the lister
		// answers with every object, or a handler added before Run has
		// every object; and a durable handler's notifications (logged).
		agentStart := func(handler bool) func() time.Duration {
			return func() time.Duration {
				change(max(n/100, 1))
				t0 := time.Now()
				db, err := boltinformer.Open(path, nil)
				if err != nil {
					t.Fatal(err)
				}
				f, err := boltinformer.NewFactory(db, agentConfig(c.RESTConfig(), newTransport(&meter{})), &boltinformer.FactoryOptions{
					Namespace: ns, ClusterID: "fleet",
				})
				if err != nil {
					t.Fatal(err)
				}
				inf, err := f.PersistentInformer(&corev1.Pod{})
				if err != nil {
					t.Fatal(err)
				}
				var adds atomic.Int64
				all := make(chan struct{})
				if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(any) {
					if adds.Add(1) == int64(n) {
						close(all)
					}
				}}); err != nil {
					t.Fatal(err)
				}
				var durable atomic.Int64
				var keysMu sync.Mutex
				keys := map[string]bool{}
				count := func(obj any) {
					durable.Add(1)
					if k, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
						keysMu.Lock()
						keys[k] = true
						keysMu.Unlock()
					}
				}
				if _, err := inf.AddDurableEventHandler("bench", cache.ResourceEventHandlerFuncs{AddFunc: count, UpdateFunc: func(_, o any) { count(o) }, DeleteFunc: count}, cache.HandlerOptions{}); err != nil {
					t.Fatal(err)
				}
				var d time.Duration
				if !handler {
					objs, err := corev1listers.NewPodLister(inf.GetIndexer()).List(labels.Everything())
					if err != nil || len(objs) != n {
						t.Fatalf("lister: %d objects, %v", len(objs), err)
					}
					d = time.Since(t0)
				}
				ctx, cancel := context.WithCancel(context.Background())
				f.StartWithContext(ctx)
				if handler {
					<-all
					d = time.Since(t0)
				}
				if !cache.WaitFor(t.Context(), "warm", inf.HasSyncedChecker()) {
					t.Fatal("not synced")
				}
				for deadline := time.Now().Add(10 * time.Second); !inf.Health().Fresh && time.Now().Before(deadline); {
					time.Sleep(10 * time.Millisecond)
				}
				time.Sleep(300 * time.Millisecond) // the watch's backlog, to the durable handler (a count, not a time)
				if inf.Decision().Warm {
					keysMu.Lock()
					t.Logf("warm start (SyncAfterDiskLoad): a durable handler got %d notifications of %d objects, for %d of them (%d changed while down, each written twice: spec and status)", durable.Load(), n, len(keys), max(n/100, 1))
					keysMu.Unlock()
				}
				cancel()
				f.Shutdown()
				if err := db.Close(); err != nil {
					t.Fatal(err)
				}
				return d
			}
		}
		coldStart := func(list bool) func() time.Duration {
			return func() time.Duration {
				clientfeaturestesting.SetFeatureDuringTest(t, clientfeatures.WatchListClient, !list)
				t0 := time.Now()
				a, err := startTypedClientGo(c.RESTConfig(), ns, &meter{})
				if err != nil {
					t.Fatal(err)
				}
				if !cache.WaitFor(t.Context(), "cold", a.inf.HasSyncedChecker()) {
					t.Fatal("not synced")
				}
				d := time.Since(t0)
				if err := a.stop(); err != nil {
					t.Fatal(err)
				}
				return d
			}
		}
		warmStart := func(listMax int) func() time.Duration { return start(listMax, true) }
		start(0, false)()   // the file, once
		agentStart(false)() // the durable handler's position, once
		variants := []struct {
			name string
			run  func() time.Duration
		}{
			{"client-go cold, clientset (protobuf, WatchList: the default)", coldStart(false)},
			{"client-go cold, clientset (protobuf, LIST)", coldStart(true)},
			{"warm, the Factory's defaults (the metadata list at once up to 10,000 objects, else a bookmark)", warmStart(0)},
			{"warm, by a bookmark only (FreshListMax -1)", warmStart(-1)},
			{"warm, the metadata list at once (FreshListMax 1,000,000)", warmStart(1_000_000)},
			{"warm, SyncAfterDiskLoad: the lister's first answer (every object)", agentStart(false)},
			{"warm, SyncAfterDiskLoad: a handler added before Run has every object", agentStart(true)},
		}
		times := make([][]time.Duration, len(variants))
		for range runs {
			for i, v := range variants {
				times[i] = append(times[i], v.run())
			}
		}
		stat := func(ds []time.Duration) (median, worst time.Duration) {
			s := slices.Clone(ds)
			slices.Sort(s)
			return s[len(s)/2], s[len(s)-1]
		}
		baseMed, baseWorst := stat(times[0])
		for i, v := range variants {
			med, worst := stat(times[i])
			line := fmt.Sprintf("| %d | %s | %s | %s | %.2f | %.2f | %.1f |", n, v.name, med.Round(time.Millisecond), worst.Round(time.Millisecond),
				float64(med)/float64(baseMed), float64(worst)/float64(baseWorst), loadAverage())
			t.Log(line)
			fmt.Fprintln(&table, line)
		}
	}
	if out := os.Getenv("BOLTINFORMER_BENCH_FRESH_OUT"); out != "" {
		if err := os.WriteFile(out, []byte(table.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
