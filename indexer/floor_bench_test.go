package indexer_test

import (
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer/indexer"
	"github.com/boltinformer/boltinformer/internal/codec"
	"github.com/boltinformer/boltinformer/internal/floor"
	"github.com/boltinformer/boltinformer/store"
)

// The floor of a durable write (impl=floor in BenchmarkAdd and
// BenchmarkUpdate): encoding the same objects into the same record bytes,
// and bbolt puts of those bytes (plus the index entries for Add) in the
// same batch sizes as ours' last run of the same benchmark, with one fsync
// per batch, and nothing else (internal/floor). Run alone, it falls back
// to batches of the committer's default MaxOps.

// batchLog records the number of mutations of each commit of an indexer.
type batchLog struct {
	mu    sync.Mutex
	sizes []int
}

// add is a store.CommitterOptions.OnCommit.
func (l *batchLog) add(info store.CommitInfo) {
	if info.Err != nil || info.Ops == 0 {
		return // a failed attempt is retried; a state-only commit has no puts
	}
	l.mu.Lock()
	l.sizes = append(l.sizes, info.Ops)
	l.mu.Unlock()
}

// take returns the sizes logged so far and clears the log (nil: client-go,
// which commits nothing).
func (l *batchLog) take() []int {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.sizes
	l.sizes = nil
	return s
}

var (
	oursBatchesMu sync.Mutex
	// oursBatches are the commit sizes of the last run of full mode, by
	// benchmark, sync mode and size, split into iterations.
	oursBatches = map[string][][]int{}
)

func batchesID(op string, noSync bool, n int) string {
	return fmt.Sprintf("%s/nosync=%t/%d", op, noSync, n)
}

// keep logs the commit sizes of a Full mode run for the floor and returns
// how many commits there were.
func (l *batchLog) keep(op string, w writeImpl, n int) int {
	sizes := l.take()
	if w.mode != indexer.Full || !w.ours {
		return len(sizes)
	}
	var iters [][]int
	var cur []int
	sum := 0
	for _, s := range sizes {
		cur = append(cur, s)
		if sum += s; sum >= n {
			iters = append(iters, cur)
			cur, sum = nil, 0
		}
	}
	id := batchesID(op, w.noSync, n)
	oursBatchesMu.Lock()
	if op == "add" {
		// One iteration per call: accumulate.
		oursBatches[id] = append(oursBatches[id], iters...)
	} else {
		oursBatches[id] = iters
	}
	oursBatchesMu.Unlock()
	return len(sizes)
}

// reportCommits reports the mean number of commits per op.
func reportCommits(b *testing.B, commits int) {
	if b.N > 0 {
		b.ReportMetric(float64(commits)/float64(b.N), "commits/op")
	}
}

// floorBatches returns the commit sizes for iteration i of the floor.
func floorBatches(op string, noSync bool, n, i int) []int {
	oursBatchesMu.Lock()
	defer oursBatchesMu.Unlock()
	iters := oursBatches[batchesID(op, noSync, n)]
	if len(iters) == 0 {
		return []int{1000}
	}
	return iters[i%len(iters)]
}

// benchFloorWrite is impl=floor of BenchmarkAdd (op "add": every record
// and index entry written to an empty file) and BenchmarkUpdate ("update":
// every record rewritten, its index entries unchanged).
func benchFloorWrite(b *testing.B, op string, noSync bool, n int) {
	pods := benchPods(n)
	c, err := codec.New(&corev1.Pod{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	objs, err := floor.Prepare(podList(pods), cache.DeletionHandlingMetaNamespaceKeyFunc, benchIndexers())
	if err != nil {
		b.Fatal(err)
	}
	open := func() (*floor.Writer, func()) {
		dir := benchDir(b)
		db, err := store.Open(filepath.Join(dir, "cache.db"), &store.Options{NoSync: noSync})
		if err != nil {
			b.Fatal(err)
		}
		return floor.NewWriter(db, c, informerName), func() { _ = db.Close() }
	}
	b.ReportAllocs()
	var m cpuMeter
	commits := 0
	switch op {
	case "add":
		i := 0
		for b.Loop() {
			b.StopTimer()
			w, closeDB := open()
			sizes := floorBatches(op, noSync, n, i)
			runtime.GC()
			b.StartTimer()
			m.start()
			k, err := w.Write(objs, sizes, true)
			if err != nil {
				b.Fatal(err)
			}
			m.stop()
			b.StopTimer()
			closeDB()
			commits += k
			i++
			b.StartTimer()
		}
	case "update":
		w, closeDB := open()
		defer closeDB()
		if _, err := w.Write(objs, nil, true); err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		i := 0
		m.start()
		for b.Loop() {
			sizes := floorBatches(op, noSync, n, i)
			k, err := w.Write(objs, sizes, false)
			if err != nil {
				b.Fatal(err)
			}
			commits += k
			i++
		}
		m.stop()
	}
	reportPerObject(b, n)
	m.report(b, n)
	reportCommits(b, commits)
}
