package fleet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientfeatures "k8s.io/client-go/features"
	clientfeaturestesting "k8s.io/client-go/features/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer/test/kas/harness"
)

// benchSizes are the object counts of BenchmarkInformerRestart: 10k, and
// 100k with BOLTINFORMER_BENCH_LARGE=1.
func benchSizes() []int {
	if os.Getenv("BOLTINFORMER_BENCH_LARGE") != "" {
		return []int{10_000, 100_000}
	}
	return []int{10_000}
}

var (
	seededMu sync.Mutex
	seeded   = map[int]string{} // objects -> namespace
)

// benchNamespace returns a namespace holding n Pods, creating it once.
func benchNamespace(b *testing.B, c *harness.Cluster, n int) string {
	b.Helper()
	seededMu.Lock()
	defer seededMu.Unlock()
	if ns, ok := seeded[n]; ok {
		return ns
	}
	cs, err := c.Clientset()
	if err != nil {
		b.Fatal(err)
	}
	ns := fmt.Sprintf("bench-%d", n)
	start := time.Now()
	if err := createPods(context.Background(), cs, ns, n,
		func(i int) string { return fmt.Sprintf("p-%06d", i) },
		func(i int) string { return fmt.Sprintf("bench-node-%d", i%100) }); err != nil {
		b.Fatal(err)
	}
	b.Logf("created %d Pods in %s", n, time.Since(start).Round(time.Second))
	seeded[n] = ns
	return ns
}

// restartOnce starts one informer on the Pods of ns; the timer runs until
// it has synced. It returns when the informer's first WATCH was answered
// and current holds for its store (nil: at once), with the time until
// then, the apiserver CPU, and the LISTs and bytes of that start.
func restartOnce(b *testing.B, c *harness.Cluster, k kind, ns, path string, want int, current func(cache.Store) bool) (caughtUp time.Duration, cpu time.Duration, m *meter) {
	b.Helper()
	m = &meter{}
	cpu0, _ := c.APIServerCPU()
	b.StartTimer()
	t0 := time.Now()
	a, err := startAgent(c.RESTConfig(), k, ns, "", path, m)
	if err != nil {
		b.Fatal(err)
	}
	timeout := time.After(10 * time.Minute)
	select {
	case <-a.inf.HasSyncedChecker().Done():
	case <-timeout:
		b.Fatal("not synced within 10 minutes")
	}
	b.StopTimer()
	select {
	case <-a.tr.watching:
	case <-timeout:
		b.Fatal("no watch within 10 minutes")
	}
	for current != nil && !current(a.inf.GetStore()) {
		select {
		case <-timeout:
			b.Fatal("not caught up within 10 minutes")
		case <-time.After(2 * time.Millisecond):
		}
	}
	caughtUp = time.Since(t0)
	cpu1, _ := c.APIServerCPU()
	if got := len(a.inf.GetStore().ListKeys()); got != want {
		b.Fatalf("%d objects, want %d", got, want)
	}
	if err := a.stop(); err != nil {
		b.Fatal(err)
	}
	return caughtUp, cpu1 - cpu0, m
}

// BenchmarkInformerRestart: one informer over 10k Pods (100k with
// BOLTINFORMER_BENCH_LARGE=1) of about 3 KB (JSON) against the real
// apiserver: client-go's cold list and sync (WatchList, the default, and
// LIST), boltinformer's cold start, and boltinformer's warm restart from its
// file (10 Pods changed while it was down). ns/op is the time until
// HasSynced; current-ms/op until the first WATCH was answered and the
// changes made while down are in the cache. Run with -benchtime 3x.
func BenchmarkInformerRestart(b *testing.B) {
	c := sharedCluster(b)
	for _, n := range benchSizes() {
		b.Run(fmt.Sprintf("objects=%d", n), func(b *testing.B) {
			ns := benchNamespace(b, c, n)
			run := func(b *testing.B, k kind, path func(i int) string, before func(i int), current func(cache.Store) bool) {
				b.ReportAllocs()
				b.StopTimer()
				var caughtUp, cpu time.Duration
				var lists, bytes int64
				for i := range b.N {
					if before != nil {
						before(i)
					}
					w, cp, m := restartOnce(b, c, k, ns, path(i), n, current)
					caughtUp += w
					cpu += cp
					lists += m.lists.Load()
					bytes += m.bytes.Load()
				}
				per := float64(b.N)
				b.ReportMetric(float64(caughtUp.Milliseconds())/per, "current-ms/op")
				b.ReportMetric(float64(cpu.Milliseconds())/per, "apiserver-cpu-ms/op")
				b.ReportMetric(float64(lists)/per, "LISTs/op")
				b.ReportMetric(float64(bytes)/per/(1<<20), "MiB-read/op")
			}
			none := func(int) string { return "" }
			b.Run("client-go=watchlist", func(b *testing.B) { run(b, clientGo, none, nil, nil) })
			b.Run("client-go=list", func(b *testing.B) {
				clientfeaturestesting.SetFeatureDuringTest(b, clientfeatures.WatchListClient, false)
				run(b, clientGo, none, nil, nil)
			})
			b.Run("boltinformer=cold", func(b *testing.B) {
				dir := b.TempDir() // each run of this function starts from empty files
				run(b, bolt, func(i int) string { return filepath.Join(dir, fmt.Sprintf("cold-%d.db", i)) }, nil, nil)
			})
			warm := filepath.Join(b.TempDir(), "warm.db")
			b.StopTimer()
			restartOnce(b, c, bolt, ns, warm, n, nil) // write the file
			cs, err := c.Clientset()
			if err != nil {
				b.Fatal(err)
			}
			gen := 0
			b.Run("boltinformer=warm", func(b *testing.B) {
				run(b, bolt, func(int) string { return warm }, func(int) {
					// While it is down, 10 Pods change.
					gen++
					for j := range 10 {
						p, err := cs.CoreV1().Pods(ns).Get(context.Background(), fmt.Sprintf("p-%06d", j), metav1.GetOptions{})
						if err != nil {
							b.Fatal(err)
						}
						p.Labels["gen"] = fmt.Sprint(gen)
						if _, err := cs.CoreV1().Pods(ns).Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
							b.Fatal(err)
						}
					}
				}, func(s cache.Store) bool {
					for j := range 10 {
						obj, ok, _ := s.GetByKey(fmt.Sprintf("%s/p-%06d", ns, j))
						if !ok || obj.(*corev1.Pod).Labels["gen"] != fmt.Sprint(gen) {
							return false
						}
					}
					return true
				})
			})
		})
	}
}
