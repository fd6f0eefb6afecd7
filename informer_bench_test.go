package boltinformer_test

// Benchmarks side by side with client-go (test tier 6):
//
//   - BenchmarkTimeToSynced: from start to HasSynced for 10k Pods (100k
//     with BOLTINFORMER_BENCH_LARGE=1): client-go's cold list, ours cold,
//     ours warm from the file (full and bounded memory). The cold lists
//     decode a protobuf PodList as a client does with a kube-apiserver's
//     answer ("wire"); "memory" variants hand over the Source's objects
//     without any decoding, a lower bound no real client reaches.
//   - BenchmarkIngest: watch events per second until the last one reached
//     a handler (applied/s) and, for ours, a Flush made it durable
//     (events/s) with the default options (fsync'd group commits), against
//     client-go in memory: short bursts, and steady streams over a hot set
//     of keys and over keys that never repeat.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/internal/codec"
	"github.com/boltinformer/boltinformer/internal/floor"
	"github.com/boltinformer/boltinformer/internal/testobj"
	"github.com/boltinformer/boltinformer/recovery/crashtest"
	"github.com/boltinformer/boltinformer/store"
)

func benchObjects() int {
	if os.Getenv("BOLTINFORMER_BENCH_LARGE") == "1" {
		return 100_000
	}
	return 10_000
}

var podProto = protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)

// wireLW answers lists by decoding a protobuf PodList encoded once from
// its Source (the client's share of a list from kube-apiserver, without
// the network and the server), and watches from the Source.
type wireLW struct {
	src  *crashtest.Source
	body []byte
	rv   string
}

func newWireLW(b *testing.B, src *crashtest.Source) *wireLW {
	b.Helper()
	list, err := src.List(metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		b.Fatal(err)
	}
	var buf bytes.Buffer
	if err := scheme.Codecs.EncoderForVersion(podProto, corev1.SchemeGroupVersion).Encode(list, &buf); err != nil {
		b.Fatal(err)
	}
	return &wireLW{src: src, body: buf.Bytes(), rv: list.(*corev1.PodList).ResourceVersion}
}

func (w *wireLW) IsWatchListSemanticsUnSupported() bool { return true }

func (w *wireLW) List(metav1.ListOptions) (k8sruntime.Object, error) {
	obj, _, err := podProto.Decode(w.body, nil, &corev1.PodList{})
	return obj, err
}

func (w *wireLW) Watch(o metav1.ListOptions) (watch.Interface, error) { return w.src.Watch(o) }

// countHandler counts events (a handler for the registration the
// benchmark waits on).
type countHandler struct{ n atomic.Int64 }

func (c *countHandler) OnAdd(any, bool)   { c.n.Add(1) }
func (c *countHandler) OnUpdate(_, _ any) { c.n.Add(1) }
func (c *countHandler) OnDelete(any)      {}

func quietDB() *boltinformer.Options { return &boltinformer.Options{Logger: &quietLogger} }

func benchPath(b *testing.B, name string) string { return filepath.Join(b.TempDir(), name) }

// cpuTime returns the CPU time (user and system, all threads) the process
// has used: on a shared machine it varies less than the wall time.
func cpuTime() time.Duration { return readUsage().cpu }

// usage is the process's resource usage so far (zero where unknown).
type usage struct {
	cpu     time.Duration // user and system, all threads
	written int64         // bytes written to storage: output blocks of 512 bytes on Linux
}

// readUsage reads the usage with one getrusage call.
func readUsage() usage {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return usage{}
	}
	return usage{cpu: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), written: int64(ru.Oublock) * 512}
}

// timer accumulates a benchmark's custom durations, reported as means.
type timer struct {
	b     *testing.B
	total map[string]time.Duration
}

func newTimer(b *testing.B) *timer { return &timer{b: b, total: map[string]time.Duration{}} }

func (t *timer) add(unit string, d time.Duration) { t.total[unit] += d }

func (t *timer) report() {
	for unit, d := range t.total {
		t.b.ReportMetric(float64(d.Microseconds())/1000/float64(t.b.N), unit)
	}
}

