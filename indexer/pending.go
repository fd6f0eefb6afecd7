package indexer

import (
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/boltinformer/boltinformer/internal/codec"
	"github.com/boltinformer/boltinformer/store"
)

// token is what an indexer hands the committer with a batch, to restore
// the batch if it fails.
type token struct {
	// bufs hold the batch's encoded records: released once committed.
	bufs   []*store.RecordBuffer
	listed bool
	ops    map[string]*pendingOp
	reset  bool
	drop   []string
}

// stateLocked is the state record the applied mutations bring the file to.
func (x *Indexer) stateLocked() store.State {
	s := x.identity
	s.ResourceVersion = x.rv
	s.Synced = x.synced
	s.Indexes = append([]string(nil), x.idx.names...)
	if gvk := x.codec.GVK(); !gvk.Empty() {
		s.Kind = gvk.String()
	}
	s.Created = x.saved.Created
	s.LastSync = x.saved.LastSync
	if x.listed {
		s.LastSync = time.Time{} // a list completed: the store stamps the commit time
	}
	return s
}

// Pending implements store.Source: it hands over every mutation applied
// since the last call, encoded, with the state record as of the last one.
// Encoding happens outside the lock, so readers and writers go on.
func (x *Indexer) Pending() (*store.Batch, error) {
	x.mu.Lock()
	if x.closed || (x.reset && !x.synced) {
		// A cold start keeps the old data until a complete list replaces it.
		x.mu.Unlock()
		return nil, nil
	}
	if len(x.pending) == 0 && !x.stateDirty && !x.reset && len(x.drop) == 0 {
		x.mu.Unlock()
		return nil, nil
	}
	ops := x.pending
	x.pending = map[string]*pendingOp{}
	x.inflight = ops
	st := x.stateLocked()
	tok := &token{ops: ops, reset: x.reset, drop: x.drop, listed: x.listed}
	b := &store.Batch{Informer: x.name, Reset: x.reset, DropIndexes: x.drop, State: &st, Token: tok}
	x.stateDirty, x.reset, x.drop, x.listed = false, false, nil, false
	x.mu.Unlock()

	b.Ops, tok.bufs = x.encodeOps(ops)
	return b, nil
}

// encodeChunk is the number of ops an encoding worker takes at a time.
const encodeChunk = 32

// keyedOp is one pending op with its key.
type keyedOp struct {
	key string
	op  *pendingOp
}

// encodeOps turns ops into the batch's store ops, sorted by key (bbolt
// writes sorted keys fastest). The payloads are encoded by up to
// GOMAXPROCS workers, each into a RecordBuffer of its own, which the
// caller releases once the batch is committed. An op that cannot be
// stored is logged and left out.
func (x *Indexer) encodeOps(ops map[string]*pendingOp) ([]store.Op, []*store.RecordBuffer) {
	todo := make([]keyedOp, 0, len(ops))
	for k, op := range ops {
		todo = append(todo, keyedOp{k, op})
	}
	slices.SortFunc(todo, func(a, b keyedOp) int { return strings.Compare(a.key, b.key) })
	out := make([]store.Op, len(todo))
	recs := make([]store.Record, len(todo))
	errs := make([]error, len(todo))
	workers := min(runtime.GOMAXPROCS(0), (len(todo)+encodeChunk-1)/encodeChunk)
	bufs := make([]*store.RecordBuffer, max(workers, 1))
	var next atomic.Int64
	work := func(w int) {
		rb := &store.RecordBuffer{}
		bufs[w] = rb
		enc := x.codec.NewEncoder(rb)
		for {
			lo := int(next.Add(encodeChunk)) - encodeChunk
			if lo >= len(todo) {
				return
			}
			for i := lo; i < min(lo+encodeChunk, len(todo)); i++ {
				errs[i] = encodeOp(enc, todo[i].key, todo[i].op, &out[i], &recs[i])
			}
		}
	}
	var wg sync.WaitGroup
	for w := 1; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			work(w)
		}()
	}
	work(0)
	wg.Wait()
	n := 0
	for i := range out {
		if errs[i] != nil {
			// One bad key, value or object (a foreign type in the store)
			// must not fail every commit: it stays in memory only, and a
			// restart will not have it.
			x.logger.Error(errs[i], "Object not persisted", "key", todo[i].key)
			continue
		}
		out[n] = out[i]
		n++
	}
	clear(out[n:])
	return out[:n], bufs
}

