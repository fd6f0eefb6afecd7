package store

import (
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// RewritePayloads rewrites the payloads of the informer's records of keys
// in one transaction (what resealing them with another encryption key
// needs): fn gets each record (keys the informer does not have are
// skipped) and may change its Payload and KeyID, returning true to have it
// written back with a new checksum. Every other field of the record is
// kept as it was, so the object, its envelope and its index entries do not
// change, and neither does the state record; the informer's envelope
// snapshot is deleted (it holds the key ids). fn must not keep r, whose
// Payload points into the file until fn replaces it. An error of fn, or a
// record that does not decode (wrapping ErrCorrupt), aborts the
// transaction: nothing is written. It returns how many records it wrote.
func (db *DB) RewritePayloads(informer string, keys []string, fn func(key string, r *Record) (bool, error)) (int, error) {
	var n int
	err := db.update(func(btx *bolt.Tx) error {
		n = 0
		tx := &Tx{tx: btx}
		root := tx.informer(informer)
		objs := tx.sub(informer, bucketObjects)
		if root == nil || objs == nil {
			return nil
		}
		for _, key := range keys {
			raw := objs.Get(bucketKey(key))
			if raw == nil {
				continue
			}
			r, err := ViewRecord(key, raw)
			if err != nil {
				return fmt.Errorf("object %q: %w", key, err)
			}
			kept := *r
			ok, err := fn(key, r)
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
			kept.Payload, kept.KeyID = r.Payload, r.KeyID
			out, err := EncodeRecord(key, &kept)
			if err != nil {
				return fmt.Errorf("object %q: %w", key, err)
			}
			if err := objs.Put(bucketKey(key), out); err != nil {
				return fmt.Errorf("object %q: %w", key, err)
			}
			n++
		}
		if n > 0 {
			return root.Delete(keySnapshot)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("store: rewrite payloads of informer %q in %s: %w", informer, db.path, err)
	}
	return n, nil
}
