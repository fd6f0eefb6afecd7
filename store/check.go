package store

import (
	"bytes"
	"errors"
	"fmt"
	"slices"

	bolt "go.etcd.io/bbolt"
)

// Problem is one inconsistency found by Check.
type Problem struct {
	// Informer is the informer concerned, or "" for the file.
	Informer string
	// Err describes it; it wraps ErrCorrupt.
	Err error
}

// Error implements error.
func (p Problem) Error() string {
	if p.Informer == "" {
		return p.Err.Error()
	}
	return fmt.Sprintf("informer %q: %v", p.Informer, p.Err)
}

// Unwrap returns the cause.
func (p Problem) Unwrap() error { return p.Err }

// CheckOptions bound what Check reports.
type CheckOptions struct {
	// MaxProblems stops the check after this many problems (0: 1000).
	MaxProblems int
	// OnObject, when set, is called after each object record is checked,
	// on Check's goroutine (a progress bar).
	OnObject func()
}

// Check verifies the whole file: bbolt's own page consistency check; every
// state record and object record decodes and its payload checksum matches;
// every index entry points to an existing object that has that value; every
// object's index values have their entries; the state's object count is
// right. It returns the problems found (nil: consistent). Index buckets are
// derived state, and this is their proof (like bbolt's Tx.Check).
func (db *DB) Check(opts *CheckOptions) ([]Problem, error) {
	max := 1000
	if opts != nil && opts.MaxProblems > 0 {
		max = opts.MaxProblems
	}
	onObject := func() {}
	if opts != nil && opts.OnObject != nil {
		onObject = opts.OnObject
	}
	var probs []Problem
	full := func() bool { return len(probs) >= max }
	add := func(inf string, format string, args ...any) {
		if !full() {
			probs = append(probs, Problem{Informer: inf, Err: corruptf(format, args...)})
		}
	}
	err := db.checkView(func(tx *Tx) error {
		// Drain the channel even when full: bbolt's checker runs in its
		// own goroutine over this transaction and blocks on every send.
		for e := range tx.tx.Check() {
			add("", "bbolt: %v", e)
		}
		if full() {
			return nil
		}
		for _, inf := range tx.Informers() {
			checkInformer(tx, inf, add, full, onObject)
			if full() {
				return nil
			}
		}
		return nil
	})
	if err != nil {
		return probs, err
	}
	return probs, nil
}

