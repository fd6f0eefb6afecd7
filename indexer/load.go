package indexer

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/boltinformer/boltinformer/internal/codec"
	"github.com/boltinformer/boltinformer/store"
	"k8s.io/client-go/tools/cache"
)

func newCodec(opts *Options) (*codec.Codec, error) {
	ex, ok := opts.Example.(runtime.Object)
	if !ok {
		return nil, fmt.Errorf("indexer: example %T is not a runtime.Object", opts.Example)
	}
	c, err := codec.New(ex, &codec.Options{Scheme: opts.Scheme, Keyring: opts.Keyring, ForceJSON: opts.ForceJSON})
	if err != nil {
		return nil, fmt.Errorf("indexer: %w", err)
	}
	return c, nil
}

// parallel runs fn over [0, n) in one contiguous range per worker, with
// at least minPer items per worker.
func parallel(n, minPer int, fn func(from, to int)) {
	workers := min(decodeWorkers(), max(1, n/minPer))
	if workers == 1 {
		fn(0, n)
		return
	}
	var wg sync.WaitGroup
	per := (n + workers - 1) / workers
	for from := 0; from < n; from += per {
		wg.Add(1)
		go func(from, to int) {
			defer wg.Done()
			fn(from, to)
		}(from, min(from+per, n))
	}
	wg.Wait()
}

// Codec returns the indexer's payload codec.
func (x *Indexer) Codec() *codec.Codec { return x.codec }

// envelope is what the load keeps of a record.
type envelope struct {
	rv, uid, keyID string
	vals           [][]string
	err            error
}

