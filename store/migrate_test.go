package store_test

import (
	"errors"
	"hash/crc32"
	"reflect"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/boltinformer/boltinformer/store"
)

// toVersion1 rewrites a current file as format version 1 wrote it: the
// record checksum covers the payload only, and the meta record says 1.
// damaged names a key whose version 1 record gets a bad checksum.
func toVersion1(t *testing.T, path, damaged string) {
	t.Helper()
	b, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	err = b.Update(func(tx *bolt.Tx) error {
		objs := tx.Bucket([]byte("informers")).Bucket([]byte("pods")).Bucket([]byte("objects"))
		type kv struct{ k, v []byte }
		var out []kv
		_ = objs.ForEach(func(k, v []byte) error {
			r, err := store.DecodeRecord(string(k), v)
			if err != nil {
				t.Fatal(err)
			}
			raw := append([]byte(nil), v...)
			// The checksum is the 0xce uint32 just before the payload's
			// bin header (bin8/bin16 here: 2 or 3 bytes).
			bin := 3
			if len(r.Payload) < 256 {
				bin = 2
			}
			at := len(raw) - len(r.Payload) - bin - 4
			if raw[at-1] != 0xce {
				t.Fatalf("%s: no uint32 checksum at %d", k, at)
			}
			sum := crc32.Checksum(r.Payload, crc32.MakeTable(crc32.Castagnoli))
			if string(k) == damaged {
				sum++
			}
			raw[at], raw[at+1], raw[at+2], raw[at+3] = byte(sum>>24), byte(sum>>16), byte(sum>>8), byte(sum)
			out = append(out, kv{append([]byte(nil), k...), raw})
			return nil
		})
		for _, e := range out {
			if err := objs.Put(e.k, e.v); err != nil {
				return err
			}
		}
		return tx.Bucket([]byte("meta")).Put([]byte("header"), header(magic, 1, epoch))
	})
	if err != nil {
		t.Fatal(err)
	}
}

func readAll(t *testing.T, db *store.DB) (map[string]*store.Record, error) {
	t.Helper()
	out := map[string]*store.Record{}
	err := db.View(func(tx *store.Tx) error {
		return tx.ForEach("pods", func(key string, r *store.Record) error {
			out[key] = r
			return nil
		})
	})
	return out, err
}

// TestMigrateVersion1: a read-only open of a version 1 file is refused
// with a *VersionError that says how to migrate, and changes nothing; a
// read-write open migrates every record in one transaction, after which
// the file reads exactly as before and checks clean.
func TestMigrateVersion1(t *testing.T) {
	path := tempPath(t)
	smallCache(t, path, 20)
	db := openT(t, path, nil)
	want, err := readAll(t, db)
	if err != nil || len(want) != 20 {
		t.Fatalf("%d records, %v", len(want), err)
	}
	_ = db.Close()
	toVersion1(t, path, "")
	before := fileHash(t, path)

	_, err = store.Open(path, &store.Options{ReadOnly: true})
	var ve *store.VersionError
	if !errors.As(err, &ve) || ve.Found != 1 || !strings.Contains(err.Error(), "read-write to migrate") {
		t.Fatalf("read-only open of a version 1 file: %v", err)
	}
	if fileHash(t, path) != before {
		t.Fatal("a refused read-only open changed the file")
	}
	// Before migration, the version 2 reader does not accept the records.
	b, _ := bolt.Open(path, 0o600, nil)
	_ = b.View(func(tx *bolt.Tx) error {
		v := tx.Bucket([]byte("informers")).Bucket([]byte("pods")).Bucket([]byte("objects")).Get([]byte("ns-0/pod-000000"))
		if _, err := store.DecodeRecord("ns-0/pod-000000", v); !errors.Is(err, store.ErrCorrupt) {
			t.Errorf("a version 1 record read as version 2: %v", err)
		}
		return nil
	})
	_ = b.Close()

	db = openT(t, path, nil)
	got, err := readAll(t, db)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("records after migration differ")
	}
	mustCheck(t, db)
	_ = db.Close()
	// The meta record now says FormatVersion: a read-only open works.
	ro, err := store.Open(path, &store.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("read-only open after migration: %v", err)
	}
	_ = ro.Close()
}

// TestMigrateKeepsDamage: a record that fails its version 1 checksum is
// not "repaired" by the migration: it stays corrupt, and the version 2
// reader says so.
func TestMigrateKeepsDamage(t *testing.T) {
	path := tempPath(t)
	smallCache(t, path, 5)
	toVersion1(t, path, "ns-1/pod-000001")
	db := openT(t, path, nil)
	defer db.Close()
	err := db.View(func(tx *store.Tx) error {
		_, err := tx.Get("pods", "ns-1/pod-000001")
		return err
	})
	if !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("damaged version 1 record after migration: %v", err)
	}
	err = db.View(func(tx *store.Tx) error {
		_, err := tx.Get("pods", "ns-2/pod-000002")
		return err
	})
	if err != nil {
		t.Fatalf("sound record after migration: %v", err)
	}
}

// TestRecordUnderAnotherKey: the checksum covers the key, so a sound
// record moved (or a key with a flipped bit) is corrupt.
func TestRecordUnderAnotherKey(t *testing.T) {
	raw, err := store.EncodeRecord("ns/a", &store.Record{UID: "u", ResourceVersion: "1", Codec: store.CodecProtobuf, Payload: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.DecodeRecord("ns/a", raw); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"ns/b", "ns/a ", "ns-a"} {
		if _, err := store.DecodeRecord(key, raw); !errors.Is(err, store.ErrCorrupt) {
			t.Errorf("record of ns/a read under %q: %v", key, err)
		}
	}
	// Every field is covered, not only the payload.
	for i := range raw {
		bad := append([]byte(nil), raw...)
		bad[i] ^= 0x01
		if r, err := store.DecodeRecord("ns/a", bad); err == nil {
			t.Errorf("byte %d flipped: decoded %+v", i, r)
		}
	}
}

// TestMigrateVersion2: a version 2 file is a version 3 file without
// snapshots: a read-only open reads it as it is (and changes nothing); a
// read-write open bumps the meta record, after which snapshots work.
func TestMigrateVersion2(t *testing.T) {
	path := tempPath(t)
	smallCache(t, path, 20)
	b, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("meta")).Put([]byte("header"), header(magic, 2, epoch))
	}); err != nil {
		t.Fatal(err)
	}
	_ = b.Close()
	before := fileHash(t, path)
	ro, err := store.Open(path, &store.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("read-only open of a version 2 file: %v", err)
	}
	if got, err := readAll(t, ro); err != nil || len(got) != 20 {
		t.Fatalf("read-only: %d records, %v", len(got), err)
	}
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}
	if fileHash(t, path) != before {
		t.Fatal("a read-only open changed the file")
	}
	db := openT(t, path, nil)
	if err := db.WriteSnapshot("pods"); err != nil {
		t.Fatal(err)
	}
	if _, err := snapshotOf(t, db, "pods"); err != nil {
		t.Fatalf("snapshot after the migration: %v", err)
	}
	mustCheck(t, db)
	var version uint32
	_ = db.View(func(tx *store.Tx) error {
		h := tx.Bolt().Bucket([]byte("meta")).Get([]byte("header"))
		version = uint32(h[4])<<24 | uint32(h[5])<<16 | uint32(h[6])<<8 | uint32(h[7])
		return nil
	})
	if version != store.FormatVersion {
		t.Fatalf("meta record version %d after a read-write open, want %d", version, store.FormatVersion)
	}
}
