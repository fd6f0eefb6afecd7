package store_test

import (
	"errors"
	"reflect"
	"sort"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/boltinformer/boltinformer/store"
)

func snapshotOf(t *testing.T, db *store.DB, inf string) (*store.Snapshot, error) {
	t.Helper()
	var sn *store.Snapshot
	var serr error
	if err := db.View(func(tx *store.Tx) error {
		sn, serr = tx.Snapshot(inf)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return sn, serr
}

// snapshotFromRecords is what a snapshot of inf must say, from the
// decoded records.
func snapshotFromRecords(t *testing.T, db *store.DB, inf string) *store.Snapshot {
	t.Helper()
	want := &store.Snapshot{}
	byIndex := map[string]map[string][]int32{}
	if err := db.View(func(tx *store.Tx) error {
		return tx.ForEach(inf, func(key string, r *store.Record) error {
			pos := int32(len(want.Keys))
			want.Keys = append(want.Keys, key)
			want.ResourceVersions = append(want.ResourceVersions, r.ResourceVersion)
			want.UIDs = append(want.UIDs, r.UID)
			want.KeyIDs = append(want.KeyIDs, r.KeyID)
			for _, iv := range r.Indexed {
				if byIndex[iv.Index] == nil {
					byIndex[iv.Index] = map[string][]int32{}
				}
				for _, v := range iv.Values {
					byIndex[iv.Index][v] = append(byIndex[iv.Index][v], pos)
				}
			}
			return nil
		})
	}); err != nil {
		t.Fatal(err)
	}
	for name, vals := range byIndex {
		idx := store.SnapshotIndex{Name: name}
		for v, objs := range vals {
			idx.Values = append(idx.Values, store.SnapshotValue{Value: v, Objects: objs})
		}
		sort.Slice(idx.Values, func(i, j int) bool { return idx.Values[i].Value < idx.Values[j].Value })
		want.Indexes = append(want.Indexes, idx)
	}
	sort.Slice(want.Indexes, func(i, j int) bool { return want.Indexes[i].Name < want.Indexes[j].Name })
	return want
}

func TestSnapshotRoundTrip(t *testing.T) {
	db := openT(t, tempPath(t), nil)
	b := podBatch(t, "pods", 0, 40, "100")
	// A multi-valued index, a value shared by some, an object without
	// values, and two encryption key ids.
	for i := range b.Ops {
		r := b.Ops[i].Record
		r.Indexed = append(r.Indexed, store.IndexValues{Index: "labels", Values: []string{"a", "b" + string(rune('0'+i%3))}})
		if i%7 == 0 {
			r.Indexed = nil
		}
		if i%5 == 0 {
			r.KeyID = "k2"
		}
	}
	if err := db.Commit(b); err != nil {
		t.Fatal(err)
	}
	if _, err := snapshotOf(t, db, "pods"); !errors.Is(err, store.ErrNoSnapshot) {
		t.Fatalf("before WriteSnapshot: %v", err)
	}
	if err := db.WriteSnapshot("pods"); err != nil {
		t.Fatal(err)
	}
	got, err := snapshotOf(t, db, "pods")
	if err != nil {
		t.Fatal(err)
	}
	if want := snapshotFromRecords(t, db, "pods"); !reflect.DeepEqual(got, want) {
		t.Fatalf("snapshot\n%+v\nwant\n%+v", got, want)
	}
	mustCheck(t, db)
	// An informer without a state record, or none at all, gets none.
	for _, inf := range []string{"absent"} {
		if err := db.WriteSnapshot(inf); err != nil {
			t.Fatal(err)
		}
		if _, err := snapshotOf(t, db, inf); !errors.Is(err, store.ErrNoSnapshot) {
			t.Fatalf("%s: %v", inf, err)
		}
	}
}

// Every write of the informer deletes its snapshot in the same
// transaction; a write of another informer does not.
func TestSnapshotDeletedByWrites(t *testing.T) {
	writes := map[string]func(t *testing.T, db *store.DB){
		"commit of an object": func(t *testing.T, db *store.DB) {
			b := podBatch(t, "pods", 3, 4, "101")
			if err := db.Commit(b); err != nil {
				t.Fatal(err)
			}
		},
		"commit of the state only": func(t *testing.T, db *store.DB) {
			if err := db.Commit(&store.Batch{Informer: "pods", State: &store.State{ResourceVersion: "102", Synced: true, Indexes: []string{"namespace", "node"}}}); err != nil {
				t.Fatal(err)
			}
		},
		"an empty batch": func(t *testing.T, db *store.DB) {
			if err := db.Commit(&store.Batch{Informer: "pods"}); err != nil {
				t.Fatal(err)
			}
		},
		"RepairIndexes": func(t *testing.T, db *store.DB) {
			if _, err := db.RepairIndexes("pods"); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, write := range writes {
		t.Run(name, func(t *testing.T) {
			db := openT(t, tempPath(t), nil)
			if err := db.Commit(podBatch(t, "pods", 0, 10, "100"), podBatch(t, "other", 0, 2, "5")); err != nil {
				t.Fatal(err)
			}
			for _, inf := range []string{"pods", "other"} {
				if err := db.WriteSnapshot(inf); err != nil {
					t.Fatal(err)
				}
			}
			write(t, db)
			if _, err := snapshotOf(t, db, "pods"); !errors.Is(err, store.ErrNoSnapshot) {
				t.Fatalf("after the write: %v", err)
			}
			if _, err := snapshotOf(t, db, "other"); err != nil {
				t.Fatalf("the other informer's: %v", err)
			}
			mustCheck(t, db)
		})
	}
}

// A writer that changed the state record without deleting the snapshot
// (not one of ours) leaves it stale: it is not used; a damaged one is
// ErrCorrupt, which Check reports.
func TestSnapshotStaleOrDamaged(t *testing.T) {
	path := tempPath(t)
	db, err := store.Open(path, &store.Options{NoSync: true, Clock: fakeClock()})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Commit(podBatch(t, "pods", 0, 10, "100")); err != nil {
		t.Fatal(err)
	}
	if err := db.WriteSnapshot("pods"); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	pods := func(tx *bolt.Tx) *bolt.Bucket { return tx.Bucket([]byte("informers")).Bucket([]byte("pods")) }
	update := func(fn func(tx *bolt.Tx) error) {
		t.Helper()
		bdb, err := bolt.Open(path, 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := bdb.Update(fn); err != nil {
			t.Fatal(err)
		}
		if err := bdb.Close(); err != nil {
			t.Fatal(err)
		}
	}
	setRV := func(tx *bolt.Tx, rv string) error {
		st, err := store.DecodeState(pods(tx).Get([]byte("state")))
		if err != nil {
			return err
		}
		st.ResourceVersion = rv
		raw, err := store.EncodeState(st)
		if err != nil {
			return err
		}
		return pods(tx).Put([]byte("state"), raw)
	}
	var good []byte
	update(func(tx *bolt.Tx) error {
		good = append([]byte(nil), pods(tx).Get([]byte("snapshot"))...)
		return setRV(tx, "200")
	})
	db = openT(t, path, nil)
	if _, err := snapshotOf(t, db, "pods"); !errors.Is(err, store.ErrNoSnapshot) {
		t.Fatalf("stale: %v", err)
	}
	mustCheck(t, db) // a stale snapshot is not a problem: nobody uses it
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	update(func(tx *bolt.Tx) error {
		if err := setRV(tx, "100"); err != nil {
			return err
		}
		bad := append([]byte(nil), good...)
		bad[len(bad)/2] ^= 0x10
		return pods(tx).Put([]byte("snapshot"), bad)
	})
	db = openT(t, path, nil)
	if _, err := snapshotOf(t, db, "pods"); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("damaged: %v", err)
	}
	probs, err := db.Check(nil)
	if err != nil || len(probs) != 1 {
		t.Fatalf("Check of a damaged snapshot: %v %v", probs, err)
	}
}
