package store

import (
	"bytes"
	"fmt"
	"sort"

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
	return objs.Get(bucketKey(key))
}

// Reader reads the records of one informer by key, for a caller that
// asks for keys mostly in ascending order (a chunk of a warm start's
// keys, in file order): it steps its cursor forward over a few records
// instead of searching the tree again for each key, so such a read costs
// about what a cursor walk does. It is valid during the transaction only
// and is not safe for concurrent use.
type Reader struct {
	c    *bolt.Cursor // nil: the informer has no objects bucket
	k, v []byte       // the cursor's position (k nil: none)
}

// Reader returns a reader of the informer's records.
func (t *Tx) Reader(informer string) *Reader {
	objs := t.sub(informer, bucketObjects)
	if objs == nil {
		return &Reader{}
	}
	return &Reader{c: objs.Cursor()}
}

// readerSteps is how many records Reader.Get steps over before it
// searches the tree.
const readerSteps = 8

// Get returns the encoded record of key (valid during the transaction),
// or nil if there is none: GetRaw's answer. Keys are compared in their
// bucket form (an escaped key is not where its object key sorts: it is
// found by a search).
func (r *Reader) Get(key string) []byte {
	if r.c == nil {
		return nil
	}
	kb := bucketKey(key)
	if r.k != nil {
		switch cmp := bytes.Compare(r.k, kb); {
		case cmp == 0:
			return r.v // nil for a nested bucket, as Bucket.Get
		case cmp < 0:
			for range readerSteps {
				if r.k, r.v = r.c.Next(); r.k == nil {
					return nil // every key after the last one is smaller
				}
				if c := bytes.Compare(r.k, kb); c >= 0 {
					if c == 0 {
						return r.v
					}
					return nil // stepped past where it would be
				}
			}
		}
	}
	r.k, r.v = r.c.Seek(kb)
	if r.k != nil && bytes.Equal(r.k, kb) {
		return r.v
	}
	return nil
}

// Get returns the decoded record of key, or nil if there is none.
func (t *Tx) Get(informer, key string) (*Record, error) {
	raw := t.GetRaw(informer, key)
	if raw == nil {
		return nil, nil
	}
	return decode(informer, key, raw)
}

// ForEachRaw calls fn for every object of the informer in the file's order
// (the order of its bucket keys: raw keys in byte order, then the escaped
// ones), with the object key and the encoded record. A record under an
// escaped bucket key whose own key cannot be read or does not hash to it
// is passed with the bucket key for its key, so that the caller's check of
// the record (whose checksum covers the key) reports it. It stops at the
// first error fn returns.
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
		key, err := recordKey(k, v)
		if err != nil {
			key = string(k)
		}
		if err := fn(key, v); err != nil {
			return err
		}
	}
	return nil
}

// ForEach calls fn for every object of the informer in the file's order,
// decoded. A record that does not decode stops the walk with an
// ErrCorrupt error.
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

// objectKey returns the object key of a bucket key found in an index
// entry: itself, or for an escaped one the key its record holds (the
// bucket key as a string when there is no such record, or it is damaged).
func (t *Tx) objectKey(informer string, bkey []byte) string {
	if !isEscaped(bkey) {
		return string(bkey)
	}
	if objs := t.sub(informer, bucketObjects); objs != nil {
		if raw := objs.Get(bkey); raw != nil {
			if key, err := recordKey(bkey, raw); err == nil {
				return key
			}
		}
	}
	return string(bkey)
}

// IndexKeys returns the keys of the objects whose values in index include
// value, sorted.
func (t *Tx) IndexKeys(informer, index, value string) []string {
	ib := t.index(informer, index)
	if ib == nil {
		return nil
	}
	prefix := indexValuePrefix(value)
	var keys []string
	c := ib.Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		v, bkey, ok := splitIndexEntryKey(k)
		if ok && len(v) == len(prefix)-1 {
			keys = append(keys, t.objectKey(informer, bkey))
		}
	}
	sort.Strings(keys)
	return keys
}

// ForEachIndexEntry calls fn for every entry of index, in the file's
// order, with the index value and the object key. The value of an entry
// stored as a hash (a long value) is read from the object's record.
// Malformed entry keys, and hashed values no record explains, are
// reported as ErrCorrupt.
func (t *Tx) ForEachIndexEntry(informer, index string, fn func(value, key string) error) error {
	ib := t.index(informer, index)
	if ib == nil {
		return nil
	}
	c := ib.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		ev, bkey, ok := splitIndexEntryKey(k)
		if !ok {
			return corruptf("informer %q index %q: malformed entry %q", informer, index, k)
		}
		key := t.objectKey(informer, bkey)
		value := string(ev)
		if isEscaped(ev) {
			var found bool
			if value, found = t.escapedValue(informer, index, key, ev); !found {
				return corruptf("informer %q index %q: entry %q: object %q has no value that hashes to it", informer, index, k, key)
			}
		}
		if err := fn(value, key); err != nil {
			return err
		}
	}
	return nil
}

// escapedValue finds the value of key's record in index whose entry value
// is ev.
func (t *Tx) escapedValue(informer, index, key string, ev []byte) (string, bool) {
	r, err := t.Get(informer, key)
	if err != nil || r == nil {
		return "", false
	}
	for _, v := range r.Values(index) {
		if valueEscaped(v) && bytes.Equal(escape(v), ev) {
			return v, true
		}
	}
	return "", false
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

// ForEachDelete calls fn with the key and encoded Record envelope (valid
// during the transaction) of each delete the informer keeps (format
// version 5): an object's last state at its delete's resourceVersion. A
// damaged entry is passed with the error of its key.
func (t *Tx) ForEachDelete(informer string, fn func(key string, raw []byte, err error) error) error {
	d := t.sub(informer, bucketDeletes)
	if d == nil {
		return nil
	}
	return d.ForEach(func(k, v []byte) error {
		key, err := recordKey(k, v)
		return fn(key, v, err)
	})
}

// Checkpoints returns the encoded checkpoints by name (copies).
func (t *Tx) Checkpoints() map[string][]byte {
	b := t.tx.Bucket(bucketCheckpoints)
	if b == nil {
		return nil
	}
	out := map[string][]byte{}
	_ = b.ForEach(func(k, v []byte) error {
		out[string(k)] = append([]byte(nil), v...)
		return nil
	})
	return out
}
