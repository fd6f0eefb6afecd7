package recovery_test

import (
	"bytes"
	"errors"
	"path/filepath"
	"sort"
	"testing"

	bolt "go.etcd.io/bbolt"
	corev1 "k8s.io/api/core/v1"

	"github.com/boltinformer/boltinformer/recovery/crashtest"
	"github.com/boltinformer/boltinformer/store"
)

func indexBucket(tx *bolt.Tx, name string) *bolt.Bucket {
	return tx.Bucket([]byte("informers")).Bucket([]byte(informerName)).Bucket([]byte("indexes")).Bucket([]byte(name))
}

func problems(t *testing.T, path string) []store.Problem {
	t.Helper()
	db, err := store.Open(path, &store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	probs, err := db.Check(nil)
	if err != nil {
		t.Fatal(err)
	}
	return probs
}

// TestRepairIndexes damages the index buckets of a valid file in every way
// Check knows (an entry for a missing object, an entry with a wrong value,
// missing entries, a missing bucket, a wrong object count), repairs them
// with store.DB.RepairIndexes, and warm-starts from the repaired file.
func TestRepairIndexes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache.db")
	h := smallHistory(31)
	src := h.Source(0, 500)
	a := startAgent(t, path, src, nil)
	a.caughtUp(t, src)
	waitFor(t, "the first commit", func() bool { return a.saved() == "500" })
	must(t, a.stop())

	boltUpdate(t, path, func(tx *bolt.Tx) error {
		node := indexBucket(tx, nodeIndex)
		if err := node.Put([]byte("node-1\x00ns-0/pod-999999"), nil); err != nil { // missing object
			return err
		}
		if err := node.Put([]byte("node-nowhere\x00ns-1/pod-000001"), nil); err != nil { // wrong value
			return err
		}
		// Drop a few entries of the app index.
		app := indexBucket(tx, "app")
		var dead [][]byte
		c := app.Cursor()
		for k, _ := c.First(); k != nil && len(dead) < 5; k, _ = c.Next() {
			dead = append(dead, append([]byte(nil), k...))
		}
		for _, k := range dead {
			if err := app.Delete(k); err != nil {
				return err
			}
		}
		// A wrong object count in the state record.
		root := tx.Bucket([]byte("informers")).Bucket([]byte(informerName))
		st, err := store.DecodeState(root.Get([]byte("state")))
		if err != nil {
			return err
		}
		st.Objects += 7
		raw, err := store.EncodeState(st)
		if err != nil {
			return err
		}
		if err := root.Put([]byte("state"), raw); err != nil {
			return err
		}
		// And the namespace index altogether.
		return root.Bucket([]byte("indexes")).DeleteBucket([]byte("namespace"))
	})
	probs := problems(t, path)
	if len(probs) < 4 {
		t.Fatalf("Check found %d problems in the damaged indexes: %v", len(probs), probs)
	}
	t.Logf("before repair: %d problems, e.g. %v", len(probs), probs[0])

	db, err := store.Open(path, nil)
	must(t, err)
	rep, err := db.RepairIndexes(informerName)
	must(t, err)
	none, err := db.RepairIndexes("no-such-informer")
	must(t, err)
	must(t, db.Close())
	if len(none.Indexes) != 0 || none.Entries != 0 {
		t.Fatalf("repair of an absent informer: %+v", none)
	}
	if want := []string{"app", "namespace", nodeIndex}; !equalStrings(rep.Indexes, want) {
		t.Fatalf("repaired indexes %v, want %v", rep.Indexes, want)
	}
	if probs := problems(t, path); len(probs) != 0 {
		t.Fatalf("after repair: %v", probs)
	}
	fs, err := crashtest.VerifyFile(path, informerName, h.StateAt, &crashtest.VerifyOptions{Indexers: crashIndexers(true)})
	must(t, err)
	if int64(fs.Objects) != rep.Objects || rep.Entries != 3*fs.Objects {
		t.Fatalf("repair %+v, file holds %d objects", rep, fs.Objects)
	}

	// The repaired file resumes, and its node index answers like the truth.
	b := startAgent(t, path, src, nil)
	if !b.inf.Decision().Warm {
		t.Fatalf("not warm after repair: %+v", b.inf.Decision())
	}
	b.caughtUp(t, src)
	byNode := map[string][]string{}
	for k, o := range src.Objects() {
		n := o.(*corev1.Pod).Spec.NodeName
		byNode[n] = append(byNode[n], k)
	}
	for n, want := range byNode {
		got, err := b.inf.GetIndexer().IndexKeys(nodeIndex, n)
		must(t, err)
		sort.Strings(want)
		if !equalStrings(got, want) {
			t.Fatalf("node %s: keys %v, want %v", n, got, want)
		}
	}

	// Repair while the informer writes: the buckets stay in step.
	feed(t, h, src, 500, 800)
	rep2, err := b.db.Store().RepairIndexes(informerName)
	must(t, err)
	feed(t, h, src, 800, 1000)
	b.caughtUp(t, src)
	waitFor(t, "the commit", func() bool { return b.saved() == "1000" })
	must(t, b.stop())
	if probs := problems(t, path); len(probs) != 0 {
		t.Fatalf("after a repair under writes (%+v): %v", rep2, probs)
	}
	if _, err := crashtest.VerifyFile(path, informerName, h.StateAt, &crashtest.VerifyOptions{Indexers: crashIndexers(true)}); err != nil {
		t.Fatal(err)
	}
}

// TestRepairIndexesRefusesDamagedRecords: a record that does not decode
// makes RepairIndexes fail with ErrCorrupt and change nothing; a read-only
// DB refuses it.
func TestRepairIndexesRefusesDamagedRecords(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache.db")
	pristine(t, path)
	boltUpdate(t, path, func(tx *bolt.Tx) error {
		return objectsBucket(tx).Put([]byte("ns-0/pod-000000"), []byte("garbage"))
	})
	before := readFile(t, path)
	db, err := store.Open(path, nil)
	must(t, err)
	if _, err := db.RepairIndexes(informerName); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("RepairIndexes over a garbage record: %v, want ErrCorrupt", err)
	}
	must(t, db.Close())
	if !bytes.Equal(readFile(t, path), before) {
		t.Fatal("a failed repair changed the file")
	}
	ro, err := store.Open(path, &store.Options{ReadOnly: true})
	must(t, err)
	defer ro.Close()
	if _, err := ro.RepairIndexes(informerName); !errors.Is(err, store.ErrReadOnly) {
		t.Fatalf("RepairIndexes on a read-only DB: %v", err)
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
