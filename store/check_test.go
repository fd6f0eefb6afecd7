package store_test

import (
	"errors"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/boltinformer/boltinformer/store"
)

// damage opens a fresh cache of 4 Pods, applies fn to its informer's
// bucket through bbolt directly and returns what Check reports.
func damage(t *testing.T, fn func(inf *bolt.Bucket) error) []store.Problem {
	t.Helper()
	path := tempPath(t)
	smallCache(t, path, 4)
	db := openT(t, path, nil)
	mustCheck(t, db)
	if err := db.Bolt(func(b *bolt.DB) error {
		return b.Update(func(tx *bolt.Tx) error {
			return fn(tx.Bucket([]byte("informers")).Bucket([]byte("pods")))
		})
	}); err != nil {
		t.Fatal(err)
	}
	probs, err := db.Check(nil)
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	for _, p := range probs {
		if !errors.Is(p, store.ErrCorrupt) {
			t.Errorf("problem %v does not wrap ErrCorrupt", p)
		}
		if p.Informer != "pods" {
			t.Errorf("problem %v names informer %q", p, p.Informer)
		}
	}
	return probs
}

// wantProblems checks that every fragment appears in exactly one problem
// and that there is no other problem.
func wantProblems(t *testing.T, probs []store.Problem, fragments ...string) {
	t.Helper()
	used := make([]bool, len(probs))
	for _, f := range fragments {
		found := false
		for i, p := range probs {
			if !used[i] && strings.Contains(p.Error(), f) {
				used[i], found = true, true
				break
			}
		}
		if !found {
			t.Errorf("no problem mentions %q", f)
		}
	}
	for i, p := range probs {
		if !used[i] {
			t.Errorf("unexpected problem: %v", p)
		}
	}
}

func index(inf *bolt.Bucket, name string) *bolt.Bucket {
	return inf.Bucket([]byte("indexes")).Bucket([]byte(name))
}

func objects(inf *bolt.Bucket) *bolt.Bucket { return inf.Bucket([]byte("objects")) }

func TestCheckDanglingIndexEntry(t *testing.T) {
	probs := damage(t, func(inf *bolt.Bucket) error {
		return objects(inf).Delete([]byte("ns-1/pod-000001"))
	})
	wantProblems(t, probs,
		`state counts 4 objects, bucket holds 3`,
		`index "namespace" value "ns-1" points to missing object "ns-1/pod-000001"`,
		`index "node" value "node-1" points to missing object "ns-1/pod-000001"`)
}

func TestCheckMissingIndexEntry(t *testing.T) {
	probs := damage(t, func(inf *bolt.Bucket) error {
		return index(inf, "node").Delete([]byte("node-0\x00ns-2/pod-000002"))
	})
	wantProblems(t, probs, `object "ns-2/pod-000002" has value "node-0" in index "node" but no index entry`)
}

func TestCheckWrongValue(t *testing.T) {
	probs := damage(t, func(inf *bolt.Bucket) error {
		return index(inf, "node").Put([]byte("node-7\x00ns-2/pod-000002"), nil)
	})
	wantProblems(t, probs, `index "node" value "node-7" points to object "ns-2/pod-000002", which does not have that value`)
}

func TestCheckWrongCount(t *testing.T) {
	probs := damage(t, func(inf *bolt.Bucket) error {
		st, err := store.DecodeState(inf.Get([]byte("state")))
		if err != nil {
			return err
		}
		st.Objects = 17
		raw, err := store.EncodeState(st)
		if err != nil {
			return err
		}
		return inf.Put([]byte("state"), raw)
	})
	wantProblems(t, probs, `state counts 17 objects, bucket holds 4`)
}

