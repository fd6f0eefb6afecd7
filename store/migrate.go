package store

import (
	"bytes"
	"fmt"
	"sort"
	"strings"

	bolt "go.etcd.io/bbolt"
)

// minMigratable is the oldest format version a read-write Open migrates.
const minMigratable uint32 = 1

// migrate brings a file of an older format version to FormatVersion in one
// write transaction that rewrites the meta record last: a crash leaves
// either the old file or the fully migrated one (docs/FORMAT.md section 10).
func (db *DB) migrate(from uint32) error {
	err := db.update(func(tx *bolt.Tx) error {
		for v := from; v < FormatVersion; v++ {
			step := migrations[v]
			if step == nil {
				return fmt.Errorf("no migration from version %d", v)
			}
			if err := step(tx); err != nil {
				return fmt.Errorf("version %d to %d: %w", v, v+1, err)
			}
		}
		m := tx.Bucket(bucketMeta)
		if m == nil {
			return corruptf("no %q bucket", bucketMeta)
		}
		return m.Put(keyHeader, encodeHeader(header{Version: FormatVersion, Created: db.created}))
	})
	if err != nil {
		return fmt.Errorf("store: migrate %s from format version %d: %w", db.path, from, err)
	}
	return nil
}

// migrations[v] rewrites a version v file as version v+1, inside tx.
var migrations = map[uint32]func(*bolt.Tx) error{
	1: migrate1to2,
	2: func(*bolt.Tx) error { return nil }, // version 3 only adds the optional snapshot
	3: migrate3to4,
	4: func(*bolt.Tx) error { return nil }, // version 5 only adds the optional deletes and checkpoints
}

// readableAsIs is the oldest format version a read-only Open reads without
// migrating it. Version 4 changed the envelope, so older files are
// migrated by a read-write open first.
const readableAsIs uint32 = 4

// migrate1to2 rewrites every object record with the version 2 checksum,
// which covers the key and the envelope as well as the payload. A record
// that fails its version 1 check is left as it is: it stays corrupt, and
// is reported as such by the version 2 reader.
func migrate1to2(tx *bolt.Tx) error {
	all := tx.Bucket(bucketInformers)
	if all == nil {
		return nil
	}
	for _, name := range bucketNames(all) {
		objs := all.Bucket([]byte(name)).Bucket(bucketObjects)
		if objs == nil {
			continue
		}
		type rewrite struct {
			key []byte
			raw []byte
		}
		var out []rewrite
		err := objs.ForEach(func(k, v []byte) error {
			if v == nil {
				return nil
			}
			r, err := decodeRecord(string(k), v, 1)
			if err != nil {
				return nil
			}
			raw, err := EncodeRecord(string(k), r)
			if err != nil {
				return err
			}
			out = append(out, rewrite{append([]byte(nil), k...), raw})
			return nil
		})
		if err != nil {
			return fmt.Errorf("informer %q: %w", name, err)
		}
		for _, w := range out {
			if err := objs.Put(w.key, w.raw); err != nil {
				return fmt.Errorf("informer %q key %q: %w", name, w.key, err)
			}
		}
	}
	return nil
}

// migrate3to4 rewrites every object record with the version 4 envelope
// (fields Key and Type), under its version 4 bucket key (a version 3 key
// starting with escapeMark is escaped now). A plaintext raw protobuf
// payload (codec 1) of an informer whose kind the state record names is
// wrapped as CodecKubeProtobuf, so that its kind can be checked; sealed
// ones, and those of an informer of unknown kind, keep codec 1. Index
// buckets are rebuilt from the records when a key or a value changed its
// stored form (version 4 escapes values of 16384 bytes and values starting
// with escapeMark), and envelope snapshots are dropped. A record that
// fails its version 3 check is left as it is: it stays corrupt.
func migrate3to4(tx *bolt.Tx) error {
	all := tx.Bucket(bucketInformers)
	if all == nil {
		return nil
	}
	for _, name := range bucketNames(all) {
		if err := migrateInformer3to4(all.Bucket([]byte(name))); err != nil {
			return fmt.Errorf("informer %q: %w", name, err)
		}
	}
	return nil
}

func migrateInformer3to4(root *bolt.Bucket) error {
	if err := root.Delete(keySnapshot); err != nil {
		return err
	}
	var apiVersion, kind string
	if v := root.Get(keyState); v != nil {
		if st, err := DecodeState(v); err == nil {
			apiVersion, kind = splitKind(st.Kind)
		}
	}
	objs := root.Bucket(bucketObjects)
	if objs == nil {
		return nil
	}
	type rewrite struct {
		old, key []byte
		raw      []byte
	}
	var out []rewrite
	rebuild := false
	entries := map[string][][]byte{} // by index: the version 4 entry keys
	err := objs.ForEach(func(k, v []byte) error {
		if v == nil {
			return nil
		}
		key := string(k)
		r, err := decodeRecord(key, v, 3)
		if err != nil {
			return nil
		}
		if r.Codec == CodecProtobuf && r.KeyID == "" && kind != "" {
			r.Payload, r.Codec = WrapKubeProtobuf(apiVersion, kind, r.Payload), CodecKubeProtobuf
		}
		raw, err := EncodeRecord(key, r)
		if err != nil {
			return err
		}
		bk := bytes.Clone(bucketKey(key))
		if !bytes.Equal(bk, k) {
			rebuild = true
		}
		for _, iv := range r.Indexed {
			for _, val := range iv.Values {
				rebuild = rebuild || valueEscaped(val)
				entries[iv.Index] = append(entries[iv.Index], indexEntryKey(val, key))
			}
		}
		out = append(out, rewrite{bytes.Clone(k), bk, raw})
		return nil
	})
	if err != nil {
		return err
	}
	for _, w := range out {
		if !bytes.Equal(w.old, w.key) {
			if err := objs.Delete(w.old); err != nil {
				return err
			}
		}
	}
	for _, w := range out {
		if err := objs.Put(w.key, w.raw); err != nil {
			return fmt.Errorf("key %q: %w", w.key, err)
		}
	}
	idx := root.Bucket(bucketIndexes)
	if !rebuild || idx == nil {
		return nil
	}
	for _, name := range bucketNames(idx) {
		if err := idx.DeleteBucket([]byte(name)); err != nil {
			return err
		}
		b, err := idx.CreateBucket([]byte(name))
		if err != nil {
			return err
		}
		es := entries[name]
		sort.Slice(es, func(i, j int) bool { return bytes.Compare(es[i], es[j]) < 0 })
		for _, e := range es {
			if err := b.Put(e, nil); err != nil {
				return err
			}
		}
	}
	return nil
}

// splitKind splits a State.Kind ("apps/v1, Kind=Deployment", "/v1,
// Kind=Pod") into apiVersion and kind; both are "" when it is not one.
func splitKind(s string) (apiVersion, kind string) {
	gv, k, ok := strings.Cut(s, ", Kind=")
	if !ok || k == "" {
		return "", ""
	}
	return strings.TrimPrefix(gv, "/"), k
}