// runUntilSynced runs inf with one handler until the informer has synced
// (the time is added as ms-to-synced) and the handler has handled the
// initial list (ms-to-handler-synced), measured from start; it returns a
// stop function.
func runUntilSynced(b *testing.B, tm *timer, start time.Time, cpu0 time.Duration, inf cache.SharedIndexInformer) (stop func()) {
	b.Helper()
	reg, err := inf.AddEventHandler(&countHandler{})
	if err != nil {
		b.Fatal(err)
	}
	stop = runInformer(b, inf)
	<-inf.HasSyncedChecker().Done()
	tm.add("ms-to-synced", time.Since(start))
	<-reg.HasSyncedChecker().Done()
	tm.add("ms-to-handler-synced", time.Since(start))
	tm.add("cpu-ms-to-handler-synced", cpuTime()-cpu0)
	return stop
}

// runWarmUntilSynced is runUntilSynced for a warm start: between the
// informer's HasSynced and the handler's, a lister's ByIndex of one
// namespace (ms-to-first-byindex: it waits for the check of the loaded
// index values); after them, the end of the indexer's background pass
// (ms-to-filled: every object decoded in Full mode, every loaded index
// value checked in both modes). cpu-ms-to-handler-synced is the CPU time
// until the handler has the initial list, as runUntilSynced reports it.
func runWarmUntilSynced(b *testing.B, tm *timer, start time.Time, cpu0 time.Duration, inf *boltinformer.Informer) (stop func()) {
	b.Helper()
	reg, err := inf.AddEventHandler(&countHandler{})
	if err != nil {
		b.Fatal(err)
	}
	stop = runInformer(b, inf)
	<-inf.HasSyncedChecker().Done()
	tm.add("ms-to-synced", time.Since(start))
	if objs, err := inf.GetIndexer().ByIndex(cache.NamespaceIndex, "ns-0"); err != nil || len(objs) == 0 {
		b.Fatalf("ByIndex: %d objects, %v", len(objs), err)
	}
	tm.add("ms-to-first-byindex", time.Since(start))
	<-reg.HasSyncedChecker().Done()
	tm.add("ms-to-handler-synced", time.Since(start))
	tm.add("cpu-ms-to-handler-synced", cpuTime()-cpu0)
	<-inf.Indexer().Decoded()
	if v, ok := any(inf.Indexer()).(interface{ IndexesVerified() <-chan struct{} }); ok {
		<-v.IndexesVerified()
	}
	tm.add("ms-to-filled", time.Since(start))
	tm.add("cpu-ms-to-filled", cpuTime()-cpu0)
	return stop
}

