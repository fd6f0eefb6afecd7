package boltinformer_test

// A damaged record found when the file has opened fine (issue 14, items 6
// and 7): the informer serves the records that decode, offline too,
// keeps one copy of the file per damage (not one per start), and relists
// when the server answers; in both memory modes.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/store"
)

// damageRecord changes the record of key in the file at path with bbolt
// directly: "checksum" writes bytes that fail the record's checksum,
// "payload" a payload that does not decode under a checksum that holds
// (a writer's bug, or a crafted file). keepSnapshot leaves the informer's
// envelope snapshot (written by the last clean Close) in place, so that a
// Full load reads no record and the background decoding finds the damage.
func damageRecord(t *testing.T, path, key, how string, keepSnapshot bool) {
	t.Helper()
	b, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = b.Update(func(tx *bolt.Tx) error {
		inf := tx.Bucket([]byte("informers")).Bucket([]byte("pods"))
		if !keepSnapshot {
			if err := inf.Delete([]byte("snapshot")); err != nil {
				return err
			}
		}
		objs := inf.Bucket([]byte("objects"))
		if how == "checksum" {
			return objs.Put([]byte(key), []byte("\x99garbage, not a record"))
		}
		r, err := store.DecodeRecord(key, objs.Get([]byte(key)))
		if err != nil {
			return err
		}
		r.Payload = []byte{0x0a, 0xff, 0xff, 0xff}
		raw, err := store.EncodeRecord(key, r)
		if err != nil {
			return err
		}
		return objs.Put([]byte(key), raw)
	})
	if cerr := b.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
}

// damageCopies returns the complete copies kept beside the cache file.
func damageCopies(t *testing.T, path string) []string {
	t.Helper()
	m, err := filepath.Glob(path + ".corrupt-*")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range m {
		if !strings.HasSuffix(p, ".tmp") {
			out = append(out, p)
		}
	}
	return out
}

// TestRegressionDamagedRecordOneCopyOffline: one damaged record used to
// make every start keep another full copy of the file and, with the
// server unreachable, start cold with an empty cache. Now each start
// serves the records that decode (the damaged one reported, left out,
// counted in Health), the second start keeps no new copy, and the relist
// once the server answers heals the file; then no copy either.
func TestRegressionDamagedRecordOneCopyOffline(t *testing.T) {
	const bad = "ns-1/pod-000010"
	for _, tc := range []struct {
		name         string
		memory       boltinformer.InformerOptions
		how          string
		keepSnapshot bool
	}{
		{"full/checksum", boltinformer.InformerOptions{Memory: boltinformer.FullMemory}, "checksum", false},
		{"full/payload-after-clean-close", boltinformer.InformerOptions{Memory: boltinformer.FullMemory}, "payload", true},
		{"bounded/checksum", boltinformer.InformerOptions{Memory: boltinformer.BoundedMemory, CacheSize: 4}, "checksum", false},
		{"bounded/payload", boltinformer.InformerOptions{Memory: boltinformer.BoundedMemory, CacheSize: 4}, "payload", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newCacheFile(t, 20)
			damageRecord(t, f.path, bad, tc.how, tc.keepSnapshot)
			f.src.SetDown(true)
			var kept string
			for start := 1; start <= 2; start++ {
				opts := tc.memory
				r := f.open(nil, &opts)
				if d := r.inf.Decision(); !d.Warm {
					t.Fatalf("start %d: decision %+v, want warm without the damaged record", start, d)
				}
				r.run()
				r.waitSynced()
				if n := len(r.inf.GetIndexer().List()); n != 19 {
					t.Fatalf("start %d, offline: List serves %d objects, want the 19 that decode", start, n)
				}
				if _, _, err := r.inf.GetIndexer().GetByKey(bad); err == nil {
					t.Fatalf("start %d: GetByKey of the damaged record: no error", start)
				}
				waitFor(t, "the damage reported and its copy kept", func() bool {
					h := r.inf.Health()
					return h.Undecodable == 1 && h.DamageCopy != ""
				})
				h := r.inf.Health()
				copies := damageCopies(t, f.path)
				if len(copies) != 1 || copies[0] != h.DamageCopy {
					t.Fatalf("start %d: copies %v, health %+v: want the one copy", start, copies, h)
				}
				if start == 1 {
					kept = copies[0]
				} else if copies[0] != kept {
					t.Fatalf("start 2 kept %s, start 1 %s", copies[0], kept)
				}
				if fi, err := os.Lstat(kept); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
					t.Fatalf("the copy: %v, %v", fi, err)
				}
				if start == 2 {
					// The server answers: the relist replaces the record.
					f.src.SetDown(false)
					r.waitApplied()
					waitFor(t, "the relist to heal the record", func() bool { return r.inf.Health().Undecodable == 0 })
				}
				r.close()
			}
			r := f.open(nil, &tc.memory)
			r.run()
			r.waitSynced()
			r.waitApplied()
			if h := r.inf.Health(); h.Undecodable != 0 || h.DamageCopy != "" || !r.inf.Decision().Warm {
				t.Fatalf("after the heal: health %+v, decision %+v", h, r.inf.Decision())
			}
			if copies := damageCopies(t, f.path); len(copies) != 1 {
				t.Fatalf("after the heal: copies %v", copies)
			}
		})
	}
}

