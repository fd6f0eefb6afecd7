package store

import (
	"bytes"
	"fmt"
	"sort"

	bolt "go.etcd.io/bbolt"
)

// IndexRepair says what RepairIndexes wrote.
type IndexRepair struct {
	// Indexes are the index buckets rebuilt, sorted.
	Indexes []string
	// Entries is the number of index entries written.
	Entries int
	// Objects is the number of object records (now also the state's count).
	Objects int64
}

// RepairIndexes rebuilds an informer's index buckets from its object
// records, in one transaction: the index buckets are derived state (each
// record carries its index values, Record.Indexed), so when Check finds
// them disagreeing with the objects, or damaged, they can be thrown away
// and written again. It drops every index bucket, then writes, for each
// index the state record names, the entries of every record's values, and
// sets the state's object count. Values of indexes the state does not name
// (a dropped index) are left out, as Check does.
//
// It fails, changing nothing, with an error wrapping ErrCorrupt when the
// state record or an object record does not decode: the objects are then
// not trustworthy and the file must be quarantined instead. An informer
// the file does not have is not an error (nothing to repair). It may run
// while informers write to the DB: their later commits keep the rebuilt
// buckets in step.
func (db *DB) RepairIndexes(informer string) (IndexRepair, error) {
	var rep IndexRepair
	err := db.update(func(tx *bolt.Tx) error {
		rep = IndexRepair{}
		all := tx.Bucket(bucketInformers)
		if all == nil {
			return nil
		}
		root := all.Bucket([]byte(informer))
		if root == nil {
			return nil
		}
		var st *State
		if v := root.Get(keyState); v != nil {
			var err error
			if st, err = DecodeState(v); err != nil {
				return err
			}
		}
		// Without a state record, keep the index buckets the file has.
		var names []string
		if st != nil {
			names = append(names, st.Indexes...)
		} else if idx := root.Bucket(bucketIndexes); idx != nil {
			_ = idx.ForEachBucket(func(k []byte) error {
				names = append(names, string(k))
				return nil
			})
		}
		sort.Strings(names)
		entries := make(map[string][][]byte, len(names))
		for _, n := range names {
			if err := validName(n); err != nil {
				return corruptf("state names index %q: %v", n, err)
			}
			entries[n] = nil
		}
		if objs := root.Bucket(bucketObjects); objs != nil {
			c := objs.Cursor()
			for k, v := c.First(); k != nil; k, v = c.Next() {
				if v == nil {
					return corruptf("nested bucket %q in objects", k)
				}
				key, err := recordKey(k, v)
				if err != nil {
					return fmt.Errorf("object under %q: %w", k, err)
				}
				r, err := ViewRecord(key, v)
				if err != nil {
					return fmt.Errorf("object %q: %w", key, err)
				}
				rep.Objects++
				for _, iv := range r.Indexed {
					if _, ok := entries[iv.Index]; !ok {
						continue
					}
					for _, val := range iv.Values {
						entries[iv.Index] = append(entries[iv.Index], indexEntryKey(val, key))
					}
				}
			}
		}
		if err := root.Delete(keySnapshot); err != nil {
			return err
		}
		if root.Bucket(bucketIndexes) != nil {
			if err := root.DeleteBucket(bucketIndexes); err != nil {
				return err
			}
		}
		idx, err := root.CreateBucket(bucketIndexes)
		if err != nil {
			return err
		}
		for _, n := range names {
			b, err := idx.CreateBucket([]byte(n))
			if err != nil {
				return fmt.Errorf("index bucket %q: %w", n, err)
			}
			es := entries[n]
			sort.Slice(es, func(i, j int) bool { return bytes.Compare(es[i], es[j]) < 0 })
			b.FillPercent = 1 // appended in order
			for _, e := range es {
				if err := b.Put(e, nil); err != nil {
					return err
				}
			}
			rep.Entries += len(es)
		}
		rep.Indexes = names
		if st != nil && st.Objects != rep.Objects {
			st.Objects = rep.Objects
			raw, err := EncodeState(st)
			if err != nil {
				return err
			}
			if err := root.Put(keyState, raw); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return IndexRepair{}, fmt.Errorf("store: repair indexes of informer %q in %s: %w", informer, db.path, err)
	}
	return rep, nil
}