func BenchmarkTimeToSynced(b *testing.B) {
	n := benchObjects()
	b.Run(fmt.Sprintf("objects=%d", n), func(b *testing.B) {
		src := newPodSource()
		for i := range n {
			if _, err := src.Create(testobj.Pod(i, 10, 5, "")); err != nil {
				b.Fatal(err)
			}
		}
		wire := newWireLW(b, src)

		// The warm file, written once by a cold run.
		warmPath := benchPath(b, "warm.db")
		{
			db, err := boltinformer.Open(warmPath, quietDB())
			if err != nil {
				b.Fatal(err)
			}
			inf, err := db.NewInformer("pods", src, &corev1.Pod{}, 0, podIndexers(), nil)
			if err != nil {
				b.Fatal(err)
			}
			stop := runUntilSynced(b, newTimer(b), time.Now(), cpuTime(), inf)
			stop()
			if err := db.Close(); err != nil {
				b.Fatal(err)
			}
		}
		fi, err := os.Stat(warmPath)
		if err != nil {
			b.Fatal(err)
		}
		payloads, payloadCodec := readPayloads(b, warmPath)

		clientGo := func(lw cache.ListerWatcher) func(b *testing.B) {
			return func(b *testing.B) {
				b.ReportAllocs()
				tm := newTimer(b)
				for range b.N {
					b.StopTimer()
					runtime.GC()
					b.StartTimer()
					start, cpu0 := time.Now(), cpuTime()
					inf := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, podIndexers())
					stop := runUntilSynced(b, tm, start, cpu0, inf)
					b.StopTimer()
					stop()
					b.StartTimer()
				}
				tm.report()
			}
		}
		b.Run("client-go/cold/wire", clientGo(wire))
		b.Run("client-go/cold/memory", clientGo(src))

		b.Run("boltinformer/cold/wire", func(b *testing.B) {
			b.ReportAllocs()
			tm := newTimer(b)
			for i := range b.N {
				b.StopTimer()
				runtime.GC()
				b.StartTimer()
				start, cpu0 := time.Now(), cpuTime()
				db, err := boltinformer.Open(benchPath(b, fmt.Sprintf("cold-%d.db", i)), quietDB())
				if err != nil {
					b.Fatal(err)
				}
				inf, err := db.NewInformer("pods", wire, &corev1.Pod{}, 0, podIndexers(), nil)
				if err != nil {
					b.Fatal(err)
				}
				stop := runUntilSynced(b, tm, start, cpu0, inf)
				if err := db.Flush(context.Background()); err != nil {
					b.Fatal(err)
				}
				tm.add("ms-to-committed", time.Since(start))
				b.StopTimer()
				stop()
				if err := db.Close(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			tm.report()
		})

		warm := func(opts *boltinformer.InformerOptions) func(b *testing.B) {
			return func(b *testing.B) {
				b.ReportAllocs()
				tm := newTimer(b)
				for range b.N {
					b.StopTimer()
					runtime.GC()
					src.ResetCalls()
					b.StartTimer()
					start, cpu0 := time.Now(), cpuTime()
					db, err := boltinformer.Open(warmPath, quietDB())
					if err != nil {
						b.Fatal(err)
					}
					inf, err := db.NewInformer("pods", wire, &corev1.Pod{}, 0, podIndexers(), opts)
					if err != nil {
						b.Fatal(err)
					}
					if !inf.Decision().Warm {
						b.Fatalf("cold: %+v", inf.Decision())
					}
					stop := runWarmUntilSynced(b, tm, start, cpu0, inf)
					b.StopTimer()
					stop()
					if err := db.Close(); err != nil {
						b.Fatal(err)
					}
					if c := src.Calls(); c.Lists != 0 {
						b.Fatalf("a warm start listed: %v", c.Log)
					}
					b.StartTimer()
				}
				tm.report()
				b.ReportMetric(float64(fi.Size())/float64(n), "file-bytes/obj")
			}
		}
		b.Run("boltinformer/warm/full", warm(nil))
		b.Run("boltinformer/warm/bounded", warm(&boltinformer.InformerOptions{Memory: boltinformer.BoundedMemory}))

		// The floor of a warm start's initial list: the file's payloads
		// (read beforehand) decoded once, on every core, and nothing
		// else. Its ms-to-handler-synced is the time until every object is
		// decoded, as if handed to the handler.
		b.Run("floor/decode", func(b *testing.B) {
			b.ReportAllocs()
			tm := newTimer(b)
			for range b.N {
				b.StopTimer()
				runtime.GC()
				b.StartTimer()
				start, cpu0 := time.Now(), cpuTime()
				objs, err := floor.DecodeAll(payloadCodec, payloads, func() k8sruntime.Object { return &corev1.Pod{} })
				if err != nil {
					b.Fatal(err)
				}
				tm.add("ms-to-handler-synced", time.Since(start))
				tm.add("cpu-ms-to-handler-synced", cpuTime()-cpu0)
				b.StopTimer()
				runtime.KeepAlive(objs)
				b.StartTimer()
			}
			tm.report()
			// The same live heap as the other starts (whose garbage
			// collection marks it): the Source and the list body.
			runtime.KeepAlive(src)
			runtime.KeepAlive(wire)
		})
	})
}

// readPayloads returns the payloads of the informer "pods" in the file at
// path, all of one codec, and that codec.
func readPayloads(b *testing.B, path string) ([][]byte, store.Codec) {
	b.Helper()
	db, err := store.Open(path, &store.Options{ReadOnly: true})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	var out [][]byte
	var kind store.Codec
	err = db.View(func(tx *store.Tx) error {
		return tx.ForEach("pods", func(_ string, r *store.Record) error {
			if kind == store.CodecUnknown {
				kind = r.Codec
			}
			if r.Codec != kind || r.KeyID != "" {
				return fmt.Errorf("record of codec %v, key id %q", r.Codec, r.KeyID)
			}
			out = append(out, r.Payload)
			return nil
		})
	})
	if err != nil {
		b.Fatal(err)
	}
	return out, kind
}

// feedLW lists a fixed set of Pods and serves one watch fed by the
// benchmark.
type feedLW struct {
	list *corev1.PodList
	w    *feedWatch
}

type feedWatch struct {
	ch       chan watch.Event
	stopOnce sync.Once
	stopped  chan struct{}
}

func (w *feedWatch) Stop()                          { w.stopOnce.Do(func() { close(w.stopped) }) }
func (w *feedWatch) ResultChan() <-chan watch.Event { return w.ch }

func (f *feedLW) IsWatchListSemanticsUnSupported() bool { return true }

func (f *feedLW) List(metav1.ListOptions) (k8sruntime.Object, error) { return f.list.DeepCopy(), nil }

func (f *feedLW) Watch(metav1.ListOptions) (watch.Interface, error) { return f.w, nil }

// lastRVHandler closes done when it gets the update with resourceVersion
// want.
type lastRVHandler struct {
	mu   sync.Mutex
	want string
	done chan struct{}
}

func (h *lastRVHandler) expect(rv string) <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.want, h.done = rv, make(chan struct{})
	return h.done
}