func checkInformer(tx *Tx, inf string, add func(string, string, ...any), full func() bool, onObject func()) {
	st, err := tx.State(inf)
	if err != nil {
		add(inf, "%v", err)
	}
	// want[index][entry key] from the records.
	want := map[string]map[string]bool{}
	bad := map[string]bool{} // bucket keys whose record does not decode
	// The envelope snapshot the records make, to compare with the file's.
	records := newSnapshotBuilder()
	var n int64
	// Walk with cursors rather than ForEachRaw and ForEachIndexEntry, so
	// that one bad entry is reported and the walk goes on.
	objs := tx.informer(inf).Bucket(bucketObjects)
	if objs != nil {
		c := objs.Cursor()
		for k, raw := c.First(); k != nil && !full(); k, raw = c.Next() {
			if raw == nil {
				add(inf, "nested bucket %q in objects", k)
				continue
			}
			n++
			onObject()
			key, err := recordKey(k, raw)
			if err != nil {
				add(inf, "object under %q: %v", k, err)
				bad[string(k)] = true
				continue
			}
			r, err := ViewRecord(key, raw)
			if err != nil {
				add(inf, "object %q: %v", key, err)
				bad[string(k)] = true
				continue
			}
			if r.Type != "" && (st == nil || !slices.Contains(st.Types, r.Type)) {
				add(inf, "object %q is of type %q, which the informer's state does not name", key, r.Type)
			}
			for _, iv := range r.Indexed {
				m := want[iv.Index]
				if m == nil {
					m = map[string]bool{}
					want[iv.Index] = m
				}
				for _, v := range iv.Values {
					m[string(indexEntryKey(v, key))] = true
					records.index([]byte(iv.Index), []byte(v))
				}
			}
			records.object(key, []byte(r.ResourceVersion), []byte(r.UID), []byte(r.KeyID))
		}
	}
	if st != nil && st.Objects != n {
		add(inf, "state counts %d objects, bucket holds %d", st.Objects, n)
	}
	_ = tx.ForEachDelete(inf, func(key string, raw []byte, err error) error {
		if err == nil {
			_, err = ViewRecord(key, raw)
		}
		if err != nil {
			add(inf, "kept delete %q: %v", key, err)
		}
		return nil
	})
	if evs, err := tx.Window(inf); err != nil {
		add(inf, "window: %v", err)
	} else {
		for i, e := range evs {
			for _, raw := range [][]byte{e.Object, e.Prev} {
				if raw == nil {
					continue
				}
				if _, err := ViewRecord(e.Key, raw); err != nil {
					add(inf, "window event %d (%q): %v", i+1, e.Key, err)
				}
			}
		}
	}
	if st != nil {
		for _, name := range st.Indexes {
			if !tx.HasIndex(inf, name) && len(want[name]) > 0 {
				add(inf, "index %q named in state has no bucket", name)
			}
		}
	}
	for _, name := range tx.Indexes(inf) {
		m := want[name]
		c := tx.index(inf, name).Cursor()
		for k, v := c.First(); k != nil && !full(); k, v = c.Next() {
			value, bkey, ok := splitIndexEntryKey(k)
			switch {
			case v == nil && tx.index(inf, name).Bucket(k) != nil:
				add(inf, "index %q: nested bucket %q", name, k)
				continue
			case !ok:
				add(inf, "index %q: malformed entry %q", name, k)
				continue
			case m[string(k)]:
				delete(m, string(k))
				continue
			case bad[string(bkey)]:
				continue // reported above; its values are unknown
			}
			key := tx.objectKey(inf, bkey)
			if objs == nil || objs.Get(bkey) == nil {
				add(inf, "index %q value %q points to missing object %q", name, value, key)
			} else {
				add(inf, "index %q value %q points to object %q, which does not have that value", name, value, key)
			}
		}
		delete(want, name)
		for k := range m {
			add(inf, "object %q has value %q in index %q but no index entry", entryObject(tx, inf, k), entryValueOf(k), name)
		}
	}
	if len(bad) == 0 {
		checkSnapshot(tx, inf, records.snapshot(), add)
	}
	for name, m := range want {
		if st == nil || !slices.Contains(st.Indexes, name) {
			continue // stale values of a dropped index, removed on the next write
		}
		for k := range m {
			add(inf, "object %q has value %q in index %q, which has no bucket", entryObject(tx, inf, k), entryValueOf(k), name)
			break
		}
	}
}

// entryObject is the object key of an index entry key, for messages.
func entryObject(tx *Tx, inf, entry string) string {
	_, bkey, _ := splitIndexEntryKey([]byte(entry))
	return tx.objectKey(inf, bkey)
}

// entryValueOf is the entry value of an index entry key (a hash for a long
// value), for messages.
func entryValueOf(entry string) string {
	v, _, _ := splitIndexEntryKey([]byte(entry))
	return string(v)
}

// checkView runs fn in the transaction Check needs. bbolt's Tx.Check reads
// the DB's freelist, which a concurrent writer changes: on a read-only
// transaction it is only safe with no writer (pages that a later commit
// freed are reported "reachable freed"). So a writable DB is checked in a
// write transaction, rolled back, which holds commits off meanwhile; a DB
// opened read-only has no writer.
func (db *DB) checkView(fn func(*Tx) error) error {
	if db.readOnly {
		return db.View(fn)
	}
	return db.withBolt("check", func(b *bolt.DB) error {
		btx, err := b.Begin(true)
		if err != nil {
			return fmt.Errorf("store: check %s: %w", db.path, err)
		}
		defer func() { _ = btx.Rollback() }()
		return fn(&Tx{tx: btx})
	})
}

// checkSnapshot verifies that the informer's envelope snapshot, when the
// file has one that belongs to its state record, says what its records
// say (want, built by checkInformer's walk).
func checkSnapshot(tx *Tx, inf string, want *Snapshot, add func(string, string, ...any)) {
	sn, err := tx.Snapshot(inf)
	switch {
	case errors.Is(err, ErrNoSnapshot):
		return
	case err != nil:
		add(inf, "%v", err)
		return
	}
	var stamp snapshotStamp
	if !bytes.Equal(encodeSnapshot(sn, stamp), encodeSnapshot(want, stamp)) {
		add(inf, "the envelope snapshot (%d objects) disagrees with the records (%d objects)", len(sn.Keys), len(want.Keys))
	}
}
