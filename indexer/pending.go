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
	// enc holds the batch's encoded records: released once committed.
	enc *encoding
	// mark is the durability mark of the batch (SetDurable): hasMark says
	// one was taken.
	mark    uint64
	hasMark bool
	// prune is the batch's PruneDeletes resourceVersion ("" none).
	prune  string
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
	s.Types = x.typesLocked()
	if gvk := x.codec.GVK(); !gvk.Empty() {
		s.Kind = gvk.String()
	}
	s.Created = x.saved.Created
	s.LastSync = x.saved.LastSync
	s.DeletesFrom = x.deletesFrom
	if x.listed {
		s.LastSync = time.Time{} // a list completed: the store stamps the commit time
	}
	return s
}

// Pending implements store.Source: it hands over every mutation applied
// since the last call, encoded, with the state record as of the last one.
// Encoding happens outside the lock, so readers and writers go on.
func (x *Indexer) Pending() (*store.Batch, error) {
	unlockWindow := x.lockForWindow()
	x.mu.Lock()
	if x.closed || (x.reset && !x.synced) || len(x.unpersisted) > 0 || x.held {
		// A cold start keeps the old data until a complete list replaces
		// it; an object that cannot be written, or Hold, holds the file
		// back at the last state it holds exactly (persist.go).
		x.mu.Unlock()
		unlockWindow()
		return nil, nil
	}
	if len(x.pending) == 0 && !x.stateDirty && !x.reset && len(x.drop) == 0 {
		x.mu.Unlock()
		unlockWindow()
		return nil, nil
	}
	ops := x.pending
	x.pending = map[string]*pendingOp{}
	x.inflight = ops
	st := x.stateLocked()
	tok := &token{ops: ops, reset: x.reset, drop: x.drop, listed: x.listed}
	if x.mark != nil {
		tok.mark, tok.hasMark = x.mark(), true
	}
	b := &store.Batch{Informer: x.name, Reset: x.reset, DropIndexes: x.drop, State: &st, Token: tok}
	if x.prune != "" {
		b.PruneDeletes, tok.prune = pruneFunc(x.prune), x.prune
		x.prune = ""
	}
	x.stateDirty, x.reset, x.drop, x.listed = false, false, nil, false
	keep, src := x.windowKeep, x.windowSrc
	x.mu.Unlock()
	// The batch's mutations are those of the changes numbered up to its
	// mark: the window's changes may be read after.
	unlockWindow()

	b.Ops, tok.enc = x.encodeOps(ops)
	x.windowBatch(b, tok, keep, src)
	if tok.enc.chunks != nil {
		b.Encoding = tok.enc
	}
	return b, nil
}

// encodeChunk is the number of ops an encoding worker takes at a time: a
// batch of at most one chunk is encoded at once, a larger one while the
// store applies it.
const encodeChunk = 32

// opsPerWorker is the least number of ops per encoding worker.
const opsPerWorker = 256

// keyedOp is one pending op with its key.
type keyedOp struct {
	key string
	op  *pendingOp
}

// encoding is a batch's encoding by its workers: a store.Encoding. Each
// worker writes into a RecordBuffer of its own; they are released when the
// batch is committed (or its commit failed) and every worker is done.
type encoding struct {
	bufs   []*store.RecordBuffer
	chunks []chan struct{} // closed when the chunk's ops are final; nil if encoded at once
	next   atomic.Int64    // the next op to claim
	done   sync.WaitGroup
}

// Ready implements store.Encoding.
func (e *encoding) Ready(i int) {
	if e.chunks != nil {
		<-e.chunks[i/encodeChunk]
	}
}

// Wait implements store.Encoding.
func (e *encoding) Wait() { e.done.Wait() }

// release waits for the workers and gives the buffers back.
func (e *encoding) release() {
	e.Wait()
	for _, rb := range e.bufs {
		rb.Release()
	}
	e.bufs = nil
}

