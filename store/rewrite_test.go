package store_test

import (
	"errors"
	"reflect"
	"testing"

	"github.com/boltinformer/boltinformer/store"
)

// TestRewritePayloads: only the payload and key id change; the checksum,
// index entries and state stay consistent, the envelope snapshot goes,
// and an error of fn writes nothing.
func TestRewritePayloads(t *testing.T) {
	db := openT(t, tempPath(t), nil)
	if err := db.Commit(podBatch(t, "pods", 0, 3, "1")); err != nil {
		t.Fatal(err)
	}
	if err := db.WriteSnapshot("pods"); err != nil {
		t.Fatal(err)
	}
	get := func(key string) *store.Record {
		t.Helper()
		var r *store.Record
		if err := db.View(func(tx *store.Tx) (err error) {
			r, err = tx.Get("pods", key)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return r
	}
	const key = "ns-1/pod-000001"
	before := get(key)
	stBefore := state(t, db, "pods")

	boom := errors.New("boom")
	if _, err := db.RewritePayloads("pods", []string{key}, func(string, *store.Record) (bool, error) { return false, boom }); !errors.Is(err, boom) {
		t.Fatalf("RewritePayloads with a failing fn: %v", err)
	}
	if n, err := db.RewritePayloads("pods", []string{key, "ns-9/absent"}, func(k string, r *store.Record) (bool, error) {
		r.Payload, r.KeyID = append([]byte("sealed:"), r.Payload...), "k1"
		r.UID, r.ResourceVersion, r.Indexed = "ignored", "ignored", nil // only the payload and key id are written
		return true, nil
	}); err != nil || n != 1 {
		t.Fatalf("RewritePayloads: %d, %v", n, err)
	}
	after := get(key)
	if string(after.Payload) != "sealed:"+string(before.Payload) || after.KeyID != "k1" {
		t.Fatalf("payload or key id not rewritten: %q %q", after.KeyID, after.Payload)
	}
	after.Payload, after.KeyID, after.Checksum = before.Payload, before.KeyID, before.Checksum
	if !reflect.DeepEqual(after, before) {
		t.Fatalf("envelope changed:\n%+v\n%+v", after, before)
	}
	if st := state(t, db, "pods"); !reflect.DeepEqual(st, stBefore) {
		t.Fatalf("state changed: %+v, was %+v", st, stBefore)
	}
	err := db.View(func(tx *store.Tx) error {
		_, err := tx.Snapshot("pods")
		return err
	})
	if !errors.Is(err, store.ErrNoSnapshot) {
		t.Fatalf("snapshot after a rewrite: %v", err)
	}
	mustCheck(t, db)
}