func TestCheckGarbageRecord(t *testing.T) {
	for _, c := range []struct {
		name string
		raw  []byte
	}{
		{"text", []byte("not a record")},
		{"empty", []byte{}},
		{"huge-length", []byte{0xdd, 0xff, 0xff, 0xff, 0xff}}, // array32 of 4G items
		{"no-codec", mustEncode(t, &store.Record{UID: "u"})},
	} {
		t.Run(c.name, func(t *testing.T) {
			probs := damage(t, func(inf *bolt.Bucket) error {
				return objects(inf).Put([]byte("ns-0/pod-000000"), c.raw)
			})
			// Its index entries are not reported again: its values are
			// unknown once the record is unreadable.
			wantProblems(t, probs, `object "ns-0/pod-000000": store: cache file is corrupt: record`)
		})
	}
}

func mustEncode(t *testing.T, r *store.Record) []byte {
	t.Helper()
	b, err := store.EncodeRecord("k", r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCheckBadChecksum(t *testing.T) {
	probs := damage(t, func(inf *bolt.Bucket) error {
		raw := append([]byte(nil), objects(inf).Get([]byte("ns-0/pod-000003"))...)
		raw[len(raw)-1] ^= 0xff // the last byte of the payload
		return objects(inf).Put([]byte("ns-0/pod-000003"), raw)
	})
	wantProblems(t, probs, `object "ns-0/pod-000003": store: cache file is corrupt: record: checksum`)
}

func TestCheckGarbageState(t *testing.T) {
	probs := damage(t, func(inf *bolt.Bucket) error {
		return inf.Put([]byte("state"), []byte{0x81, 0xa2, 'r', 'v'})
	})
	wantProblems(t, probs, `state record`)
}

func TestCheckMalformedIndexKey(t *testing.T) {
	probs := damage(t, func(inf *bolt.Bucket) error {
		return index(inf, "node").Put([]byte("no-separator"), nil)
	})
	wantProblems(t, probs, `index "node": malformed entry "no-separator"`)
}

func TestCheckIndexBucketMissing(t *testing.T) {
	probs := damage(t, func(inf *bolt.Bucket) error {
		return inf.Bucket([]byte("indexes")).DeleteBucket([]byte("node"))
	})
	wantProblems(t, probs,
		`index "node" named in state has no bucket`,
		`in index "node", which has no bucket`)
}

func TestCheckNestedBucketInObjects(t *testing.T) {
	probs := damage(t, func(inf *bolt.Bucket) error {
		_, err := objects(inf).CreateBucket([]byte("ns-0/zzz"))
		return err
	})
	wantProblems(t, probs, `nested bucket "ns-0/zzz" in objects`)
}

func TestCheckMaxProblems(t *testing.T) {
	path := tempPath(t)
	smallCache(t, path, 20)
	db := openT(t, path, nil)
	if err := db.Bolt(func(b *bolt.DB) error {
		return b.Update(func(tx *bolt.Tx) error {
			return tx.Bucket([]byte("informers")).Bucket([]byte("pods")).DeleteBucket([]byte("objects"))
		})
	}); err != nil {
		t.Fatal(err)
	}
	all, err := db.Check(nil)
	if err != nil || len(all) != 41 { // the count and 2 index entries per object
		t.Fatalf("Check: %d problems, %v", len(all), err)
	}
	some, err := db.Check(&store.CheckOptions{MaxProblems: 5})
	if err != nil || len(some) != 5 {
		t.Fatalf("Check(MaxProblems 5): %d problems, %v", len(some), err)
	}
}

func TestCheckStaleDroppedIndex(t *testing.T) {
	// Values of an index that is neither in the state nor has a bucket are
	// stale (dropped index): not a problem.
	probs := damage(t, func(inf *bolt.Bucket) error {
		if err := inf.Bucket([]byte("indexes")).DeleteBucket([]byte("node")); err != nil {
			return err
		}
		st, _ := store.DecodeState(inf.Get([]byte("state")))
		st.Indexes = []string{"namespace"}
		raw, _ := store.EncodeState(st)
		return inf.Put([]byte("state"), raw)
	})
	wantProblems(t, probs)
}
