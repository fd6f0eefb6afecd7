package indexer

import (
	"errors"
	"fmt"
	"sort"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/boltinformer/boltinformer/internal/codec"
	"github.com/boltinformer/boltinformer/store"
)

func newCodec(opts *Options) (*codec.Codec, error) {
	ex, ok := opts.Example.(runtime.Object)
	if !ok {
		return nil, fmt.Errorf("indexer: example %T is not a runtime.Object", opts.Example)
	}
	c, err := codec.New(ex, &codec.Options{Keyring: opts.Keyring, ForceJSON: opts.ForceJSON})
	if err != nil {
		return nil, fmt.Errorf("indexer: %w", err)
	}
	return c, nil
}

// Codec returns the indexer's payload codec.
func (x *Indexer) Codec() *codec.Codec { return x.codec }

type rawRecord struct {
	key string
	rec *store.Record
	obj runtime.Object
	err error
}

// load reads the informer's state and objects from the file. In Full mode
// it decodes every payload, in parallel.
func (x *Indexer) load() error {
	var recs []rawRecord
	var st *store.State
	err := x.db.View(func(tx *store.Tx) error {
		var err error
		if st, err = tx.State(x.name); err != nil {
			return err
		}
		if st == nil {
			return nil
		}
		return tx.ForEach(x.name, func(key string, r *store.Record) error {
			if x.bounded {
				r.Payload = nil // keys and index values only
			}
			recs = append(recs, rawRecord{key: key, rec: r})
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("indexer %q: load %s: %w", x.name, x.db.Path(), err)
	}
	if st == nil {
		return nil
	}
	if !x.bounded {
		decodeAll(x.codec, recs)
	}
	for i := range recs {
		r := &recs[i]
		if r.err == nil && !x.bounded {
			r.err = x.checkEnvelope(r.key, r.rec, r.obj)
		}
		if r.err != nil {
			return fmt.Errorf("indexer %q: load %s: %w", x.name, x.db.Path(), errors.Join(store.ErrCorrupt, r.err))
		}
		it := &item{rv: r.rec.ResourceVersion, uid: r.rec.UID, vals: x.idx.fromRecord(r.rec), valNames: x.idx.names}
		if !x.bounded {
			x.objs[r.key] = r.obj
		}
		x.items[r.key] = it
		x.idx.update(r.key, nil, it.vals)
	}
	x.saved = *st
	x.rv = st.ResourceVersion
	x.synced = st.Synced
	have := map[string]bool{}
	for _, n := range st.Indexes {
		have[n] = true
	}
	rebuild := false
	for _, n := range x.idx.names {
		if !have[n] {
			rebuild = true
		}
		delete(have, n)
	}
	for n := range have {
		x.drop = append(x.drop, n)
		x.stateDirty = true
	}
	sort.Strings(x.drop)
	if rebuild {
		x.logger.V(2).Info("Rebuilding indexes missing from the file", "have", st.Indexes, "want", x.idx.names)
		// A fresh set: the values loaded from the records may be stale for
		// an index that was dropped and is now back (perhaps with another
		// function under the same name).
		if err := x.reindexLocked(newIndexSet(x.idx.indexers)); err != nil {
			return fmt.Errorf("indexer %q: rebuild indexes: %w", x.name, err)
		}
	}
	return nil
}

// decodeAll decodes recs' payloads with one worker per CPU.
func decodeAll(c *codec.Codec, recs []rawRecord) {
	workers := min(decodeWorkers(), max(1, len(recs)/64))
	var wg sync.WaitGroup
	next := make(chan int, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				const chunk = 64
				for j := i; j < min(i+chunk, len(recs)); j++ {
					r := &recs[j]
					r.obj, r.err = c.Decode(r.key, r.rec)
					r.rec.Payload = nil
				}
			}
		}()
	}
	for i := 0; i < len(recs); i += 64 {
		next <- i
	}
	close(next)
	wg.Wait()
}

// fetchLocked returns the object of key in Bounded mode: a pending write,
// the LRU, or the file. The caller holds mu (shared suffices) and has
// checked that key exists.
func (x *Indexer) fetchLocked(key string) (any, error) {
	if obj, ok := x.memoryLocked(key); ok {
		return obj, nil
	}
	var obj runtime.Object
	err := x.db.View(func(tx *store.Tx) error {
		var err error
		obj, err = x.readLocked(tx, key)
		return err
	})
	if err != nil {
		return nil, err
	}
	x.lru.Add(key, obj)
	return obj, nil
}

// memoryLocked finds key's object without touching the file.
func (x *Indexer) memoryLocked(key string) (any, bool) {
	for _, m := range []map[string]*pendingOp{x.pending, x.inflight} {
		if op := m[key]; op != nil && op.kind == opPut {
			return op.obj, true
		}
	}
	return x.lru.Get(key)
}

func (x *Indexer) readLocked(tx *store.Tx, key string) (runtime.Object, error) {
	r, err := tx.Get(x.name, key)
	if err != nil {
		return nil, fmt.Errorf("indexer %q: %w", x.name, err)
	}
	if r == nil {
		return nil, fmt.Errorf("indexer %q: %w: key %q is in memory but not in the file", x.name, store.ErrCorrupt, key)
	}
	obj, err := x.codec.Decode(key, r)
	if err == nil {
		err = x.checkEnvelope(key, r, obj)
	}
	if err != nil {
		return nil, fmt.Errorf("indexer %q: %w", x.name, errors.Join(store.ErrCorrupt, err))
	}
	return obj, nil
}

// checkEnvelope checks a decoded record against what is outside its
// payload checksum: the key it is stored under and the envelope's UID and
// resourceVersion must be the object's own. A flipped bit in a key would
// otherwise load an object under a key it does not have (a phantom, and
// the real key lost), silently.
func (x *Indexer) checkEnvelope(key string, r *store.Record, obj runtime.Object) error {
	k, err := x.keyFunc(obj)
	if err != nil {
		return fmt.Errorf("record %q: %w", key, err)
	}
	if k != key {
		return fmt.Errorf("record stored under key %q holds object %q", key, k)
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return fmt.Errorf("record %q: %w", key, err)
	}
	if m.GetResourceVersion() != r.ResourceVersion || string(m.GetUID()) != r.UID {
		return fmt.Errorf("record %q: envelope has resourceVersion %q uid %q, the object %q and %q", key, r.ResourceVersion, r.UID, m.GetResourceVersion(), m.GetUID())
	}
	return nil
}

// fetchManyLocked returns the objects of keys (Bounded mode) in the same
// order, reading the misses in one transaction without filling the LRU (a
// List must not evict the working set). Objects that cannot be read are
// logged and left out.
func (x *Indexer) fetchManyLocked(keys []string) []any {
	out := make([]any, len(keys))
	var misses []int
	for i, k := range keys {
		if obj, ok := x.memoryLocked(k); ok {
			out[i] = obj
		} else {
			misses = append(misses, i)
		}
	}
	if len(misses) > 0 {
		err := x.db.View(func(tx *store.Tx) error {
			for _, i := range misses {
				obj, err := x.readLocked(tx, keys[i])
				if err != nil {
					x.logger.Error(err, "Object not readable", "key", keys[i])
					continue
				}
				out[i] = obj
			}
			return nil
		})
		if err != nil {
			x.logger.Error(err, "Objects not readable")
		}
	}
	n := 0
	for _, obj := range out {
		if obj != nil {
			out[n] = obj
			n++
		}
	}
	return out[:n]
}

// CachedObjects returns how many decoded objects memory holds: all of them
// in Full mode; in Bounded mode the LRU plus writes not yet committed.
func (x *Indexer) CachedObjects() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if !x.bounded {
		return len(x.items)
	}
	n := x.lru.Len()
	for _, m := range []map[string]*pendingOp{x.pending, x.inflight} {
		for _, op := range m {
			if op.kind == opPut {
				n++
			}
		}
	}
	return n
}
