package indexer_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer/indexer"
	"github.com/boltinformer/boltinformer/internal/testobj"
	"github.com/boltinformer/boltinformer/store"
)

// Benchmarks compare client-go's indexer with ours in both modes, side by
// side in one run, as impl=<impl>/objects=<n>. The objects are testobj
// Pods (~2 KB of protobuf), 100 per namespace. 10k objects by default;
// BOLTINFORMER_BENCH_LARGE=1 adds 100k. Read benchmarks share one store
// per impl and size (written, flushed, closed and reopened: a warm start);
// write benchmarks build their own.

const (
	implClientGo = "client-go"
	implFull     = "full"
	implBounded  = "bounded"
)

var readImpls = []string{implClientGo, implFull, implBounded}

func benchSizes() []int {
	if os.Getenv("BOLTINFORMER_BENCH_LARGE") == "1" {
		return []int{10000, 100000}
	}
	return []int{10000}
}

func benchIndexers() cache.Indexers {
	return cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc, "node": nodeIndexFunc}
}

var (
	benchMu       sync.Mutex
	benchPodPools = map[int][]*corev1.Pod{}
	benchFixtures = map[string]*benchFixture{}
	benchDirs     []string
)

// benchPods returns n Pods, 100 per namespace and ~30 per node, built once.
func benchPods(n int) []*corev1.Pod {
	benchMu.Lock()
	defer benchMu.Unlock()
	if p, ok := benchPodPools[n]; ok {
		return p
	}
	pods := make([]*corev1.Pod, n)
	for i := range pods {
		pods[i] = testobj.Pod(i, max(1, n/100), max(1, n/30), "1")
	}
	benchPodPools[n] = pods
	return pods
}

func podList(pods []*corev1.Pod) []any {
	l := make([]any, len(pods))
	for i, p := range pods {
		l[i] = p
	}
	return l
}

func benchDir(b *testing.B) string {
	d, err := os.MkdirTemp("", "boltinformer-bench-")
	if err != nil {
		b.Fatal(err)
	}
	benchMu.Lock()
	benchDirs = append(benchDirs, d)
	benchMu.Unlock()
	return d
}

// benchFixture is a loaded indexer shared by the read benchmarks.
type benchFixture struct {
	ix         cache.Indexer
	keys       []string // a random permutation of all keys
	namespaces []string
	close      func()
}

// openOurs writes pods to a new file, closes it and opens it again in mode
// (a warm start).
func openOurs(b *testing.B, mode indexer.Mode, pods []*corev1.Pod, dbOpts *store.Options) (*indexer.Indexer, *store.DB) {
	path := filepath.Join(benchDir(b), "cache.db")
	db, err := store.Open(path, dbOpts)
	if err != nil {
		b.Fatal(err)
	}
	x, err := indexer.Open(db, informerName, benchIndexers(), &indexer.Options{Example: &corev1.Pod{}, Mode: mode})
	if err != nil {
		b.Fatal(err)
	}
	if err := x.Replace(podList(pods), "1"); err != nil {
		b.Fatal(err)
	}
	if err := x.Close(); err != nil {
		b.Fatal(err)
	}
	x, err = indexer.Open(db, informerName, benchIndexers(), &indexer.Options{Example: &corev1.Pod{}, Mode: mode})
	if err != nil {
		b.Fatal(err)
	}
	// The read benchmarks measure the steady state: a Full indexer's
	// objects decoded (the warm load leaves them to a background fill).
	<-x.Decoded()
	return x, db
}

func fixture(b *testing.B, impl string, n int) *benchFixture {
	id := fmt.Sprintf("%s/%d", impl, n)
	benchMu.Lock()
	f := benchFixtures[id]
	benchMu.Unlock()
	if f != nil {
		return f
	}
	pods := benchPods(n)
	f = &benchFixture{close: func() {}}
	switch impl {
	case implClientGo:
		ix := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, benchIndexers())
		if err := ix.Replace(podList(pods), "1"); err != nil {
			b.Fatal(err)
		}
		f.ix = ix
	default:
		mode := indexer.Full
		if impl == implBounded {
			mode = indexer.Bounded
		}
		x, db := openOurs(b, mode, pods, nil)
		f.ix = x
		f.close = func() { _ = x.Close(); _ = db.Close() }
	}
	f.keys = f.ix.ListKeys()
	rand.New(rand.NewSource(1)).Shuffle(len(f.keys), func(i, j int) { f.keys[i], f.keys[j] = f.keys[j], f.keys[i] })
	f.namespaces = f.ix.ListIndexFuncValues(cache.NamespaceIndex)
	benchMu.Lock()
	benchFixtures[id] = f
	benchMu.Unlock()
	return f
}

