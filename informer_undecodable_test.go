package boltinformer_test

import (
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/boltinformer/boltinformer/store"
)

// TestRestartUndecodableRecordRelists: a record whose checksum holds but
// whose payload does not decode (a writer's bug, or a crafted file) passes
// the warm load; the background decoding finds it, the informer keeps a
// copy of the file and relists, and the server's object replaces it. The
// other objects are served from the file meanwhile.
func TestRestartUndecodableRecordRelists(t *testing.T) {
	f := newCacheFile(t, 20)
	const bad = "ns-1/pod-000010" // not the first key: that one is decoded by the load itself
	b, err := bolt.Open(f.path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = b.Update(func(tx *bolt.Tx) error {
		objs := tx.Bucket([]byte("informers")).Bucket([]byte("pods")).Bucket([]byte("objects"))
		r, err := store.DecodeRecord(bad, objs.Get([]byte(bad)))
		if err != nil {
			return err
		}
		r.Payload = []byte{0x0a, 0xff, 0xff, 0xff}
		raw, err := store.EncodeRecord(bad, r)
		if err != nil {
			return err
		}
		return objs.Put([]byte(bad), raw)
	})
	_ = b.Close()
	if err != nil {
		t.Fatal(err)
	}
	f.src.ResetCalls()

	r := f.open(nil, nil)
	if d := r.inf.Decision(); !d.Warm {
		t.Fatalf("decision %+v, want warm (the record's checksum holds)", d)
	}
	waitFor(t, "the undecodable record to be found", func() bool {
		return r.inf.Indexer().Undecodable() == 1
	})
	if _, _, err := r.inf.GetIndexer().GetByKey(bad); err == nil {
		t.Fatal("GetByKey of the undecodable record: no error")
	}
	if n := len(r.inf.GetIndexer().List()); n != 19 {
		t.Fatalf("List has %d objects, want the 19 that decode", n)
	}
	r.run()
	r.waitSynced()
	r.waitApplied()
	if c := f.src.Calls(); c.Lists != 1 {
		t.Fatalf("%d LISTs (calls %v), want the one relist", c.Lists, c.Log)
	}
	if h := r.inf.Health(); h.Undecodable != 0 {
		t.Fatalf("health after the relist: %+v", h)
	}
	copies, _ := filepath.Glob(f.path + ".corrupt-*")
	if len(copies) != 1 {
		t.Fatalf("copies of the file kept: %v, want one", copies)
	}
	r.close()
	// The file is sound again: the next start is warm and lists nothing.
	f.src.ResetCalls()
	r = f.open(nil, nil)
	r.run()
	r.waitSynced()
	r.waitApplied()
	if c := f.src.Calls(); c.Lists != 0 || r.inf.Indexer().Undecodable() != 0 {
		t.Fatalf("next start: calls %v, undecodable %d", c.Log, r.inf.Indexer().Undecodable())
	}
}