func (h *lastRVHandler) OnAdd(any, bool) {}
func (h *lastRVHandler) OnDelete(any)    {}
func (h *lastRVHandler) OnUpdate(_, obj any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.done != nil && obj.(*corev1.Pod).ResourceVersion == h.want {
		close(h.done)
		h.done = nil
	}
}

// BenchmarkIngest pushes MODIFIED events into one watch, in rounds timed
// until a handler has received a round's last event and, for ours, a
// Flush has made it durable (default options: fsync'd group commits of up
// to 1,000 mutations or 100 ms). applied/s is the rate until the handler,
// drain-ms the Flush after it. The key set decides how much the pending
// set coalesces (one mutation per key): "burst" rounds of 10,000 events
// over 1,000 Pods last less than one MaxDelay; "stream" rounds of 100,000
// events are the steady state, over 1,000 Pods (each updated 100 times a
// round) and over 100,000 (each once: nothing coalesces).
func BenchmarkIngest(b *testing.B) {
	type setup func(b *testing.B, lw cache.ListerWatcher) (inf cache.SharedIndexInformer, flush func() error, close func())
	// Full mode's commit sizes, per workload, for the floor to replay.
	commits := map[string]*commitLog{}
	impls := []struct {
		name  string
		setup func(log *commitLog) setup
	}{
		{"client-go", func(*commitLog) setup {
			return func(_ *testing.B, lw cache.ListerWatcher) (cache.SharedIndexInformer, func() error, func()) {
				return cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, podIndexers()), func() error { return nil }, func() {}
			}
		}},
		{"boltinformer/full", func(log *commitLog) setup { return oursIngest(nil, log) }},
		{"boltinformer/bounded", func(*commitLog) setup {
			return oursIngest(&boltinformer.InformerOptions{Memory: boltinformer.BoundedMemory}, nil)
		}},
		// With an observer (the local API), and with it keeping its window
		// in the file (KeepWindow): what the local API costs ingest.
		{"boltinformer/full+observer", func(*commitLog) setup { return oursIngestObserved(0) }},
		{"boltinformer/full+window", func(*commitLog) setup { return oursIngestObserved(1024) }},
	}
	for _, round := range []struct {
		name         string
		keys, events int
	}{
		{"burst/keys=1k", 1000, 10_000},
		{"stream/keys=1k", 1000, 100_000},
		{"stream/keys=100k", 100_000, 100_000},
	} {
		base := make([]*corev1.Pod, round.keys)
		list := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "1"}}
		for i := range base {
			base[i] = testobj.Pod(i, 10, 5, "1")
			list.Items = append(list.Items, *base[i])
		}
		log := commits[round.name]
		if log == nil {
			log = &commitLog{}
			commits[round.name] = log
		}
		for _, impl := range impls {
			b.Run(round.name+"/"+impl.name, func(b *testing.B) {
				var l *commitLog
				if impl.name == "boltinformer/full" {
					l = log
				}
				benchIngest(b, impl.setup(l), l, list, base, round.events)
			})
		}
		b.Run(round.name+"/floor", func(b *testing.B) {
			benchIngestFloor(b, log, list, base, round.events)
		})
	}
}