// closeBenchFixtures is called by TestMain after all benchmarks.
func closeBenchFixtures() {
	benchMu.Lock()
	defer benchMu.Unlock()
	for _, f := range benchFixtures {
		f.close()
	}
	benchFixtures = map[string]*benchFixture{}
	for _, d := range benchDirs {
		_ = os.RemoveAll(d)
	}
	benchDirs = nil
}

// cpuTime returns the CPU time (user and system, all threads) the process
// has used. The machines are shared and noisy: CPU time per op is less
// disturbed by other processes than wall time, and counts the work of the
// background committer and of the garbage collector too.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuMeter adds up the CPU time of the timed sections of a benchmark.
type cpuMeter struct{ total, from time.Duration }

func (m *cpuMeter) start() { m.from = cpuTime() }
func (m *cpuMeter) stop()  { m.total += cpuTime() - m.from }

// report adds cpu-ns/op (and cpu-ns/obj when each op is objs objects).
func (m *cpuMeter) report(b *testing.B, objs int) {
	if b.N == 0 {
		return
	}
	b.ReportMetric(float64(m.total.Nanoseconds())/float64(b.N), "cpu-ns/op")
	if objs > 1 {
		b.ReportMetric(float64(m.total.Nanoseconds())/float64(b.N*objs), "cpu-ns/obj")
	}
}

func eachRead(b *testing.B, fn func(b *testing.B, f *benchFixture)) {
	for _, n := range benchSizes() {
		for _, impl := range readImpls {
			b.Run(fmt.Sprintf("impl=%s/objects=%d", impl, n), func(b *testing.B) {
				f := fixture(b, impl, n)
				b.ReportAllocs()
				runtime.GC() // of the fixture's garbage, not during the run
				var m cpuMeter
				m.start()
				fn(b, f)
				m.stop()
				m.report(b, 1)
			})
		}
	}
}

// BenchmarkGet is GetByKey of uniformly random keys (in bounded mode, most
// miss the decoded-object cache of DefaultCacheSize and decode from bbolt).
func BenchmarkGet(b *testing.B) {
	eachRead(b, func(b *testing.B, f *benchFixture) {
		i := 0
		for b.Loop() {
			if _, ok, _ := f.ix.GetByKey(f.keys[i%len(f.keys)]); !ok {
				b.Fatal("missing")
			}
			i++
		}
	})
}

// BenchmarkGetHot is GetByKey of 512 keys, which fit in the bounded mode's
// cache.
func BenchmarkGetHot(b *testing.B) {
	eachRead(b, func(b *testing.B, f *benchFixture) {
		hot := f.keys[:512]
		for _, k := range hot { // warm the cache
			_, _, _ = f.ix.GetByKey(k)
		}
		i := 0
		for b.Loop() {
			if _, ok, _ := f.ix.GetByKey(hot[i%len(hot)]); !ok {
				b.Fatal("missing")
			}
			i++
		}
	})
}

// BenchmarkByIndex is ByIndex on the namespace index: 100 objects each.
func BenchmarkByIndex(b *testing.B) {
	eachRead(b, func(b *testing.B, f *benchFixture) {
		i := 0
		for b.Loop() {
			objs, err := f.ix.ByIndex(cache.NamespaceIndex, f.namespaces[i%len(f.namespaces)])
			if err != nil || len(objs) != 100 {
				b.Fatalf("%d objects, %v", len(objs), err)
			}
			i++
		}
	})
}

// BenchmarkList lists every object.
func BenchmarkList(b *testing.B) {
	eachRead(b, func(b *testing.B, f *benchFixture) {
		for b.Loop() {
			if l := f.ix.List(); len(l) != len(f.keys) {
				b.Fatalf("%d objects", len(l))
			}
		}
	})
}

// writeImpl is an implementation for the write benchmarks.
type writeImpl struct {
	name   string
	mode   indexer.Mode
	noSync bool
	ours   bool
	floor  bool // the floor of a durable write (floor_bench_test.go)
}

var writeImpls = []writeImpl{
	{name: implClientGo},
	{name: implFull, ours: true},
	{name: implBounded, mode: indexer.Bounded, ours: true},
	{name: "full-nosync", ours: true, noSync: true},
	{name: "bounded-nosync", mode: indexer.Bounded, ours: true, noSync: true},
	{name: "floor", floor: true},
	{name: "floor-nosync", floor: true, noSync: true},
}

// writeTarget is an indexer to write to, with what it takes to finish a
// batch (Flush) and to dispose of it.
type writeTarget struct {
	ix    cache.Indexer
	flush func() error
	close func()
	// batches logs the number of mutations of each commit (ours).
	batches *batchLog
}

