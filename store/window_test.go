package store_test

import (
	"fmt"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/boltinformer/boltinformer/store"
)

// The window keeps at least the newest WindowKeep events in order, in
// whole batches (also while it holds fewer), is cleared by WindowReset and by an informer Reset, and is
// not served once a batch without the window moved the objects on (a
// writer that does not keep it).
func TestWindowKeepResetThrough(t *testing.T) {
	db, err := store.Open(filepath.Join(t.TempDir(), "w.db"), &store.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	rv := 0
	commit := func(b *store.Batch) {
		t.Helper()
		rv++
		b.Informer = "pods"
		b.State = &store.State{ResourceVersion: fmt.Sprint(rv)}
		if err := db.Commit(b); err != nil {
			t.Fatal(err)
		}
	}
	events := func(n int) []store.WindowEvent {
		out := make([]store.WindowEvent, n)
		for i := range out {
			out[i] = store.WindowEvent{Type: store.WindowUpsert, Key: fmt.Sprintf("ns/p%d", rv*100+i), ResourceVersion: fmt.Sprint(rv + 1)}
		}
		return out
	}
	window := func() []string {
		t.Helper()
		var keys []string
		if err := db.View(func(tx *store.Tx) error {
			evs, err := tx.Window("pods")
			for _, e := range evs {
				keys = append(keys, e.Key)
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return keys
	}
	commit(&store.Batch{Window: events(3), WindowKeep: 10})
	if got := fmt.Sprint(window()); got != "[ns/p0 ns/p1 ns/p2]" {
		t.Fatalf("3 of at most 10: %s", got)
	}
	commit(&store.Batch{Window: events(9), WindowKeep: 10})
	if got := window(); len(got) != 12 || got[0] != "ns/p0" || got[11] != "ns/p108" {
		t.Fatalf("3 and 9 of at least 10: %v", got)
	}
	commit(&store.Batch{Window: events(9), WindowKeep: 10})
	// The oldest batch goes: the other two hold 18, at least 10.
	if got := window(); len(got) != 18 || got[0] != "ns/p100" || got[17] != "ns/p208" {
		t.Fatalf("3, 9 and 9 kept to 9 and 9: %v", got)
	}
	commit(&store.Batch{}) // a bookmark: the window still ends at the objects
	if got := window(); len(got) != 18 {
		t.Fatalf("after a batch without changes: %v", got)
	}
	commit(&store.Batch{WindowReset: true, Window: events(1), WindowKeep: 10})
	if got := fmt.Sprint(window()); got != "[ns/p400]" {
		t.Fatalf("reset then one: %s", got)
	}
	commit(&store.Batch{Reset: true})
	if got := window(); len(got) != 0 {
		t.Fatalf("after an informer reset: %v", got)
	}
	commit(&store.Batch{Window: events(2), WindowKeep: 10})
	if got := window(); len(got) != 2 {
		t.Fatalf("after the reset, two: %v", got)
	}
	// A writer that keeps no window (of format version 5 before it) moves
	// the state on without it: the window is not served.
	path := db.Path()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	bdb, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := store.EncodeState(&store.State{ResourceVersion: "99"})
	if err != nil {
		t.Fatal(err)
	}
	if err := bdb.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("informers")).Bucket([]byte("pods")).Put([]byte("state"), raw)
	}); err != nil {
		t.Fatal(err)
	}
	if err := bdb.Close(); err != nil {
		t.Fatal(err)
	}
	if db, err = store.Open(path, &store.Options{NoSync: true}); err != nil {
		t.Fatal(err)
	}
	if got := window(); len(got) != 0 {
		t.Fatalf("a window left behind by another writer is served: %v", got)
	}
}