// TestRegressionBoundedUndecodable: in Bounded mode a record whose
// payload does not decode (found on a read: payloads are not decoded on
// load) used to fail every Get, shorten every List and show 0 in Health,
// with no relist ever. Now it is reported like the Full mode's: counted,
// left out of List and the indexes' answers, a copy kept, and healed by
// the relist it triggers.
func TestRegressionBoundedUndecodable(t *testing.T) {
	const bad = "ns-1/pod-000010"
	f := newCacheFile(t, 20)
	damageRecord(t, f.path, bad, "payload", false)
	f.src.ResetCalls()
	r := f.open(nil, &boltinformer.InformerOptions{Memory: boltinformer.BoundedMemory, CacheSize: 4})
	if d := r.inf.Decision(); !d.Warm {
		t.Fatalf("decision %+v, want warm (the record's checksum holds)", d)
	}
	if _, _, err := r.inf.GetIndexer().GetByKey(bad); err == nil {
		t.Fatal("GetByKey of the undecodable record: no error")
	}
	if h := r.inf.Health(); h.Undecodable != 1 {
		t.Fatalf("health after the failed Get: %+v, want 1 undecodable", h)
	}
	if n := len(r.inf.GetIndexer().List()); n != 19 {
		t.Fatalf("List has %d objects, want the 19 that decode", n)
	}
	objs, err := r.inf.GetIndexer().ByIndex("namespace", "ns-1")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if keyOf(o) == bad {
			t.Fatal("ByIndex returned the undecodable object")
		}
	}
	r.run()
	r.waitSynced()
	r.waitApplied()
	waitFor(t, "the relist to heal the record", func() bool {
		_, ok, err := r.inf.GetIndexer().GetByKey(bad)
		return err == nil && ok && r.inf.Health().Undecodable == 0
	})
	if c := f.src.Calls(); c.Lists != 1 {
		t.Fatalf("%d LISTs (calls %v), want the one relist", c.Lists, c.Log)
	}
	if copies := damageCopies(t, f.path); len(copies) != 1 {
		t.Fatalf("copies %v, want one", copies)
	}
	r.close()
	// The file is sound again: the next start reads the record.
	r = f.open(nil, &boltinformer.InformerOptions{Memory: boltinformer.BoundedMemory, CacheSize: 4})
	if _, ok, err := r.inf.GetIndexer().GetByKey(bad); err != nil || !ok {
		t.Fatalf("next start: GetByKey: %v, %v", ok, err)
	}
}

// TestRegressionDamagedStateOneCopy: a damaged state record (the
// informer's identity and resume point) cannot be served around: the
// informer starts cold. Offline, every start finds it again; each used to
// keep another copy of the file, now only the first does.
func TestRegressionDamagedStateOneCopy(t *testing.T) {
	f := newCacheFile(t, 5)
	b, err := bolt.Open(f.path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = b.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("informers")).Bucket([]byte("pods")).Put([]byte("state"), []byte{0xc1, 0xc1})
	})
	if cerr := b.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	f.src.SetDown(true)
	var kept []string
	for start := 1; start <= 3; start++ {
		r := f.open(nil, nil)
		if d := r.inf.Decision(); d.Warm || d.Reason != "corrupt-file" {
			t.Fatalf("start %d: decision %+v, want a cold start over the damaged state record", start, d)
		}
		copies := damageCopies(t, f.path)
		if len(copies) != 1 || r.inf.Health().DamageCopy != copies[0] {
			t.Fatalf("start %d: copies %v, health %+v: want one", start, copies, r.inf.Health())
		}
		if kept == nil {
			kept = copies
		} else if copies[0] != kept[0] {
			t.Fatalf("start %d: copy %s, the first start kept %s", start, copies[0], kept[0])
		}
		r.close()
	}
}