// encodeOp sets *o to the store op of op, with r as its record.
func encodeOp(enc *codec.Encoder, k string, op *pendingOp, o *store.Op, r *store.Record) error {
	if err := storable(k, op); err != nil {
		return err
	}
	switch op.kind {
	case opDelete:
		*o = store.Op{Key: k}
	case opReindex:
		setIndexed(r, op.names, op.vals)
		*o = store.Op{Key: k, Record: r, IndexOnly: true}
	case opPut:
		setIndexed(r, op.names, op.vals)
		raw, err := enc.Encode(k, op.obj, r)
		if err != nil {
			return err
		}
		*o = store.Op{Key: k, Record: r, Raw: raw}
	}
	return nil
}

// setIndexed sets r.Indexed to the values vals[i] of index names[i]: what
// r.SetIndexed(valueMap(names, vals)) sets, without building a map when the
// names and each value list are sorted and free of duplicates (as the
// indexer keeps its names, and as single values are).
func setIndexed(r *store.Record, names []string, vals [][]string) {
	if len(vals) > len(names) || !strictlySorted(names) {
		r.SetIndexed(valueMap(names, vals))
		return
	}
	n := 0
	for _, v := range vals {
		if len(v) == 0 {
			continue
		}
		if !strictlySorted(v) {
			r.SetIndexed(valueMap(names, vals))
			return
		}
		n++
	}
	if n == 0 {
		r.Indexed = nil
		return
	}
	r.Indexed = make([]store.IndexValues, 0, n)
	for i, v := range vals {
		if len(v) > 0 {
			// Shared with the in-memory index, which never changes a
			// value list in place; the store only reads it.
			r.Indexed = append(r.Indexed, store.IndexValues{Index: names[i], Values: v})
		}
	}
}

func strictlySorted(s []string) bool {
	for i := 1; i < len(s); i++ {
		if s[i-1] >= s[i] {
			return false
		}
	}
	return true
}

// storable checks what the store would refuse for op.
func storable(key string, op *pendingOp) error {
	if err := store.ValidateKey(key); err != nil {
		return err
	}
	for _, vals := range op.vals {
		for _, v := range vals {
			if err := store.ValidateIndexEntry(v, key); err != nil {
				return err
			}
		}
	}
	return nil
}

func valueMap(names []string, vals [][]string) map[string][]string {
	if len(vals) == 0 {
		return nil
	}
	m := make(map[string][]string, len(vals))
	for i, v := range vals {
		if len(v) > 0 && i < len(names) {
			m[names[i]] = v
		}
	}
	return m
}

// Committed implements store.Source.
func (x *Indexer) Committed(b *store.Batch, err error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.commitErr = err
	if b == nil {
		return
	}
	tok, _ := b.Token.(*token)
	if tok == nil {
		return
	}
	// The transaction is over: bbolt holds no reference to the records
	// any more. A failed batch is encoded again from tok.ops.
	for _, rb := range tok.bufs {
		rb.Release()
	}
	tok.bufs = nil
	if err == nil {
		x.saved = *b.State
		if x.bounded {
			for k, op := range tok.ops {
				if op.kind != opPut {
					continue
				}
				if _, newer := x.pending[k]; newer || x.items[k] == nil {
					continue
				}
				x.lru.Add(k, op.obj)
			}
		}
		x.inflight = nil
		return
	}
	// Keep everything for the next attempt; newer mutations win.
	for k, op := range tok.ops {
		cur, newer := x.pending[k]
		switch {
		case !newer:
			x.pending[k] = op
		case cur.kind == opReindex && op.kind == opPut:
			// An index backfill (AddIndexers) ran meanwhile: it only
			// rewrites index values, so the failed put must still be
			// written, with the new values.
			x.pending[k] = &pendingOp{kind: opPut, obj: op.obj, names: cur.names, vals: cur.vals}
		}
	}
	x.inflight = nil
	x.stateDirty = true
	x.reset = x.reset || tok.reset
	x.listed = x.listed || tok.listed
	x.drop = append(x.drop, tok.drop...)
}
