package store

import (
	"bytes"
	"fmt"
	"slices"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Op is one mutation of one object. A nil Record deletes the key.
type Op struct {
	Key string
	// Record is the object's new envelope; nil deletes the object.
	Record *Record
	// Raw is Record encoded by EncodeRecord. Commit encodes Record when Raw
	// is nil; sources that encode off the commit path set it.
	Raw []byte
	// IndexOnly rewrites only the index values of the stored record (from
	// Record.Indexed), keeping its payload: an index backfill. It is a no-op
	// for an absent key.
	IndexOnly bool
	// Tombstone is the encoded Record envelope of a deleted object's last
	// state at the delete's resourceVersion (with a delete, or with a put
	// of the same key created again since): it is kept in the informer's
	// deletes bucket under the object's bucket key (format version 5), for
	// the checkpoints behind it.
	Tombstone []byte
	// Err, set by a source that could not encode the op (see
	// Batch.Encoding), fails the op's batch: Commit returns a *BatchError
	// and writes nothing. A source must never leave an object out of a
	// batch whose state record it writes.
	Err error
}

// BatchError is the error of a Commit whose batch of Informer could not be
// written because its source could not encode the op of Key (Op.Err). No
// batch of that Commit was written; the Committer writes the others again
// without it.
type BatchError struct {
	Informer string
	Key      string
	Err      error
}

// Error implements error.
func (e *BatchError) Error() string {
	return fmt.Sprintf("informer %q: key %q cannot be encoded: %v", e.Informer, e.Key, e.Err)
}

// Unwrap returns the op's error.
func (e *BatchError) Unwrap() error { return e.Err }

// Batch is the mutations of one informer that go into one transaction,
// together with the state record they bring the informer to.
type Batch struct {
	// Informer names the informer the batch changes; "" for a batch of
	// Checkpoints only.
	Informer string
	// Checkpoints, in a batch whose Informer is "", are written to the
	// checkpoints bucket by name; a nil value deletes one.
	Checkpoints map[string][]byte
	// PruneDeletes, when set, is called with the resourceVersion of each
	// kept delete of the informer: those it returns true for are removed.
	PruneDeletes func(rv string) bool
	// Reset drops all objects and index buckets of the informer before Ops
	// are applied (a cold start replacing old data), and its window.
	Reset bool
	// WindowReset clears the informer's window (window.go) before Window
	// is appended: the batch's changes are not all in it.
	WindowReset bool
	// Window are the batch's changes, in order, appended to the informer's
	// window after the Ops; then only the newest WindowKeep events are
	// kept (0: all).
	Window     []WindowEvent
	WindowKeep int
	// DropIndexes removes these index buckets.
	DropIndexes []string
	// Ops are applied in order.
	Ops []Op
	// State, when non-nil, is written after the Ops; the store sets its
	// Objects count and LastCommit, and Created (from the stored state, or
	// now) when it is zero, in the record and in *State. When nil, the
	// stored state is kept, with its Objects count brought up to date.
	State *State
	// Token is the source's own, carried back to Source.Committed.
	Token any
	// Encoding, when set, is the progress of a source that encodes the ops
	// while Commit applies them, so that encoding and bbolt's work overlap.
	// Each op's Key and IndexOnly are final when the batch is handed over;
	// its Record, Raw and Err only once Encoding.Ready for it has
	// returned. Commit and the Committer wait for it; a source must not
	// reuse the records' memory before the commit has returned.
	Encoding Encoding
}

// Encoding is the progress of a batch whose ops are encoded while it is
// committed (Batch.Encoding).
type Encoding interface {
	// Ready blocks until Ops[i] is final.
	Ready(i int)
	// Wait blocks until every op is final.
	Wait()
}

// Commit applies the batches in one bbolt transaction with one fsync
// (unless the DB was opened with NoSync). Either all of them are on disk
// when it returns nil, or none is.
func (db *DB) Commit(batches ...*Batch) error {
	for _, b := range batches {
		if b.Informer == "" && b.Checkpoints != nil {
			continue
		}
		if err := validName(b.Informer); err != nil {
			return err
		}
		if b.Encoding != nil {
			continue
		}
		for i := range b.Ops {
			if err := encodeOp(b.Informer, &b.Ops[i]); err != nil {
				return fmt.Errorf("store: commit to %s: %w", db.path, err)
			}
		}
	}
	now := db.clock.Now().UTC()
	err := db.update(func(tx *bolt.Tx) error {
		for _, b := range batches {
			if err := applyBatch(tx, b, now); err != nil {
				return fmt.Errorf("informer %q: %w", b.Informer, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: commit to %s: %w", db.path, err)
	}
	return nil
}

// encodeOp sets op.Raw from op.Record where the source left it to Commit;
// an op its source could not encode is the batch's *BatchError.
func encodeOp(informer string, op *Op) error {
	if op.Err != nil {
		return &BatchError{Informer: informer, Key: op.Key, Err: op.Err}
	}
	if op.Record == nil || op.Raw != nil || op.IndexOnly {
		return nil
	}
	raw, err := EncodeRecord(op.Key, op.Record)
	if err != nil {
		return err
	}
	op.Raw = raw
	return nil
}

// informerBuckets are the buckets of one informer within a write tx.
type informerBuckets struct {
	root, objects, indexes *bolt.Bucket
	index                  map[string]*bolt.Bucket
	// fresh are the index buckets this transaction created: the values
	// old records hold for them are stale (left by a dropped index of that
	// name) and stand for no entry.
	fresh map[string]bool
	// cursor reads the objects bucket (get).
	cursor *bolt.Cursor
}

// get returns the stored record of key, or nil. One cursor serves the
// whole batch (bbolt's Get makes one per call).
func (ib *informerBuckets) get(key []byte) []byte {
	if ib.cursor == nil {
		ib.cursor = ib.objects.Cursor()
	}
	k, v := ib.cursor.Seek(key)
	if !bytes.Equal(k, key) {
		return nil
	}
	return v // nil for a nested bucket, as Get
}

func openInformer(tx *bolt.Tx, name string) (*informerBuckets, error) {
	all, err := tx.CreateBucketIfNotExists(bucketInformers)
	if err != nil {
		return nil, err
	}
	root, err := all.CreateBucketIfNotExists([]byte(name))
	if err != nil {
		return nil, err
	}
	ib := &informerBuckets{root: root, index: map[string]*bolt.Bucket{}, fresh: map[string]bool{}}
	if ib.objects, err = root.CreateBucketIfNotExists(bucketObjects); err != nil {
		return nil, err
	}
	if ib.indexes, err = root.CreateBucketIfNotExists(bucketIndexes); err != nil {
		return nil, err
	}
	return ib, nil
}

func (ib *informerBuckets) indexBucket(name string) (*bolt.Bucket, error) {
	if b, ok := ib.index[name]; ok {
		return b, nil
	}
	if err := validName(name); err != nil {
		return nil, err
	}
	if ib.indexes.Bucket([]byte(name)) == nil {
		ib.fresh[name] = true
	}
	b, err := ib.indexes.CreateBucketIfNotExists([]byte(name))
	if err != nil {
		return nil, fmt.Errorf("index bucket %q: %w", name, err)
	}
	ib.index[name] = b
	return b, nil
}

func applyBatch(tx *bolt.Tx, b *Batch, now time.Time) error {
	if b.Informer == "" {
		return applyCheckpoints(tx, b.Checkpoints)
	}
	if b.Reset {
		all := tx.Bucket(bucketInformers)
		if root := all.Bucket([]byte(b.Informer)); root != nil {
			for _, name := range [][]byte{bucketObjects, bucketIndexes, bucketDeletes, bucketWindow} {
				if root.Bucket(name) != nil {
					if err := root.DeleteBucket(name); err != nil {
						return err
					}
				}
			}
		}
	}
	ib, err := openInformer(tx, b.Informer)
	if err != nil {
		return err
	}
	// The informer changes: its envelope snapshot, if any, no longer
	// describes it (snapshot.go).
	if err := ib.root.Delete(keySnapshot); err != nil {
		return err
	}
	for _, name := range b.DropIndexes {
		if ib.indexes.Bucket([]byte(name)) != nil {
			if err := ib.indexes.DeleteBucket([]byte(name)); err != nil {
				return fmt.Errorf("drop index %q: %w", name, err)
			}
		}
	}
	var delta int64
	for i := range b.Ops {
		op := &b.Ops[i]
		if b.Encoding != nil {
			b.Encoding.Ready(i)
			if err := encodeOp(b.Informer, op); err != nil {
				return err
			}
		}
		d, err := ib.apply(op)
		if err != nil {
			return fmt.Errorf("key %q: %w", b.Ops[i].Key, err)
		}
		delta += d
		if op.Tombstone != nil && !op.IndexOnly {
			if err := ib.keepDelete(op); err != nil {
				return fmt.Errorf("key %q: %w", op.Key, err)
			}
		}
	}
	if b.PruneDeletes != nil {
		if err := ib.pruneDeletes(b.PruneDeletes); err != nil {
			return err
		}
	}
	if err := ib.applyWindow(b); err != nil {
		return err
	}
	var old *State
	if v := ib.root.Get(keyState); v != nil {
		old, _ = DecodeState(v) // a damaged record is replaced
	}
	if b.State == nil {
		if old == nil || (delta == 0 && !b.Reset) {
			return nil
		}
		// The stored count is derived state: keep it right even when the
		// batch brings no new state record.
		st := *old
		st.Objects = countObjects(ib, old, b.Reset, delta)
		st.LastCommit = now.UTC()
		raw, err := EncodeState(&st)
		if err != nil {
			return err
		}
		return ib.root.Put(keyState, raw)
	}
	st := *b.State
	st.Objects = countObjects(ib, old, b.Reset, delta)
	st.LastCommit = now.UTC()
	if st.Created.IsZero() && old != nil {
		st.Created = old.Created
	}
	if st.Created.IsZero() {
		st.Created = st.LastCommit
	}
	if st.Synced && st.LastSync.IsZero() {
		// The source leaves LastSync zero in the batch that completes a
		// list: it is stamped with the commit time.
		st.LastSync = st.LastCommit
	}
	st.Indexes = append([]string(nil), st.Indexes...)
	sort.Strings(st.Indexes)
	raw, err := EncodeState(&st)
	if err != nil {
		return err
	}
	if err := ib.root.Put(keyState, raw); err != nil {
		return err
	}
	*b.State = st
	return nil
}

// countObjects derives the new object count from the previous state record
// and the batch's delta, falling back to a count of the bucket.
func countObjects(ib *informerBuckets, old *State, reset bool, delta int64) int64 {
	if !reset && old != nil {
		if n := old.Objects + delta; n >= 0 {
			return n
		}
	}
	var n int64
	c := ib.objects.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		n++
	}
	return n
}

// apply writes one op and keeps the index buckets in step. It returns the
// change in the number of objects.
func (ib *informerBuckets) apply(op *Op) (int64, error) {
	// bbolt copies the keys it keeps (Put clones its key), so the op's
	// key is lent without a copy.
	key := bucketKey(op.Key)
	var old *Record
	var delta int64
	raw := ib.get(key)
	if raw != nil && isEscaped(key) {
		// Two keys whose SHA-256 agree would share a record: refuse
		// rather than replace one object with the other. (A damaged
		// record there is replaced, as any damaged record.)
		if h, err := scanLayout(raw, nil); err == nil && string(h.Key) != op.Key {
			if _, err := ViewRecord(string(h.Key), raw); err == nil {
				return 0, fmt.Errorf("escaped key %q is taken by key %q", key, h.Key)
			}
		}
	}
	if raw == nil && op.Record == nil && isEscaped(keyBytes(op.Key)) {
		// A damaged record under an escaped bucket key, whose own key
		// could not be read, goes by its bucket key (Tx.ForEachRaw): its
		// delete names that.
		if d := ib.get(keyBytes(op.Key)); d != nil {
			if _, err := recordKey(keyBytes(op.Key), d); err != nil {
				if err := ib.scrubBucketKey(keyBytes(op.Key)); err != nil {
					return 0, err
				}
				return -1, ib.objects.Delete(keyBytes(op.Key))
			}
		}
	}
	if raw != nil && op.Record != nil && !op.IndexOnly && op.Raw != nil && sameIndexed(op.Key, raw, op.Raw) {
		// The common update: same index values. The old record checks,
		// so its index entries are the new ones already.
		return 0, ib.objects.Put(key, op.Raw)
	}
	if raw != nil {
		r, err := ViewRecord(op.Key, raw)
		if err != nil {
			// The old envelope is damaged: remove its index entries the
			// slow way, so no entry is left pointing at a changed object.
			if err := ib.scrubIndexEntries(op.Key); err != nil {
				return 0, err
			}
			r = &Record{}
		}
		old = r
	} else {
		delta = 1
	}
	var nw *Record
	if op.Record != nil {
		nw = op.Record
	}
	if op.IndexOnly {
		if old == nil || nw == nil {
			return 0, nil
		}
		re := *old
		re.Indexed = nw.Indexed
		raw, err := EncodeRecord(op.Key, &re)
		if err != nil {
			return 0, err
		}
		if err := ib.updateIndexEntries(op.Key, old, &re); err != nil {
			return 0, err
		}
		return 0, ib.objects.Put(key, raw)
	}
	if err := ib.updateIndexEntries(op.Key, old, nw); err != nil {
		return 0, err
	}
	if nw == nil {
		if old == nil {
			return 0, nil
		}
		return -1, ib.objects.Delete(key)
	}
	return delta, ib.objects.Put(key, op.Raw)
}

// updateIndexEntries replaces the index entries of key's old record by
// those of its new one. Records hold a few indexes each, so the two lists
// are matched by name without maps, and an index whose values did not
// change costs no bucket access.
func (ib *informerBuckets) updateIndexEntries(key string, old, nw *Record) error {
	var oldIdx, newIdx []IndexValues
	if old != nil {
		oldIdx = old.Indexed
	}
	if nw != nil {
		newIdx = nw.Indexed
	}
	for i := range oldIdx {
		name, vals := oldIdx[i].Index, oldIdx[i].Values
		keep := valuesOf(newIdx, name)
		if slices.Equal(vals, keep) {
			continue
		}
		// An index dropped since the old record was written has no bucket
		// (or one this transaction created): its stale values are
		// forgotten, not recreated.
		b := ib.existingIndexBucket(name)
		if b == nil || ib.fresh[name] {
			continue
		}
		for _, v := range vals {
			if contains(keep, v) {
				continue
			}
			if err := b.Delete(indexEntryKey(v, key)); err != nil {
				return err
			}
		}
	}
	for i := range newIdx {
		name, vals := newIdx[i].Index, newIdx[i].Values
		b, err := ib.indexBucket(name)
		if err != nil {
			return err
		}
		had := valuesOf(oldIdx, name)
		if ib.fresh[name] {
			had = nil // stale values of a dropped index: no entries
		} else if slices.Equal(vals, had) {
			continue
		}
		for _, v := range vals {
			if contains(had, v) {
				continue
			}
			if err := b.Put(indexEntryKey(v, key), nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// existingIndexBucket returns the bucket of an index, or nil if it has none
// (without creating it).
func (ib *informerBuckets) existingIndexBucket(name string) *bolt.Bucket {
	if b, ok := ib.index[name]; ok {
		return b
	}
	b := ib.indexes.Bucket([]byte(name))
	if b != nil {
		ib.index[name] = b // it existed: not fresh
	}
	return b
}

// valuesOf returns the values of the first entry for index in idx.
func valuesOf(idx []IndexValues, index string) []string {
	for i := range idx {
		if idx[i].Index == index {
			return idx[i].Values
		}
	}
	return nil
}

// scrubIndexEntries removes every index entry of key, scanning all buckets.
func (ib *informerBuckets) scrubIndexEntries(key string) error {
	return ib.scrubBucketKey(bucketKey(key))
}

// scrubBucketKey removes every index entry of the bucket key bkey.
func (ib *informerBuckets) scrubBucketKey(bkey []byte) error {
	var names [][]byte
	_ = ib.indexes.ForEachBucket(func(k []byte) error {
		names = append(names, append([]byte(nil), k...))
		return nil
	})
	for _, name := range names {
		b := ib.indexes.Bucket(name)
		var dead [][]byte
		c := b.Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			if _, ek, ok := splitIndexEntryKey(k); ok && bytes.Equal(ek, bkey) {
				dead = append(dead, append([]byte(nil), k...))
			}
		}
		for _, k := range dead {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
	}
	return nil
}

func contains(vals []string, v string) bool {
	for _, x := range vals {
		if x == v {
			return true
		}
	}
	return false
}

// keepDelete keeps the last state of a deleted object (Op.Tombstone) in
// the informer's deletes bucket.
func (ib *informerBuckets) keepDelete(op *Op) error {
	d, err := ib.root.CreateBucketIfNotExists(bucketDeletes)
	if err != nil {
		return err
	}
	return d.Put(bucketKey(op.Key), op.Tombstone)
}

// pruneDeletes removes the kept deletes whose resourceVersion drop
// returns true for (a damaged one too: it could not be delivered).
func (ib *informerBuckets) pruneDeletes(drop func(rv string) bool) error {
	d := ib.root.Bucket(bucketDeletes)
	if d == nil {
		return nil
	}
	var gone [][]byte
	c := d.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		key, err := recordKey(k, v)
		if err != nil {
			gone = append(gone, append([]byte(nil), k...))
			continue
		}
		r, err := ViewRecord(key, v)
		if err != nil || drop(r.ResourceVersion) {
			gone = append(gone, append([]byte(nil), k...))
		}
	}
	for _, k := range gone {
		if err := d.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// applyCheckpoints writes checkpoints by name (a nil value deletes one).
func applyCheckpoints(tx *bolt.Tx, cps map[string][]byte) error {
	b, err := tx.CreateBucketIfNotExists(bucketCheckpoints)
	if err != nil {
		return err
	}
	for name, raw := range cps {
		if err := validName(name); err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
		if raw == nil {
			err = b.Delete([]byte(name))
		} else {
			err = b.Put([]byte(name), raw)
		}
		if err != nil {
			return fmt.Errorf("checkpoint %q: %w", name, err)
		}
	}
	return nil
}
