package store_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"reflect"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
	bolt "go.etcd.io/bbolt"

	"github.com/boltinformer/boltinformer/store"
)

// legacyRecord encodes r as format versions 1 to 3 wrote it under key: a
// 9-element envelope (no Key and Type) whose checksum is sum(head).
func legacyRecord(t *testing.T, key string, r *store.Record, sum func(head []byte) uint32) []byte {
	t.Helper()
	var head bytes.Buffer
	enc := msgpack.NewEncoder(&head)
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(enc.EncodeArrayLen(9))
	must(enc.EncodeString(r.UID))
	must(enc.EncodeString(r.ResourceVersion))
	must(enc.EncodeUint8(uint8(r.Codec)))
	must(enc.EncodeString(r.KeyID))
	must(enc.EncodeString(r.APIVersion))
	must(enc.EncodeString(r.Kind))
	must(enc.EncodeArrayLen(len(r.Indexed)))
	for _, iv := range r.Indexed {
		must(enc.EncodeArrayLen(2))
		must(enc.EncodeString(iv.Index))
		must(enc.EncodeArrayLen(len(iv.Values)))
		for _, v := range iv.Values {
			must(enc.EncodeString(v))
		}
	}
	out := bytes.NewBuffer(bytes.Clone(head.Bytes()))
	enc.Reset(out)
	must(enc.EncodeUint32(sum(head.Bytes())))
	must(enc.EncodeBytesLen(len(r.Payload)))
	out.Write(r.Payload)
	return out.Bytes()
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// version3Sum is the checksum of format versions 2 and 3 (and 4): the
// key, the head and the payload.
func version3Sum(key string, payload []byte) func([]byte) uint32 {
	return func(head []byte) uint32 {
		c := crc32.Update(0, castagnoli, []byte(key))
		c = crc32.Update(c, castagnoli, head)
		return crc32.Update(c, castagnoli, payload)
	}
}

// toLegacy rewrites a current file (whose keys and values need no
// escaping) as format version `version` wrote it: 9-element records, with
// version 1's checksum (the payload only) or version 2 and 3's; the
// records' payloads and codecs are kept (unwrap turns kube-protobuf ones
// into version 3's raw protobuf). damaged names a key whose record gets a
// bad checksum. Snapshots are dropped.
func toLegacy(t *testing.T, path string, version uint32, damaged string, unwrap bool) {
	t.Helper()
	b, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	err = b.Update(func(tx *bolt.Tx) error {
		all := tx.Bucket([]byte("informers"))
		return all.ForEachBucket(func(name []byte) error {
			root := all.Bucket(name)
			if err := root.Delete([]byte("snapshot")); err != nil {
				return err
			}
			objs := root.Bucket([]byte("objects"))
			if objs == nil {
				return nil
			}
			type kv struct{ k, v []byte }
			var out []kv
			_ = objs.ForEach(func(k, v []byte) error {
				r, err := store.DecodeRecord(string(k), v)
				if err != nil {
					t.Fatal(err)
				}
				if unwrap && r.Codec == store.CodecKubeProtobuf && r.KeyID == "" {
					_, _, raw, err := store.SplitKubeProtobuf(r.Payload)
					if err != nil {
						t.Fatal(err)
					}
					r.Payload, r.Codec = raw, store.CodecProtobuf
				}
				sum := version3Sum(string(k), r.Payload)
				if version == 1 {
					sum = func([]byte) uint32 { return crc32.Checksum(r.Payload, castagnoli) }
				}
				bad := sum
				if string(k) == damaged {
					bad = func(h []byte) uint32 { return sum(h) + 1 }
				}
				out = append(out, kv{bytes.Clone(k), legacyRecord(t, string(k), r, bad)})
				return nil
			})
			for _, e := range out {
				if err := objs.Put(e.k, e.v); err != nil {
					return err
				}
			}
			return nil
		})
	})
	if err == nil {
		err = b.Update(func(tx *bolt.Tx) error {
			return tx.Bucket([]byte("meta")).Put([]byte("header"), header(magic, version, epoch))
		})
	}
	if err != nil {
		t.Fatal(err)
	}
}

// toVersion1 rewrites a current file as format version 1 wrote it.
func toVersion1(t *testing.T, path, damaged string) { toLegacy(t, path, 1, damaged, false) }

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

// TestMigrateVersion2: a read-only open of a version 2 file is refused
// (version 4 changed the envelope) and changes nothing; a read-write open
// migrates it, after which snapshots work.
func TestMigrateVersion2(t *testing.T) {
	path := tempPath(t)
	smallCache(t, path, 20)
	toLegacy(t, path, 2, "", false)
	before := fileHash(t, path)
	_, err := store.Open(path, &store.Options{ReadOnly: true})
	var ve *store.VersionError
	if !errors.As(err, &ve) || ve.Found != 2 {
		t.Fatalf("read-only open of a version 2 file: %v", err)
	}
	if fileHash(t, path) != before {
		t.Fatal("a read-only open changed the file")
	}
	db := openT(t, path, nil)
	if got, err := readAll(t, db); err != nil || len(got) != 20 {
		t.Fatalf("%d records, %v", len(got), err)
	}
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

// TestMigrateVersion3: records get the version 4 envelope; plaintext raw
// protobuf payloads of an informer whose state names its kind are wrapped
// as kube-protobuf (sealed ones and those of an informer of unknown kind
// keep codec 1); a key that starts with 0xff (stored as-is by version 3)
// moves to its escaped bucket key, and a value of 16384 bytes to a hashed
// entry; the file checks clean and reads the same objects.
func TestMigrateVersion3(t *testing.T) {
	path := tempPath(t)
	db := openT(t, path, nil)
	long := strings.Repeat("v", 16<<10)
	var ops []store.Op
	for i, key := range []string{"ns/a", "ns/b", "\xffodd", "ns/sealed"} {
		_, r := podRecord(t, i, "5")
		r.Indexed = nil
		r.SetIndexed(map[string][]string{"node": {"n1"}, "label": {long}})
		if key == "ns/sealed" {
			r.KeyID = "k1"
		}
		ops = append(ops, store.Op{Key: key, Record: r})
	}
	st := &store.State{ResourceVersion: "5", Synced: true, Kind: "/v1, Kind=Pod", Indexes: []string{"label", "node"}}
	if err := db.Commit(&store.Batch{Informer: "pods", Ops: ops, State: st},
		&store.Batch{Informer: "other", Ops: ops[:1], State: &store.State{ResourceVersion: "5"}}); err != nil {
		t.Fatal(err)
	}
	want, err := readAll(t, db)
	if err != nil {
		t.Fatal(err)
	}
	_ = db.Close()
	// As version 3 wrote it: the 0xff key as-is, raw protobuf payloads
	// (here: a kube-protobuf's raw bytes and the marker, opaque to the
	// store).
	b, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = b.Update(func(tx *bolt.Tx) error {
		for _, inf := range []string{"pods", "other"} {
			root := tx.Bucket([]byte("informers")).Bucket([]byte(inf))
			objs := root.Bucket([]byte("objects"))
			idx := root.Bucket([]byte("indexes"))
			_ = idx.ForEachBucket(func(name []byte) error { return idx.DeleteBucket(name) })
			for _, op := range ops {
				k := op.Key
				if inf == "other" && k != "ns/a" {
					continue
				}
				r := *op.Record
				r.Codec = store.CodecProtobuf
				if err := objs.Delete(bucketKeyOf(k)); err != nil {
					return err
				}
				if err := objs.Put([]byte(k), legacyRecord(t, k, &r, version3Sum(k, r.Payload))); err != nil {
					return err
				}
				for _, iv := range r.Indexed {
					ib, err := idx.CreateBucketIfNotExists([]byte(iv.Index))
					if err != nil {
						return err
					}
					for _, v := range iv.Values {
						if err := ib.Put([]byte(v+"\x00"+k), nil); err != nil {
							return err
						}
					}
				}
			}
		}
		return tx.Bucket([]byte("meta")).Put([]byte("header"), header(magic, 3, epoch))
	})
	_ = b.Close()
	if err != nil {
		t.Fatal(err)
	}
	db = openT(t, path, nil)
	mustCheck(t, db)
	got, err := readAll(t, db)
	if err != nil {
		t.Fatal(err)
	}
	for key, w := range want {
		g := got[key]
		if g == nil {
			t.Fatalf("%q lost", key)
		}
		wantCodec, wantPayload := store.CodecKubeProtobuf, store.WrapKubeProtobuf("v1", "Pod", w.Payload)
		if key == "ns/sealed" {
			wantCodec, wantPayload = store.CodecProtobuf, w.Payload
		}
		if g.Codec != wantCodec || !bytes.Equal(g.Payload, wantPayload) || !reflect.DeepEqual(g.Indexed, w.Indexed) {
			t.Errorf("%q: codec %v, %d payload bytes, indexed %d", key, g.Codec, len(g.Payload), len(g.Indexed))
		}
	}
	if got := indexKeys(t, db, "pods", "label", long); len(got) != 4 {
		t.Errorf("long value: %q", got)
	}
	err = db.View(func(tx *store.Tx) error {
		r, err := tx.Get("other", "ns/a")
		if err != nil || r.Codec != store.CodecProtobuf {
			t.Errorf("an informer of unknown kind: %+v, %v", r, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// bucketKeyOf is key's bucket key as FORMAT.md section 4 defines it.
func bucketKeyOf(key string) []byte {
	if key == "" || len(key) > 16<<10 || key[0] == 0xff || strings.IndexByte(key, 0) >= 0 {
		sum := sha256.Sum256([]byte(key))
		return append([]byte{0xff}, hex.EncodeToString(sum[:])...)
	}
	return []byte(key)
}
