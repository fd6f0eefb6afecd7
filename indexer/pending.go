package indexer

import (
	"time"

	"sort"

	"github.com/boltinformer/boltinformer/store"
)

// token is what an indexer hands the committer with a batch, to restore
// the batch if it fails.
type token struct {
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

	keys := make([]string, 0, len(ops))
	for k := range ops {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	b.Ops = make([]store.Op, 0, len(keys))
	for _, k := range keys {
		op := ops[k]
		if err := storable(k, op); err != nil {
			// One bad key or value must not fail every commit: it stays in
			// memory only, and a restart will not have it.
			x.logger.Error(err, "Object not persisted", "key", k)
			continue
		}
		switch op.kind {
		case opDelete:
			b.Ops = append(b.Ops, store.Op{Key: k})
		case opReindex:
			r := &store.Record{}
			r.SetIndexed(valueMap(op.names, op.vals))
			b.Ops = append(b.Ops, store.Op{Key: k, Record: r, IndexOnly: true})
		case opPut:
			r, err := x.codec.Encode(k, op.obj)
			if err != nil {
				// Not storable (a foreign type in the store): it stays in
				// memory only, and a restart will not have it.
				x.logger.Error(err, "Object not persisted", "key", k)
				continue
			}
			r.SetIndexed(valueMap(op.names, op.vals))
			raw, err := store.EncodeRecord(k, r)
			if err != nil {
				x.logger.Error(err, "Object not persisted", "key", k)
				continue
			}
			b.Ops = append(b.Ops, store.Op{Key: k, Record: r, Raw: raw})
		}
	}
	return b, nil
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
