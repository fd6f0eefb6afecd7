package store_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/boltinformer/boltinformer/store"
)

// TestRegressionTornMetaPageHealedOnOpen: a power loss while bbolt wrote a
// meta page can leave garbage in it; bbolt opens the file from the other
// meta page (the last commit), but Check panicked on the invalid one and
// reported the file corrupt, so Options.Verify quarantined a sound file.
// A read-write Open now rewrites the invalid page.
func TestRegressionTornMetaPageHealedOnOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache.db")
	db, err := store.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// The meta page of the next transaction id is the older one: fill it
	// with garbage, as a commit cut by a power loss would have left it.
	bdb, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := bdb.Begin(false)
	if err != nil {
		t.Fatal(err)
	}
	next, pageSize := (tx.ID()+1)%2, bdb.Info().PageSize
	_ = tx.Rollback()
	if err := bdb.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte{0x5a, 0xa5, 0x3c}, pageSize/3+1)[:pageSize], int64(next*pageSize)); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	db, err = store.Open(path, nil)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer db.Close()
	probs, err := db.Check(nil)
	if err != nil || len(probs) > 0 {
		t.Fatalf("check after a torn meta page: %v %v", probs, err)
	}
}