// load reads the informer's state and record envelopes from the file:
// keys, resourceVersions, UIDs and index values, all covered by the
// records' checksums (verified here, payloads included, in parallel).
// Payloads stay on disk: in Full mode they are decoded on first access and
// by the background fill (lazy.go). One record of each encryption key id
// (and the first record) is decoded at once, so that a wrong example type
// or a wrong key fails here, not later (probe).
//
// A record that fails its checksum (or a probed one that does not decode)
// is damage to that record, not to the others: unless strict, it is left
// out as undecodable (reported through OnUndecodable once Open returns:
// the informer keeps a copy of the file and relists), and the records that
// do decode are served meanwhile, which is what an agent cut off from its
// server needs.
//
// With useSnapshot (Full mode), the envelopes come from the informer's
// envelope snapshot when the file has a valid one (written by the last
// clean Close, store.Snapshot), so the records are not read at all here:
// the background fill reads and verifies them, and one that fails its
// checksum, does not decode or does not match the snapshot becomes
// undecodable (the informer relists).
func (x *Indexer) load(useSnapshot bool) error {
	var st *store.State
	var keys []string
	var envs []envelope
	var sn *store.Snapshot
	err := x.db.View(func(tx *store.Tx) error {
		var err error
		if st, err = tx.State(x.name); err != nil {
			return err
		}
		if st == nil {
			return nil
		}
		if useSnapshot {
			if sn, err = tx.Snapshot(x.name); err == nil {
				return nil
			}
			if !errors.Is(err, store.ErrNoSnapshot) {
				x.logger.Info("Envelope snapshot not usable: reading the records", "err", err)
			}
			sn = nil
		}
		// The cursor walk (one goroutine) hands chunks of records to
		// scanners (one per CPU) as it goes; the raw records are valid
		// until the transaction ends, after every scanner is done.
		type chunk struct {
			keys []string
			raws [][]byte
			envs []envelope
		}
		const chunkSize = 256
		var chunks []*chunk
		work := make(chan *chunk, 64)
		var wg sync.WaitGroup
		for range decodeWorkers() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sc := x.idx.newScan()
				for c := range work {
					for i, key := range c.keys {
						sc.reset()
						h, err := store.ScanRecord(key, c.raws[i], sc.add)
						if err != nil {
							c.envs[i].err = fmt.Errorf("informer %q key %q: %w", x.name, key, err)
							continue
						}
						c.envs[i] = envelope{rv: string(h.ResourceVersion), uid: string(h.UID), keyID: sc.str(h.KeyID), vals: sc.vals()}
					}
				}
			}()
		}
		cur := &chunk{}
		walkErr := tx.ForEachRaw(x.name, func(key string, raw []byte) error {
			cur.keys = append(cur.keys, key)
			cur.raws = append(cur.raws, raw)
			if len(cur.keys) == chunkSize {
				cur.envs = make([]envelope, chunkSize)
				chunks = append(chunks, cur)
				work <- cur
				cur = &chunk{}
			}
			return nil
		})
		if len(cur.keys) > 0 {
			cur.envs = make([]envelope, len(cur.keys))
			chunks = append(chunks, cur)
			work <- cur
		}
		close(work)
		wg.Wait()
		if walkErr != nil {
			return walkErr
		}
		keys = make([]string, 0, max(0, st.Objects))
		envs = make([]envelope, 0, max(0, st.Objects))
		for _, c := range chunks {
			keys = append(keys, c.keys...)
			envs = append(envs, c.envs...)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("indexer %q: load %s: %w", x.name, x.db.Path(), err)
	}
	if st == nil {
		return nil
	}
	x.loadTypes(st.Types)
	var probes probeSet
	var stale []string
	lazy := 0
	if sn != nil {
		keys, probes, stale = x.installSnapshot(sn)
		lazy = len(keys)
	} else {
		items := make([]item, len(keys)) // one allocation for all
		x.items = make(map[string]*item, len(keys))
		want := x.codec.KeyID()
		var damaged int
		for i, key := range keys {
			e := &envs[i]
			it := &items[i]
			x.items[key] = it
			if e.err != nil {
				if x.strict {
					return fmt.Errorf("indexer %q: load %s: %w", x.name, x.db.Path(), e.err)
				}
				// Nothing of the record is trusted: no index values.
				*it = item{valNames: x.idx.names}
				x.undecodable[key] = e.err
				if damaged++; damaged == 1 {
					x.logger.Error(e.err, "Record in the cache file is damaged: it is left out until the server sends it again", "key", key)
				}
				continue
			}
			probes.add(e.keyID, key)
			if e.keyID != want {
				stale = append(stale, key)
			}
			*it = item{rv: e.rv, uid: e.uid, vals: e.vals, valNames: x.idx.names, lazy: !x.bounded, unchecked: true}
			x.idx.update(key, nil, it.vals)
			lazy++
		}
		if damaged > 1 {
			x.logger.Error(nil, "More records in the cache file are damaged", "count", damaged-1)
		}
		x.unreported += damaged
	}
	// Every loaded item's index values are unchecked (verify.go) until
	// the fill (or a mutation) has compared them with the functions'.
	x.uncheckedN, x.loadKeys = lazy, keys
	if !x.bounded {
		x.lazyN = lazy
		x.objs = make(map[string]any, len(keys))
	}
	x.saved = *st
	x.rv = st.ResourceVersion
	x.synced = st.Synced
	// A file that keeps deletes goes on keeping them.
	x.deletesFrom, x.keepDeletes = st.DeletesFrom, st.DeletesFrom != ""
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
	// An index missing from the file is rebuilt below from the objects,
	// every index afresh: checking the loaded values is moot then.
	x.rebuilding = rebuild
	defer func() { x.rebuilding = false }()
	if err := x.probe(&probes); err != nil {
		return err
	}
	if len(stale) > 0 {
		if err := x.reseal(stale); err != nil {
			return err
		}
	}
	if rebuild {
		x.logger.V(2).Info("Rebuilding indexes missing from the file", "have", st.Indexes, "want", x.idx.names)
		if !x.bounded {
			// The rebuild reads every object: decode them now.
			if err := x.fill(context.Background()); err != nil {
				return fmt.Errorf("indexer %q: rebuild indexes: %w", x.name, err)
			}
		}
		// A fresh set: the values loaded from the records may be stale for
		// an index that was dropped and is now back (perhaps with another
		// function under the same name).
		idxErr, err := x.reindexLocked(newIndexSet(x.idx.indexers), false)
		if err != nil {
			return fmt.Errorf("indexer %q: rebuild indexes: %w", x.name, err)
		}
		if idxErr != nil {
			// Kept without those values (IndexErrors counts them): one
			// object must not keep the informer from starting.
			errs := IndexFuncErrors(idxErr)
			x.logger.Error(errs[0], "Index functions failed on stored objects while rebuilding indexes; they are kept without values in those indexes", "objects", len(x.indexErrs), "errors", len(errs))
		}
	}
	return nil
}

// probeTries bounds the records of one encryption key id that the load
// decodes before it concludes that none decodes.
const probeTries = 8

// probeSet holds, per encryption key id, the first records (up to
// probeTries) to probe.
type probeSet struct {
	ids  []string // in order of first appearance
	keys map[string][]string
}

func (p *probeSet) add(id, key string) {
	if p.keys == nil {
		p.keys = map[string][]string{}
	}
	ks, ok := p.keys[id]
	if !ok {
		p.ids = append(p.ids, id)
	}
	if len(ks) < probeTries {
		p.keys[id] = append(ks, key)
	}
}