// commitLog records the number of object mutations of each commit of a
// DB (boltinformer.Options.OnCommit), split into a benchmark's rounds.
type commitLog struct {
	mu     sync.Mutex
	cur    []int
	rounds [][]int // of the last run
}

func (l *commitLog) add(info boltinformer.CommitInfo) {
	if info.Err != nil || info.Ops == 0 {
		return // retried; or a state record only
	}
	l.mu.Lock()
	l.cur = append(l.cur, info.Ops)
	l.mu.Unlock()
}

// startRun forgets the rounds of the last run.
func (l *commitLog) startRun() {
	l.mu.Lock()
	l.rounds = nil
	l.mu.Unlock()
}

// endRound ends a round (discard: the commits before the first).
func (l *commitLog) endRound(discard bool) {
	l.mu.Lock()
	if !discard {
		l.rounds = append(l.rounds, l.cur)
	}
	l.cur = nil
	l.mu.Unlock()
}

// round returns the commit sizes of round i of the last run (batches of
// the default MaxOps if there was none).
func (l *commitLog) round(i int) []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.rounds) == 0 {
		return []int{1000}
	}
	return l.rounds[i%len(l.rounds)]
}

// benchIngestFloor is the floor of durable ingest: for each round, the
// records Full mode's run wrote (the round's events from the first, as
// many as it wrote, in its commit sizes) encoded and put with one fsync
// per commit, and nothing else (internal/floor). events/s counts the
// round's events, as for ours.
func benchIngestFloor(b *testing.B, log *commitLog, list *corev1.PodList, base []*corev1.Pod, perIter int) {
	db, err := store.Open(benchPath(b, "floor.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	c, err := codec.New(&corev1.Pod{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	w := floor.NewWriter(db, c, "pods")
	prepare := func(objs []any) []floor.Object {
		out, err := floor.Prepare(objs, cache.DeletionHandlingMetaNamespaceKeyFunc, podIndexers())
		if err != nil {
			b.Fatal(err)
		}
		return out
	}
	initial := make([]any, len(list.Items))
	for i := range list.Items {
		initial[i] = &list.Items[i]
	}
	if _, err := w.Write(prepare(initial), nil, true); err != nil {
		b.Fatal(err)
	}
	rv := int64(1)
	var elapsed, cpu time.Duration
	var records int
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		sizes := log.round(i)
		total := 0
		for _, n := range sizes {
			total += n
		}
		total = min(total, perIter)
		objs := make([]any, total)
		for j := range perIter {
			rv++
			if j < total {
				objs[j] = modifiedPod(base[j%len(base)], rv)
			}
		}
		prepared := prepare(objs)
		runtime.GC()
		b.StartTimer()
		start, cpu0 := time.Now(), cpuTime()
		if _, err := w.Write(prepared, sizes, false); err != nil {
			b.Fatal(err)
		}
		elapsed += time.Since(start)
		cpu += cpuTime() - cpu0
		records += total
	}
	b.StopTimer()
	n := float64(b.N * perIter)
	b.ReportMetric(n/elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/1000/n, "cpu-us/event")
	b.ReportMetric(float64(records)/n, "records/event")
}

func benchIngest(b *testing.B, setup func(*testing.B, cache.ListerWatcher) (cache.SharedIndexInformer, func() error, func()), log *commitLog, list *corev1.PodList, base []*corev1.Pod, perIter int) {
	lw := &feedLW{list: list, w: &feedWatch{ch: make(chan watch.Event, perIter), stopped: make(chan struct{})}}
	inf, flush, closeDB := setup(b, lw)
	h := &lastRVHandler{}
	if _, err := inf.AddEventHandler(h); err != nil {
		b.Fatal(err)
	}
	stop := runInformer(b, inf)
	defer func() {
		stop()
		closeDB()
	}()
	<-inf.HasSyncedChecker().Done()
	if err := flush(); err != nil { // the list's commit is not part of a round
		b.Fatal(err)
	}
	rv := int64(1)
	events := make([]watch.Event, perIter)
	var elapsed, applied, cpu time.Duration
	var written int64
	if log != nil {
		log.startRun()
		log.endRound(true)
	}
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		for j := range events {
			rv++
			events[j] = watch.Event{Type: watch.Modified, Object: modifiedPod(base[j%len(base)], rv)}
		}
		last := h.expect(strconv.FormatInt(rv, 10))
		runtime.GC()
		b.StartTimer()
		start, u0 := time.Now(), readUsage()
		for _, e := range events {
			lw.w.ch <- e
		}
		<-last
		applied += time.Since(start)
		if err := flush(); err != nil {
			b.Fatal(err)
		}
		elapsed += time.Since(start)
		u := readUsage()
		cpu += u.cpu - u0.cpu
		written += u.written - u0.written
		if log != nil {
			log.endRound(false)
		}
	}
	b.StopTimer()
	n := float64(b.N * perIter)
	b.ReportMetric(float64(written)/1024/n, "disk-KiB/event")
	b.ReportMetric(n/elapsed.Seconds(), "events/s")
	b.ReportMetric(n/applied.Seconds(), "applied/s")
	b.ReportMetric(float64((elapsed-applied).Milliseconds())/float64(b.N), "drain-ms")
	b.ReportMetric(float64(cpu.Nanoseconds())/1000/n, "cpu-us/event")
}