func newWriteTarget(b *testing.B, w writeImpl, preload []*corev1.Pod) *writeTarget {
	if !w.ours {
		ix := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, benchIndexers())
		if preload != nil {
			_ = ix.Replace(podList(preload), "1")
		}
		return &writeTarget{ix: ix, flush: func() error { return nil }, close: func() {}}
	}
	dir := benchDir(b)
	db, err := store.Open(filepath.Join(dir, "cache.db"), &store.Options{NoSync: w.noSync})
	if err != nil {
		b.Fatal(err)
	}
	// The default group commit: up to 1000 mutations or 100ms per
	// transaction, by the indexer's own committer.
	log := &batchLog{}
	x, err := indexer.Open(db, informerName, benchIndexers(), &indexer.Options{
		Example: &corev1.Pod{}, Mode: w.mode,
		CommitterOptions: &store.CommitterOptions{OnCommit: log.add},
	})
	if err != nil {
		b.Fatal(err)
	}
	if preload != nil {
		_ = x.Replace(podList(preload), "1")
		if err := x.Flush(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	log.take()
	return &writeTarget{
		ix:      x,
		flush:   func() error { return x.Flush(context.Background()) },
		close:   func() { _ = x.Close(); _ = db.Close(); _ = os.RemoveAll(dir) },
		batches: log,
	}
}

func reportPerObject(b *testing.B, n int) {
	perObj := float64(b.Elapsed().Nanoseconds()) / float64(b.N*n)
	b.ReportMetric(perObj, "ns/obj")
	b.ReportMetric(1e9/perObj, "obj/s")
}

// BenchmarkAdd adds n Pods one by one to an empty indexer; for ours the
// final Flush (the last commit with its fsync) is part of each iteration.
// ns/op is for n objects; ns/obj and obj/s are per object.
func BenchmarkAdd(b *testing.B) {
	for _, n := range benchSizes() {
		for _, w := range writeImpls {
			b.Run(fmt.Sprintf("impl=%s/objects=%d", w.name, n), func(b *testing.B) {
				if w.floor {
					benchFloorWrite(b, "add", w.noSync, n)
					return
				}
				pods := benchPods(n)
				b.ReportAllocs()
				var m cpuMeter
				var commits int
				for b.Loop() {
					b.StopTimer()
					t := newWriteTarget(b, w, nil)
					runtime.GC()
					b.StartTimer()
					m.start()
					for _, p := range pods {
						if err := t.ix.Add(p); err != nil {
							b.Fatal(err)
						}
					}
					if err := t.flush(); err != nil {
						b.Fatal(err)
					}
					m.stop()
					b.StopTimer()
					t.close()
					commits += t.batches.keep("add", w, n)
					b.StartTimer()
				}
				reportPerObject(b, n)
				m.report(b, n)
				reportCommits(b, commits)
			})
		}
	}
}

// BenchmarkUpdate updates every one of n stored Pods once per iteration;
// for ours the final Flush is part of each iteration.
func BenchmarkUpdate(b *testing.B) {
	for _, n := range benchSizes() {
		for _, w := range writeImpls {
			b.Run(fmt.Sprintf("impl=%s/objects=%d", w.name, n), func(b *testing.B) {
				if w.floor {
					benchFloorWrite(b, "update", w.noSync, n)
					return
				}
				pods := benchPods(n)
				t := newWriteTarget(b, w, pods)
				defer t.close()
				runtime.GC()
				b.ReportAllocs()
				var m cpuMeter
				m.start()
				for b.Loop() {
					for _, p := range pods {
						if err := t.ix.Update(p); err != nil {
							b.Fatal(err)
						}
					}
					if err := t.flush(); err != nil {
						b.Fatal(err)
					}
				}
				m.stop()
				reportPerObject(b, n)
				m.report(b, n)
				reportCommits(b, t.batches.keep("update", w, n))
			})
		}
	}
}

// BenchmarkHeap measures the live heap per object (heapB/obj) of an
// indexer holding n Pods: client-go's filled with objects decoded from
// their protobuf records (as a reflector hands them over), ours opened
// from a written file (a warm start; both modes measured once their
// background pass is done: Full mode's decoding, and in both the check of
// the loaded index values), plus the data bbolt holds per object
// (diskB/obj).
// warm-heapB/obj is the same after every object was read once (a bounded
// indexer's cache full). ns/op is the time to fill client-go's indexer, or
// to open ours (Full mode's payloads are decoded after Open returns).
func BenchmarkHeap(b *testing.B) {
	for _, n := range benchSizes() {
		for _, impl := range readImpls {
			b.Run(fmt.Sprintf("impl=%s/objects=%d", impl, n), func(b *testing.B) {
				path := filepath.Join(benchDir(b), "cache.db")
				db, err := store.Open(path, nil)
				if err != nil {
					b.Fatal(err)
				}
				defer db.Close()
				x, err := indexer.Open(db, informerName, benchIndexers(), &indexer.Options{Example: &corev1.Pod{}})
				if err != nil {
					b.Fatal(err)
				}
				_ = x.Replace(podList(benchPods(n)), "1")
				if err := x.Close(); err != nil {
					b.Fatal(err)
				}
				codec := x.Codec()
				var records []*store.Record
				if impl == implClientGo {
					err := db.View(func(tx *store.Tx) error {
						return tx.ForEach(informerName, func(_ string, r *store.Record) error {
							records = append(records, r)
							return nil
						})
					})
					if err != nil {
						b.Fatal(err)
					}
				}
				// The data bbolt holds (its high-water mark), not the file's
				// length: bbolt grows the file ahead of the data.
				var size int64
				if err := db.View(func(tx *store.Tx) error { size = tx.Bolt().Size(); return nil }); err != nil {
					b.Fatal(err)
				}
				var heap, warm float64
				b.ReportAllocs()
				for b.Loop() {
					b.StopTimer()
					before := heapInUse()
					b.StartTimer()
					var keep any
					switch impl {
					case implClientGo:
						ix := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, benchIndexers())
						for _, r := range records {
							obj, err := codec.Decode("", r)
							if err != nil {
								b.Fatal(err)
							}
							_ = ix.Add(obj)
						}
						keep = ix
					default:
						mode := indexer.Full
						if impl == implBounded {
							mode = indexer.Bounded
						}
						x, err := indexer.Open(db, informerName, benchIndexers(), &indexer.Options{Example: &corev1.Pod{}, Mode: mode})
						if err != nil {
							b.Fatal(err)
						}
						keep = x
					}
					b.StopTimer()
					if x, ok := keep.(*indexer.Indexer); ok {
						// Full mode decodes the loaded objects in the
						// background: its heap is that once they are. Both
						// modes check the loaded index values in the
						// background (a Bounded pass holds 256 decoded
						// objects at a time, and what it allocates while
						// heapInUse collects counts as live): the heap an
						// indexer holds is that once the pass is done.
						<-x.Decoded()
						<-x.IndexesVerified()
					}
					heap = (float64(heapInUse()) - float64(before)) / float64(n)
					// Warm: every object read once, so a bounded indexer's
					// decoded-object cache is full (DefaultCacheSize).
					ix := keep.(cache.Indexer)
					for _, k := range ix.ListKeys() {
						_, _, _ = ix.GetByKey(k)
					}
					warm = (float64(heapInUse()) - float64(before)) / float64(n)
					runtime.KeepAlive(keep)
					if x, ok := keep.(*indexer.Indexer); ok {
						_ = x.Close()
					}
					keep = nil
					b.StartTimer()
				}
				b.ReportMetric(heap, "heapB/obj")
				b.ReportMetric(warm, "warm-heapB/obj")
				if impl != implClientGo {
					b.ReportMetric(float64(size)/float64(n), "diskB/obj")
				}
			})
		}
	}
}