// probe decodes one record of each encryption key id, so that a wrong
// example type or a wrong key fails the load (a key the keyring lacks or
// that does not open: keyringError). A probed record that does not
// decode otherwise (store.ErrCorrupt) is damage to that record, unless
// none of the first probeTries records of its key id decodes: it is left
// out as undecodable (strict: the error) and the next one is tried.
func (x *Indexer) probe(p *probeSet) error {
	last := map[string]error{}
	loadErr := func(err error) error {
		return fmt.Errorf("indexer %q: load %s: %w", x.name, x.db.Path(), err)
	}
	for round := 0; len(p.ids) > 0; round++ {
		var batch, ids, rest []string
		for _, id := range p.ids {
			ks := p.keys[id]
			if round == len(ks) {
				return loadErr(fmt.Errorf("no record of encryption key id %q decodes (%d tried): %w", id, len(ks), last[id]))
			}
			batch, ids = append(batch, ks[round]), append(ids, id)
		}
		objs, errs, err := x.decodeKeys(batch)
		if err != nil {
			return loadErr(err)
		}
		for i, k := range batch {
			if errs[i] != nil && (errors.Is(errs[i], codec.ErrWrongKey) || errors.Is(errs[i], codec.ErrEncrypted)) {
				return x.keyringError(k, ids[i], errs[i])
			}
			if errs[i] == nil && !x.bounded {
				errs[i] = x.matchLoaded(k, x.items[k], objs[i])
			}
			if errs[i] != nil {
				if x.strict || !errors.Is(errs[i], store.ErrCorrupt) {
					return loadErr(errs[i])
				}
				last[ids[i]] = errs[i]
				rest = append(rest, ids[i])
				x.undecodable[k] = errs[i]
				x.unreported++
				x.logger.Error(errs[i], "Object in the cache file does not decode: it is left out until the server sends it again", "key", k)
				it := x.items[k]
				if it.lazy {
					x.clearLazyLocked(it)
				}
				x.checkedLocked(it)
				continue
			}
			// Installed (Full mode) and checked like any decoded object.
			x.installLocked(batch[i:i+1], objs[i:i+1], errs[i:i+1], nil, nil)
		}
		p.ids = rest
	}
	return nil
}

// installSnapshot makes the items and index sets of a Full load from an
// envelope snapshot, and returns the keys in file order, the keys to probe
// (the first of each encryption key id, and the next ones should those
// not decode), and the keys whose key id is not the codec's (to reseal).
// Each index value's set is made at its final size, and the sets are
// built in parallel.
func (x *Indexer) installSnapshot(sn *store.Snapshot) (keys []string, probes probeSet, stale []string) {
	n := len(sn.Keys)
	items := make([]item, n) // one allocation for all
	x.items = make(map[string]*item, n)
	want := x.codec.KeyID()
	for i, key := range sn.Keys {
		probes.add(sn.KeyIDs[i], key)
		if sn.KeyIDs[i] != want {
			stale = append(stale, key)
		}
		items[i] = item{rv: sn.ResourceVersions[i], uid: sn.UIDs[i], valNames: x.idx.names, lazy: true, unchecked: true}
		x.items[key] = &items[i]
	}
	// The items' values, aligned with the index set's names, cut from
	// slabs: one [][]string per item that has any, one string per value.
	pos := make(map[string]int, len(x.idx.names))
	for i, name := range x.idx.names {
		pos[name] = i
	}
	var total int
	var wanted []*store.SnapshotIndex
	for j := range sn.Indexes {
		if _, ok := pos[sn.Indexes[j].Name]; ok {
			wanted = append(wanted, &sn.Indexes[j])
			for _, v := range sn.Indexes[j].Values {
				total += len(v.Objects)
			}
		}
	}
	if len(wanted) > 0 {
		valsSlab := make([][]string, n*len(x.idx.names))
		strSlab := make([]string, 0, total)
		for _, idx := range wanted {
			i := pos[idx.Name]
			for _, v := range idx.Values {
				for _, o := range v.Objects {
					it := &items[o]
					if it.vals == nil {
						it.vals = valsSlab[int(o)*len(x.idx.names) : (int(o)+1)*len(x.idx.names) : (int(o)+1)*len(x.idx.names)]
					}
					if it.vals[i] == nil {
						strSlab = append(strSlab, v.Value)
						it.vals[i] = strSlab[len(strSlab)-1 : len(strSlab) : len(strSlab)]
					} else {
						it.vals[i] = append(it.vals[i], v.Value)
					}
				}
			}
		}
		// The sets, one index value per task.
		type task struct {
			idx map[string]sets.Set[string]
			v   *store.SnapshotValue
		}
		var tasks []task
		for _, idx := range wanted {
			m := x.idx.byName[idx.Name]
			for j := range idx.Values {
				tasks = append(tasks, task{m, &idx.Values[j]})
			}
		}
		made := make([]sets.Set[string], len(tasks))
		parallel(len(tasks), 1, func(from, to int) {
			for t := from; t < to; t++ {
				set := make(sets.Set[string], len(tasks[t].v.Objects))
				for _, o := range tasks[t].v.Objects {
					set.Insert(sn.Keys[o])
				}
				made[t] = set
			}
		})
		for t, set := range made {
			tasks[t].idx[tasks[t].v.Value] = set
		}
	}
	return sn.Keys, probes, stale
}