// modifiedPod is p at resourceVersion rv with a changed status, as a watch
// decoder would hand it over: a new object, except for the spec and the
// metadata's maps and slices, which it shares with p (neither informer
// writes to an object it is given).
func modifiedPod(p *corev1.Pod, rv int64) *corev1.Pod {
	out := &corev1.Pod{TypeMeta: p.TypeMeta, ObjectMeta: p.ObjectMeta, Spec: p.Spec}
	out.ResourceVersion = strconv.FormatInt(rv, 10)
	p.Status.DeepCopyInto(&out.Status)
	out.Status.ContainerStatuses[0].RestartCount = int32(rv)
	return out
}

func oursIngest(opts *boltinformer.InformerOptions, log *commitLog) func(b *testing.B, lw cache.ListerWatcher) (cache.SharedIndexInformer, func() error, func()) {
	return func(b *testing.B, lw cache.ListerWatcher) (cache.SharedIndexInformer, func() error, func()) {
		dbOpts := quietDB()
		if log != nil {
			dbOpts.OnCommit = log.add
		}
		db, err := boltinformer.Open(benchPath(b, "ingest.db"), dbOpts)
		if err != nil {
			b.Fatal(err)
		}
		inf, err := db.NewInformer("pods", lw, &corev1.Pod{}, 0, podIndexers(), opts)
		if err != nil {
			b.Fatal(err)
		}
		return inf, func() error { return db.Flush(context.Background()) }, func() {
			if err := db.Close(); err != nil {
				b.Error(err)
			}
		}
	}
}

// oursIngestObserved is oursIngest (Full) with an observer that does
// nothing, as the local API's, and the window of keep changes kept in the
// file (KeepWindow; 0: none).
func oursIngestObserved(keep int) func(b *testing.B, lw cache.ListerWatcher) (cache.SharedIndexInformer, func() error, func()) {
	return func(b *testing.B, lw cache.ListerWatcher) (cache.SharedIndexInformer, func() error, func()) {
		db, err := boltinformer.Open(benchPath(b, "ingest.db"), quietDB())
		if err != nil {
			b.Fatal(err)
		}
		inf, err := db.NewInformer("pods", lw, &corev1.Pod{}, 0, podIndexers(), nil)
		if err != nil {
			b.Fatal(err)
		}
		inf.KeepWindow(keep)
		_, stop := inf.Observe(func(boltinformer.Change) {})
		return inf, func() error { return db.Flush(context.Background()) }, func() {
			stop()
			if err := db.Close(); err != nil {
				b.Error(err)
			}
		}
	}
}