// encodeOps turns ops into the batch's store ops, sorted by key (bbolt
// writes sorted keys fastest). A batch of more than one chunk is encoded
// by up to GOMAXPROCS workers while the store applies it
// (store.Batch.Encoding): the ops' keys are final when encodeOps returns,
// their records once Ready. An op that cannot be encoded gets its error
// (Op.Err): the store then fails the batch, and Committed holds the
// informer back (persist.go). Nothing is ever left out of a batch.
func (x *Indexer) encodeOps(ops map[string]*pendingOp) ([]store.Op, *encoding) {
	todo := make([]keyedOp, 0, len(ops))
	for k, op := range ops {
		todo = append(todo, keyedOp{k, op})
	}
	slices.SortFunc(todo, func(a, b keyedOp) int { return strings.Compare(a.key, b.key) })
	out := make([]store.Op, len(todo))
	recs := make([]store.Record, len(todo))
	nvals := 0
	for i := range todo {
		out[i].Key = todo[i].key
		out[i].IndexOnly = todo[i].op.kind == opReindex
		nvals += len(todo[i].op.vals)
	}
	// One allocation for every record's index values.
	slab := make([]store.IndexValues, nvals)
	off := 0
	for i := range todo {
		n := len(todo[i].op.vals)
		recs[i].Indexed = slab[off : off : off+n]
		off += n
	}
	nchunks := (len(todo) + encodeChunk - 1) / encodeChunk
	// At least opsPerWorker ops per worker, so that a worker's buffer
	// chunks are mostly used.
	workers := min(runtime.GOMAXPROCS(0), (len(todo)+opsPerWorker-1)/opsPerWorker)
	e := &encoding{bufs: make([]*store.RecordBuffer, max(workers, 1))}
	for i := range e.bufs {
		e.bufs[i] = &store.RecordBuffer{}
	}
	encodeRange := func(enc *codec.Encoder, lo, hi int) {
		for i := lo; i < hi; i++ {
			if err := encodeOp(enc, todo[i].key, todo[i].op, &out[i], &recs[i]); err != nil {
				out[i].Err = err
			}
		}
	}
	if nchunks <= 1 {
		encodeRange(x.codec.NewEncoder(e.bufs[0]), 0, len(todo))
		return out, e
	}
	e.chunks = make([]chan struct{}, nchunks)
	for i := range e.chunks {
		e.chunks[i] = make(chan struct{})
	}
	e.done.Add(workers)
	for w := range workers {
		go func() {
			defer e.done.Done()
			enc := x.codec.NewEncoder(e.bufs[w])
			for {
				lo := int(e.next.Add(encodeChunk)) - encodeChunk
				if lo >= len(todo) {
					return
				}
				encodeRange(enc, lo, min(lo+encodeChunk, len(todo)))
				close(e.chunks[lo/encodeChunk])
			}
		}()
	}
	return out, e
}

// encodeOp sets op's record into *o (whose Key and IndexOnly are set),
// with r as its record.
func encodeOp(enc *codec.Encoder, k string, op *pendingOp, o *store.Op, r *store.Record) error {
	switch op.kind {
	case opReindex:
		setIndexed(r, op.names, op.vals)
		o.Record = r
	case opPut:
		setIndexed(r, op.names, op.vals)
		raw, err := enc.Encode(k, op.obj, r)
		if err != nil {
			return err
		}
		o.Record, o.Raw = r, raw
		if op.tomb != nil {
			// A delete, then this put, in one commit: its kept delete
			// too.
			var tr store.Record
			if o.Tombstone, err = enc.Encode(k, op.tomb, &tr); err != nil {
				return err
			}
		}
	case opDelete:
		if op.obj != nil {
			// The kept delete (deletes.go): its last state, without
			// index values.
			raw, err := enc.Encode(k, op.obj, r)
			if err != nil {
				return err
			}
			o.Tombstone = raw
		}
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
	if cap(r.Indexed) >= n {
		r.Indexed = r.Indexed[:0]
	} else {
		r.Indexed = make([]store.IndexValues, 0, n)
	}
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
	var tok *token
	if b != nil {
		tok, _ = b.Token.(*token)
	}
	if tok != nil && tok.enc != nil {
		// The transaction is over: bbolt holds no reference to the
		// records any more. A failed batch is encoded again from tok.ops.
		tok.enc.release()
		tok.enc = nil
	}
	x.mu.Lock()
	var durable func(uint64)
	defer func() {
		x.mu.Unlock()
		if durable != nil {
			durable(tok.mark)
		}
	}()
	x.commitErr = err
	if tok == nil {
		return
	}
	if err == nil {
		if tok.hasMark {
			durable = x.durable
		}
		if tok.prune != "" {
			x.pruned = tok.prune
		}
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
	// Keep everything for the next attempt; newer mutations win. An op
	// that could not be encoded (the batch's *store.BatchError) holds the
	// informer back while it is the key's pending mutation.
	for i := range b.Ops {
		if o := &b.Ops[i]; o.Err != nil {
			if _, newer := x.pending[o.Key]; !newer {
				x.markUnpersistedLocked(o.Key, o.Err)
			}
		}
	}
	for k, op := range tok.ops {
		cur, newer := x.pending[k]
		if newer && cur.tomb == nil && cur.kind != opDelete {
			// The failed batch's kept delete, if any, still comes first.
			cur.tomb = keptDelete(op, *cur)
		}
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
	if tok.prune != "" && x.prune == "" {
		x.prune = tok.prune
	}
	x.reset = x.reset || tok.reset
	x.listed = x.listed || tok.listed
	x.drop = append(x.drop, tok.drop...)
}