// fetchLocked returns the object of key in Bounded mode: a pending write,
// the LRU, or the file. A record that does not decode is returned as bad
// too, for the caller to mark once it has released the lock. The caller
// holds mu (shared suffices) and has checked that key exists.
func (x *Indexer) fetchLocked(key string) (any, *badRead, error) {
	if obj, ok := x.memoryLocked(key); ok {
		return obj, nil, nil
	}
	if err, bad := x.undecodable[key]; bad {
		return nil, nil, x.undecodableError(key, err)
	}
	var obj runtime.Object
	var rerr error
	err := x.db.View(func(tx *store.Tx) error {
		obj, rerr = x.readLocked(tx, key)
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("indexer %q: get %q: %w", x.name, key, err)
	}
	if rerr != nil {
		return nil, x.badReadLocked(key, rerr), x.undecodableError(key, rerr)
	}
	x.lru.Add(key, obj)
	return obj, nil, nil
}

// memoryLocked finds key's object without touching the file.
func (x *Indexer) memoryLocked(key string) (any, bool) {
	if obj, ok := x.pendingPutLocked(key); ok {
		return obj, true
	}
	return x.lru.Get(key)
}

// pendingPutLocked returns key's object if a write not yet on disk (or
// being committed) holds it.
func (x *Indexer) pendingPutLocked(key string) (any, bool) {
	for _, m := range []map[string]*pendingOp{x.pending, x.inflight} {
		if op := m[key]; op != nil && op.kind == opPut {
			return op.obj, true
		}
	}
	return nil, false
}

// badRead is a record that a read under the shared lock found not to
// decode (Bounded mode), with what memory held for its key then.
type badRead struct {
	key, rv, uid string
	err          error
}

func (x *Indexer) badReadLocked(key string, err error) *badRead {
	b := &badRead{key: key, err: err}
	if it := x.items[key]; it != nil {
		b.rv, b.uid = it.rv, it.uid
	}
	return b
}

// markUndecodable records the bad reads whose keys memory still holds as
// it did at the read (no write replaced or deleted them since) as
// undecodable: reads report them, List leaves them out, Health counts
// them, and OnUndecodable is told (the informer relists) until a write
// replaces them. The caller holds no lock.
func (x *Indexer) markUndecodable(bad []badRead) {
	if len(bad) == 0 {
		return
	}
	x.mu.Lock()
	n := 0
	for _, b := range bad {
		it := x.items[b.key]
		if it == nil || it.rv != b.rv || it.uid != b.uid {
			continue
		}
		if _, ok := x.undecodable[b.key]; ok {
			continue
		}
		if _, ok := x.pendingPutLocked(b.key); ok {
			continue
		}
		x.undecodable[b.key] = b.err
		if n++; n == 1 {
			x.logger.Error(b.err, "Object in the cache file does not decode: it is left out until the server sends it again", "key", b.key)
		}
	}
	x.unreported += n
	x.mu.Unlock()
	if n > 1 {
		x.logger.Error(nil, "More objects in the cache file do not decode", "count", n-1)
	}
	x.flushUndecodable()
}

func (x *Indexer) readLocked(tx *store.Tx, key string) (runtime.Object, error) {
	return x.decodeRecord(key, tx.GetRaw(x.name, key))
}

// decodeRecord decodes raw, the record of key read from the file in the
// caller's read transaction (nil: there is none), without copying it: its
// checksum is verified and its payload decoded in place (the decoders
// copy what the object keeps), and the object is checked against the key
// and the envelope (checkEnvelope).
func (x *Indexer) decodeRecord(key string, raw []byte) (runtime.Object, error) {
	if raw == nil {
		return nil, fmt.Errorf("indexer %q: %w: key %q is in memory but not in the file", x.name, store.ErrCorrupt, key)
	}
	h, err := store.ScanRecord(key, raw, nil)
	if err != nil {
		return nil, fmt.Errorf("indexer %q: informer %q key %q: %w", x.name, x.name, key, err)
	}
	// The fields checkType and Decode read; the strings are empty (no
	// allocation) for a typed informer's plaintext records.
	r := store.Record{Codec: h.Codec, KeyID: string(h.KeyID), APIVersion: string(h.APIVersion), Kind: string(h.Kind), Type: string(h.Type), Payload: h.Payload}
	err = x.checkType(key, &r)
	var obj runtime.Object
	if err == nil {
		obj, err = x.codec.Decode(key, &r)
	}
	if err == nil {
		err = x.checkEnvelope(key, h.ResourceVersion, h.UID, obj)
	}
	if err != nil {
		return nil, fmt.Errorf("indexer %q: %w", x.name, errors.Join(store.ErrCorrupt, err))
	}
	return obj, nil
}

// checkEnvelope checks a decoded record against what is outside its
// payload checksum: the key it is stored under and the envelope's UID and
// resourceVersion (rv and uid) must be the object's own. A flipped bit in
// a key would otherwise load an object under a key it does not have (a
// phantom, and the real key lost), silently.
func (x *Indexer) checkEnvelope(key string, rv, uid []byte, obj runtime.Object) error {
	m, err := meta.Accessor(obj)
	if err != nil {
		return fmt.Errorf("record %q: %w", key, err)
	}
	if x.defaultKeyFunc {
		// The key MetaNamespaceKeyFunc makes, compared without making it.
		ns, name := m.GetNamespace(), m.GetName()
		if ns == "" && key != name || ns != "" && (len(key) != len(ns)+1+len(name) || key[:len(ns)] != ns || key[len(ns)] != '/' || key[len(ns)+1:] != name) {
			k, _ := cache.MetaNamespaceKeyFunc(obj)
			return fmt.Errorf("record stored under key %q holds object %q", key, k)
		}
	} else {
		k, err := x.keyFunc(obj)
		if err != nil {
			return fmt.Errorf("record %q: %w", key, err)
		}
		if k != key {
			return fmt.Errorf("record stored under key %q holds object %q", key, k)
		}
	}
	if m.GetResourceVersion() != string(rv) || string(m.GetUID()) != string(uid) {
		return fmt.Errorf("record %q: envelope has resourceVersion %q uid %q, the object %q and %q", key, rv, uid, m.GetResourceVersion(), m.GetUID())
	}
	return nil
}

// fetchManyLocked returns the objects of keys (Bounded mode) in the same
// order, reading the misses in one transaction without filling the LRU (a
// List must not evict the working set). Undecodable objects are left out
// (those found now are returned as bad, for the caller to mark once it has
// released the lock); objects the file cannot give (a read that failed)
// are logged and left out.
func (x *Indexer) fetchManyLocked(keys []string) ([]any, []badRead) {
	out, bad, err := x.readManyLocked(keys)
	if err != nil {
		x.logger.Error(err, "Objects not readable")
	}
	n := 0
	for _, obj := range out {
		if obj != nil {
			out[n] = obj
			n++
		}
	}
	return out[:n], bad
}

// readManyLocked reads the objects of keys (Bounded mode), aligned with
// keys: nil for a key that is undecodable (known before, or found now:
// bad) or that err, the file's error, kept from being read. The caller
// holds mu (shared suffices).
func (x *Indexer) readManyLocked(keys []string) (out []any, bad []badRead, err error) {
	out = make([]any, len(keys))
	var misses []int
	for i, k := range keys {
		if obj, ok := x.memoryLocked(k); ok {
			out[i] = obj
		} else if _, known := x.undecodable[k]; !known {
			misses = append(misses, i)
		}
	}
	if len(misses) == 0 {
		return out, nil, nil
	}
	mk := make([]string, len(misses))
	for j, i := range misses {
		mk[j] = keys[i]
	}
	objs, errs, err := x.decodeKeys(mk)
	if err != nil {
		return out, nil, err
	}
	for j, i := range misses {
		if errs[j] != nil {
			bad = append(bad, *x.badReadLocked(keys[i], errs[j]))
			continue
		}
		out[i] = objs[j]
	}
	return out, bad, nil
}

// CachedObjects returns how many decoded objects memory holds: in Full
// mode all of them once the loaded ones are decoded (Decoded); in Bounded
// mode the LRU plus writes not yet committed.
func (x *Indexer) CachedObjects() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if !x.bounded {
		return len(x.objs)
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