// BenchmarkWarmLoad is store.Open plus indexer.Open of a file written and
// closed cleanly: from=snapshot reads the envelope snapshot Close wrote
// (Full mode's default), from=records walks and verifies every record
// (after a crash, with VerifyRecords, and in Bounded mode). The background
// fill is held, so that only the load is timed.
func BenchmarkWarmLoad(b *testing.B) {
	for _, n := range benchSizes() {
		path := filepath.Join(benchDir(b), "cache.db")
		db, err := store.Open(path, nil)
		if err != nil {
			b.Fatal(err)
		}
		x, err := indexer.Open(db, informerName, benchIndexers(), &indexer.Options{Example: &corev1.Pod{}})
		if err != nil {
			b.Fatal(err)
		}
		if err := x.Replace(podList(benchPods(n)), "1"); err != nil {
			b.Fatal(err)
		}
		if err := errors.Join(x.Close(), db.Close()); err != nil {
			b.Fatal(err)
		}
		for _, from := range []string{"snapshot", "records"} {
			b.Run(fmt.Sprintf("from=%s/objects=%d", from, n), func(b *testing.B) {
				release := indexer.HoldFill()
				defer release()
				b.ReportAllocs()
				var m cpuMeter
				for range b.N {
					b.StopTimer()
					runtime.GC()
					b.StartTimer()
					m.start()
					db, err := store.Open(path, nil)
					if err != nil {
						b.Fatal(err)
					}
					x, err := indexer.Open(db, informerName, benchIndexers(), &indexer.Options{Example: &corev1.Pod{}, VerifyRecords: from == "records"})
					if err != nil {
						b.Fatal(err)
					}
					m.stop()
					b.StopTimer()
					if err := errors.Join(x.Close(), db.Close()); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
				m.report(b, n)
			})
		}
	}
}

// changedBenchIndexers are benchIndexers with the node index's function
// changed under the same name: every object's value differs from the
// one the file holds.
func changedBenchIndexers() cache.Indexers {
	ix := benchIndexers()
	ix["node"] = func(obj any) ([]string, error) {
		v, err := nodeIndexFunc(obj)
		for i := range v {
			v[i] = "zone-of-" + v[i]
		}
		return v, err
	}
	return ix
}

// copyFile copies the file at from to to.
func copyFile(b *testing.B, from, to string) {
	raw, err := os.ReadFile(from)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(to, raw, 0o600); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkWarmFill is a warm start until every loaded object is decoded
// (Full mode) and its index values checked against the index functions
// (both modes; verify.go): store.Open plus indexer.Open (open-ms), a
// ByIndex issued at once (first-byindex-ms: it waits for the check), and
// the end of the background pass (fill-ms), all from the start. from=
// as in BenchmarkWarmLoad. funcs=changed opens with the node index's
// function changed, so that every record is rewritten: flush-ms is the
// commit of the rewrites (the file is restored before each iteration).
func BenchmarkWarmFill(b *testing.B) {
	for _, n := range benchSizes() {
		dir := benchDir(b)
		pristine := filepath.Join(dir, "pristine.db")
		db, err := store.Open(pristine, nil)
		if err != nil {
			b.Fatal(err)
		}
		x, err := indexer.Open(db, informerName, benchIndexers(), &indexer.Options{Example: &corev1.Pod{}})
		if err != nil {
			b.Fatal(err)
		}
		if err := x.Replace(podList(benchPods(n)), "1"); err != nil {
			b.Fatal(err)
		}
		if err := errors.Join(x.Close(), db.Close()); err != nil {
			b.Fatal(err)
		}
		ns := benchPods(n)[0].Namespace
		for _, c := range []struct {
			mode indexer.Mode
			from string
		}{{indexer.Full, "snapshot"}, {indexer.Full, "records"}, {indexer.Bounded, "records"}} {
			for _, funcs := range []string{"same", "changed"} {
				b.Run(fmt.Sprintf("mode=%s/from=%s/funcs=%s/objects=%d", modeName(c.mode), c.from, funcs, n), func(b *testing.B) {
					path := filepath.Join(dir, "cache.db")
					indexers := benchIndexers
					if funcs == "changed" {
						indexers = changedBenchIndexers
					}
					quiet := logr.Discard() // the check logs what it fixes
					b.ReportAllocs()
					var m cpuMeter
					var open, first, fill, flush time.Duration
					for range b.N {
						b.StopTimer()
						copyFile(b, pristine, path)
						runtime.GC()
						b.StartTimer()
						m.start()
						start := time.Now()
						db, err := store.Open(path, nil)
						if err != nil {
							b.Fatal(err)
						}
						x, err := indexer.Open(db, informerName, indexers(), &indexer.Options{Example: &corev1.Pod{}, Mode: c.mode, VerifyRecords: c.from == "records", Logger: &quiet})
						if err != nil {
							b.Fatal(err)
						}
						open += time.Since(start)
						if objs, err := x.ByIndex(cache.NamespaceIndex, ns); err != nil || len(objs) != 100 {
							b.Fatalf("ByIndex: %d objects, %v", len(objs), err)
						}
						first += time.Since(start)
						<-x.Decoded()
						if v, ok := any(x).(interface{ IndexesVerified() <-chan struct{} }); ok {
							<-v.IndexesVerified()
						}
						fill += time.Since(start)
						if err := x.Flush(context.Background()); err != nil {
							b.Fatal(err)
						}
						flush += time.Since(start)
						m.stop()
						b.StopTimer()
						if err := errors.Join(x.Close(), db.Close()); err != nil {
							b.Fatal(err)
						}
						b.StartTimer()
					}
					ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
					b.ReportMetric(ms(open), "open-ms")
					b.ReportMetric(ms(first), "first-byindex-ms")
					b.ReportMetric(ms(fill), "fill-ms")
					b.ReportMetric(ms(flush), "flush-ms")
					m.report(b, 1)
				})
			}
		}
	}
}
