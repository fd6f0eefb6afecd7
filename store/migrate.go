package store

import (
	"fmt"

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
}

// readableAsIs is the oldest format version a read-only Open reads without
// migrating it: a version 2 file is a version 3 file without snapshots.
const readableAsIs uint32 = 2

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
