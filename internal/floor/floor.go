// Package floor measures the physical floors that the benchmarks compare
// boltinformer with, in the same run: decoding a file's payloads once, in
// parallel on every core (the least a warm start can do before every
// handler has its initial list), and writing encoded records to bbolt
// with one fsync per batch and nothing else (the least a durable write
// can cost with this disk and this codec). It is for benchmarks only: the
// library never uses it.
package floor

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"unsafe"

	bolt "go.etcd.io/bbolt"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer/internal/codec"
	"github.com/boltinformer/boltinformer/store"
)

// parallel runs fn over [0, n) in one contiguous range per CPU.
func parallel(n int, fn func(w, from, to int)) {
	workers := max(1, min(runtime.GOMAXPROCS(0), n))
	per := (n + workers - 1) / max(workers, 1)
	var wg sync.WaitGroup
	for w := range workers {
		from, to := w*per, min((w+1)*per, n)
		if from >= to {
			break
		}
		wg.Go(func() { fn(w, from, to) })
	}
	wg.Wait()
}

// DecodeAll decodes plaintext payloads of the given codec kind into new
// objects made by newObj, on GOMAXPROCS goroutines (one contiguous range
// each), and returns them in order: the floor of a warm start's initial
// list. The payloads are read beforehand; nothing else is done.
func DecodeAll(kind store.Codec, payloads [][]byte, newObj func() kruntime.Object) ([]kruntime.Object, error) {
	out := make([]kruntime.Object, len(payloads))
	errs := make([]error, runtime.GOMAXPROCS(0))
	parallel(len(payloads), func(w, from, to int) {
		for i := from; i < to; i++ {
			obj, err := codec.DecodePayload(kind, payloads[i], newObj())
			if err != nil {
				errs[w] = fmt.Errorf("floor: payload %d: %w", i, err)
				return
			}
			out[i] = obj
		}
	})
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Object is one object to write, with what a writer must know besides its
// encoding: its key and its index values (by index name, sorted, as
// records hold them). Prepare computes them outside the measured section.
type Object struct {
	Key     string
	Obj     any
	Indexed []store.IndexValues
}

// Prepare returns objs keyed by keyFunc and indexed by indexers.
func Prepare(objs []any, keyFunc cache.KeyFunc, indexers cache.Indexers) ([]Object, error) {
	names := make([]string, 0, len(indexers))
	for n := range indexers {
		names = append(names, n)
	}
	slices.Sort(names)
	out := make([]Object, len(objs))
	for i, obj := range objs {
		key, err := keyFunc(obj)
		if err != nil {
			return nil, fmt.Errorf("floor: %w", err)
		}
		out[i] = Object{Key: key, Obj: obj}
		for _, n := range names {
			vals, err := indexers[n](obj)
			if err != nil {
				return nil, fmt.Errorf("floor: index %q of %q: %w", n, key, err)
			}
			if len(vals) > 0 {
				vals = slices.Clone(vals)
				slices.Sort(vals)
				out[i].Indexed = append(out[i].Indexed, store.IndexValues{Index: n, Values: slices.Compact(vals)})
			}
		}
	}
	return out, nil
}

// Writer writes records the way the floor of a durable write does: each
// batch is encoded by the codec's Encoder on GOMAXPROCS goroutines (the
// bytes boltinformer writes, each worker into a store.RecordBuffer of its
// own), then put in key order into the informer's objects bucket of the
// store's layout (docs/FORMAT.md), with the index entries when asked, in
// one bbolt transaction committed with one fsync (unless the store was
// opened with NoSync). Nothing else: no in-memory state, no reads of the
// old records, no state record.
type Writer struct {
	db    *store.DB
	codec *codec.Codec
	name  string
	bufs  []*store.RecordBuffer
}

// NewWriter returns a writer into the informer name of db.
func NewWriter(db *store.DB, c *codec.Codec, name string) *Writer {
	w := &Writer{db: db, codec: c, name: name}
	for range runtime.GOMAXPROCS(0) {
		w.bufs = append(w.bufs, &store.RecordBuffer{})
	}
	return w
}

// Write writes objs in consecutive batches of the given sizes (what is
// left after the last size, in batches of that size; sizes empty means
// one batch), one transaction and fsync each; with entries, every index
// entry of every object is put too (an object written for the first
// time), else only the records (an update that leaves the index values
// as they are). It returns the number of batches.
func (w *Writer) Write(objs []Object, sizes []int, entries bool) (batches int, err error) {
	for i := 0; i < len(objs); batches++ {
		size := len(objs) - i
		if len(sizes) > 0 {
			size = sizes[0]
			if len(sizes) > 1 {
				sizes = sizes[1:]
			}
		}
		size = max(1, min(size, len(objs)-i))
		if err := w.batch(objs[i:i+size], entries); err != nil {
			return batches, err
		}
		i += size
	}
	return batches, nil
}

// batch encodes and commits one batch.
func (w *Writer) batch(objs []Object, entries bool) error {
	order := make([]int, len(objs))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(objs[a].Key, objs[b].Key) })
	raws := make([][]byte, len(objs))
	recs := make([]store.Record, len(objs))
	errs := make([]error, len(w.bufs))
	parallel(len(order), func(wk, from, to int) {
		enc := w.codec.NewEncoder(w.bufs[wk])
		for _, i := range order[from:to] {
			recs[i].Indexed = objs[i].Indexed
			raw, err := enc.Encode(objs[i].Key, objs[i].Obj, &recs[i])
			if err != nil {
				errs[wk] = err
				return
			}
			raws[i] = raw
		}
	})
	defer func() {
		for _, rb := range w.bufs {
			rb.Release()
		}
	}()
	for _, err := range errs {
		if err != nil {
			return fmt.Errorf("floor: encode: %w", err)
		}
	}
	return w.db.Bolt(func(bdb *bolt.DB) error {
		return bdb.Update(func(tx *bolt.Tx) error {
			root, err := tx.CreateBucketIfNotExists([]byte("informers"))
			if err == nil {
				root, err = root.CreateBucketIfNotExists([]byte(w.name))
			}
			var objects, indexes *bolt.Bucket
			if err == nil {
				objects, err = root.CreateBucketIfNotExists([]byte("objects"))
			}
			if err == nil {
				indexes, err = root.CreateBucketIfNotExists([]byte("indexes"))
			}
			if err != nil {
				return err
			}
			buckets := map[string]*bolt.Bucket{}
			var entry []byte
			for _, i := range order {
				// bbolt clones the keys it keeps: the key is lent.
				if err := objects.Put(unsafe.Slice(unsafe.StringData(objs[i].Key), len(objs[i].Key)), raws[i]); err != nil {
					return err
				}
				if !entries {
					continue
				}
				for _, iv := range objs[i].Indexed {
					b := buckets[iv.Index]
					if b == nil {
						if b, err = indexes.CreateBucketIfNotExists([]byte(iv.Index)); err != nil {
							return err
						}
						buckets[iv.Index] = b
					}
					for _, v := range iv.Values {
						// <index value> 0x00 <object key> -> (empty)
						entry = append(append(append(entry[:0], v...), 0), objs[i].Key...)
						if err := b.Put(entry, nil); err != nil {
							return err
						}
					}
				}
			}
			return nil
		})
	})
}
