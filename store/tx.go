package store

import (
	"bytes"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// Tx is a read-only view of the file, valid only inside the function given
// to DB.View. Byte slices it passes to callbacks are valid only during the
// callback.
type Tx struct {
	tx *bolt.Tx
}

// Bolt returns the underlying bbolt transaction (read-only).
func (t *Tx) Bolt() *bolt.Tx { return t.tx }

func (t *Tx) informer(name string) *bolt.Bucket {
	root := t.tx.Bucket(bucketInformers)
	if root == nil {
		return nil
	}
	return root.Bucket([]byte(name))
}

// Informers returns the informer names in the file, sorted.
func (t *Tx) Informers() []string {
	root := t.tx.Bucket(bucketInformers)
	if root == nil {
		return nil
	}
	return bucketNames(root)
}

// bucketNames returns the names of b's nested buckets, in key order.
func bucketNames(b *bolt.Bucket) []string {
	var names []string
	_ = b.ForEachBucket(func(k []byte) error {
		names = append(names, string(k))
		return nil
	})
	return names
}

// State returns an informer's state record, or nil if the informer has none.
func (t *Tx) State(informer string) (*State, error) {
	b := t.informer(informer)
	if b == nil {
		return nil, nil
	}
	v := b.Get(keyState)
	if v == nil {
		return nil, nil
	}
	s, err := DecodeState(v)
	if err != nil {
		return nil, fmt.Errorf("informer %q: %w", informer, err)
	}
	return s, nil
}

// StateRaw returns an informer's encoded state record (valid during the
// transaction), or nil.
func (t *Tx) StateRaw(informer string) []byte {
	b := t.informer(informer)
	if b == nil {
		return nil
	}
	return b.Get(keyState)
}

// sub returns the informer's nested bucket name (objects or indexes), or
// nil if the informer or the bucket does not exist.
func (t *Tx) sub(informer string, name []byte) *bolt.Bucket {
	b := t.informer(informer)
	if b == nil {
		return nil
	}
	return b.Bucket(name)
}

// decode decodes the record of key, naming both in the error.
func decode(informer, key string, raw []byte) (*Record, error) {
	r, err := DecodeRecord(key, raw)
	if err != nil {
		return nil, fmt.Errorf("informer %q key %q: %w", informer, key, err)
	}
	return r, nil
}

// GetRaw returns the encoded record of key (valid during the transaction),
// or nil.
func (t *Tx) GetRaw(informer, key string) []byte {
	objs := t.sub(informer, bucketObjects)
	if objs == nil {
		return nil
	}
	return objs.Get([]byte(key))
}

// Get returns the decoded record of key, or nil if there is none.
func (t *Tx) Get(informer, key string) (*Record, error) {
	raw := t.GetRaw(informer, key)
	if raw == nil {
		return nil, nil
	}
	return decode(informer, key, raw)
}

// ForEachRaw calls fn for every object of the informer in key order, with
// the encoded record. It stops at the first error fn returns.
func (t *Tx) ForEachRaw(informer string, fn func(key string, raw []byte) error) error {
	objs := t.sub(informer, bucketObjects)
	if objs == nil {
		return nil
	}
	c := objs.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if v == nil {
			return corruptf("informer %q: nested bucket %q in objects", informer, k)
		}
		if err := fn(string(k), v); err != nil {
			return err
		}
	}
	return nil
}

// ForEach calls fn for every object of the informer in key order, decoded.
// A record that does not decode stops the walk with an ErrCorrupt error.
func (t *Tx) ForEach(informer string, fn func(key string, r *Record) error) error {
	return t.ForEachRaw(informer, func(key string, raw []byte) error {
		r, err := decode(informer, key, raw)
		if err != nil {
			return err
		}
		return fn(key, r)
	})
}

// Indexes returns the names of the informer's index buckets, sorted.
func (t *Tx) Indexes(informer string) []string {
	idx := t.sub(informer, bucketIndexes)
	if idx == nil {
		return nil
	}
	return bucketNames(idx)
}

func (t *Tx) index(informer, index string) *bolt.Bucket {
	idx := t.sub(informer, bucketIndexes)
	if idx == nil {
		return nil
	}
	return idx.Bucket([]byte(index))
}

// HasIndex reports whether the informer has an index bucket of that name.
func (t *Tx) HasIndex(informer, index string) bool { return t.index(informer, index) != nil }

// IndexKeys returns the keys of the objects whose values in index include
// value, in key order.
func (t *Tx) IndexKeys(informer, index, value string) []string {
	ib := t.index(informer, index)
	if ib == nil {
		return nil
	}
	prefix := indexValuePrefix(value)
	var keys []string
	c := ib.Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		v, key, ok := splitIndexEntryKey(k)
		if ok && v == value {
			keys = append(keys, key)
		}
	}
	return keys
}

// ForEachIndexEntry calls fn for every entry of index in order. Malformed
// entry keys are reported as ErrCorrupt.
func (t *Tx) ForEachIndexEntry(informer, index string, fn func(value, key string) error) error {
	ib := t.index(informer, index)
	if ib == nil {
		return nil
	}
	c := ib.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		v, key, ok := splitIndexEntryKey(k)
		if !ok {
			return corruptf("informer %q index %q: malformed entry %q", informer, index, k)
		}
		if err := fn(v, key); err != nil {
			return err
		}
	}
	return nil
}

// IndexValues returns the distinct values of index with the number of
// objects each has.
func (t *Tx) IndexValues(informer, index string) (map[string]int, error) {
	out := map[string]int{}
	err := t.ForEachIndexEntry(informer, index, func(value, _ string) error {
		out[value]++
		return nil
	})
	return out, err
}
