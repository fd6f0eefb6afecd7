package store_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/boltinformer/boltinformer/store"
)

// typed reports whether err carries one of the causes Open documents.
func typed(err error) bool {
	var ve *store.VersionError
	return errors.Is(err, store.ErrCorrupt) || errors.Is(err, store.ErrForeign) || errors.As(err, &ve)
}

// walk reads everything the store can read: every state, record and index
// entry. It returns the first error.
func walk(tx *store.Tx) error {
	for _, inf := range tx.Informers() {
		if _, err := tx.State(inf); err != nil {
			return err
		}
		if err := tx.ForEach(inf, func(key string, r *store.Record) error {
			for _, iv := range r.Indexed {
				for _, v := range iv.Values {
					_ = tx.IndexKeys(inf, iv.Index, v)
				}
			}
			return nil
		}); err != nil {
			return err
		}
		for _, idx := range tx.Indexes(inf) {
			if _, err := tx.IndexValues(inf, idx); err != nil {
				return err
			}
		}
	}
	return nil
}

// probe opens path (read-write unless ro), reads everything and checks it.
// It returns where the damage was found ("" if nowhere) and the error,
// which must then be typed.
func probe(t testing.TB, path string, ro bool) (string, error) {
	t.Helper()
	db, err := store.Open(path, &store.Options{ReadOnly: ro, NoSync: true, Timeout: -1})
	if err != nil {
		return "open", err
	}
	defer func() {
		if err := db.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}()
	if err := db.View(walk); err != nil {
		return "view", err
	}
	probs, err := db.Check(nil)
	if err != nil {
		return "check", err
	}
	if len(probs) > 0 {
		for _, p := range probs {
			if !errors.Is(p, store.ErrCorrupt) {
				t.Errorf("Check problem %v does not wrap ErrCorrupt", p)
			}
		}
		return "check", probs[0]
	}
	if !ro {
		// A write must not panic either (it may fail).
		if err := db.Commit(podBatch(t, "pods", 0, 1, "200")); err != nil {
			return "commit", err
		}
	}
	return "", nil
}

// wantDetected asserts that damage at path is reported as a typed error.
func wantDetected(t *testing.T, path string) {
	t.Helper()
	for _, ro := range []bool{true, false} {
		where, err := probe(t, path, ro)
		if where == "" {
			t.Fatalf("read-only %v: damage not detected", ro)
		}
		if !typed(err) {
			t.Fatalf("read-only %v: %s: untyped error %v", ro, where, err)
		}
	}
}

// wantSafe asserts that whatever is found is typed (damage in free space
// may legitimately go unnoticed).
func wantSafe(t *testing.T, path string) string {
	t.Helper()
	var out string
	for _, ro := range []bool{true, false} {
		where, err := probe(t, path, ro)
		if where != "" && !typed(err) {
			t.Fatalf("read-only %v: %s: untyped error %v", ro, where, err)
		}
		if where != "" {
			out = where
		}
	}
	return out
}

func TestNotABoltFile(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rnd.Uint32())
		}
		return b
	}
	text := []byte(strings.Repeat("apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\n", 200))
	for _, c := range []struct {
		name string
		b    []byte
	}{
		{"random-1", random(1)},
		{"random-100", random(100)},
		{"random-4096", random(4096)},
		{"random-64k", random(64 << 10)},
		{"text-short", text[:500]},
		{"text", text},
		{"zeros-16k", make([]byte, 16<<10)},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := tempPath(t)
			writeFile(t, path, c.b)
			for _, ro := range []bool{false, true} {
				db, err := store.Open(path, &store.Options{ReadOnly: ro, Timeout: -1})
				if err == nil {
					_ = db.Close()
					t.Fatalf("read-only %v: opened", ro)
				}
				if !errors.Is(err, store.ErrCorrupt) && !errors.Is(err, store.ErrForeign) {
					t.Fatalf("read-only %v: %v", ro, err)
				}
			}
			if string(readFile(t, path)) != string(c.b) {
				t.Fatal("Open changed the file")
			}
		})
	}
}

// cacheBytes returns a valid cache file of n Pods with its page size and
// the size of its used part (bbolt's high-water mark times the page size;
// bbolt grows the file in steps, so the rest is slack).
func cacheBytes(t testing.TB, n int) (b []byte, pageSize, used int) {
	t.Helper()
	path := tempPath(t)
	smallCache(t, path, n)
	b = readFile(t, path)
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_ = db.View(func(tx *bolt.Tx) error {
		used = int(tx.Size())
		return nil
	})
	return b, db.Info().PageSize, used
}

func TestTruncated(t *testing.T) {
	orig, ps, used := cacheBytes(t, 40)
	if used < 8*ps {
		t.Fatalf("test file too small: %d bytes used", used)
	}
	for _, n := range []int{100, 1024, 2048, ps, ps + 100, 2 * ps, 3 * ps, used / 2, used - ps, used - 1, used, len(orig) - 1} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			path := tempPath(t)
			writeFile(t, path, orig[:n])
			for _, ro := range []bool{false, true} {
				db, err := store.Open(path, &store.Options{ReadOnly: ro, Timeout: -1})
				if n >= used {
					// Only slack was cut: the file is whole.
					if err != nil {
						t.Fatalf("read-only %v: cut at %d, %d bytes used: %v", ro, n, used, err)
					}
					if probs, err := db.Check(nil); err != nil || len(probs) > 0 {
						t.Fatalf("Check: %v %v", probs, err)
					}
					_ = db.Close()
					continue
				}
				if err == nil {
					_ = db.Close()
					t.Fatalf("read-only %v: opened a file cut at %d of %d used", ro, n, used)
				}
				if !errors.Is(err, store.ErrCorrupt) {
					t.Fatalf("read-only %v: %v, want ErrCorrupt", ro, err)
				}
				if string(readFile(t, path)) != string(orig[:n]) {
					t.Fatal("Open changed the file")
				}
			}
		})
	}
}

// pageTypes returns bbolt's type of every page of the file.
func pageTypes(t testing.TB, path string) []string {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, PreLoadFreelist: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var types []string
	err = db.View(func(tx *bolt.Tx) error {
		for id := 0; ; id++ {
			pi, err := tx.Page(id)
			if err != nil || pi == nil {
				return err
			}
			types = append(types, pi.Type)
			if pi.Type != "free" {
				for range pi.OverflowCount {
					types = append(types, "overflow")
					id++
				}
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return types
}

func TestZeroedPages(t *testing.T) {
	orig, ps, _ := cacheBytes(t, 40)
	path0 := tempPath(t)
	writeFile(t, path0, orig)
	types := pageTypes(t, path0)
	t.Logf("pages: %v", types)
	for id, typ := range types {
		t.Run(fmt.Sprintf("page-%d-%s", id, typ), func(t *testing.T) {
			b := append([]byte(nil), orig...)
			clear(b[id*ps : min((id+1)*ps, len(b))])
			path := tempPath(t)
			writeFile(t, path, b)
			switch {
			case id < 2:
				// bbolt keeps two meta pages: losing one falls back to the
				// other (the previous transaction), losing both is fatal.
				wantSafe(t, path)
			case typ == "free":
				wantSafe(t, path)
			default:
				wantDetected(t, path)
			}
		})
	}
	t.Run("both-meta", func(t *testing.T) {
		b := append([]byte(nil), orig...)
		clear(b[:2*ps])
		path := tempPath(t)
		writeFile(t, path, b)
		wantDetected(t, path)
	})
}

// TestFlippedBytes flips single bytes at offsets spread over the file and
// at every offset of the first data pages: never a panic, always a typed
// error when something is found.
func TestFlippedBytes(t *testing.T) {
	orig, ps, used := cacheBytes(t, 40)
	var offsets []int
	for i := 0; i < used; i += 1021 {
		offsets = append(offsets, i)
	}
	for p := 0; p < used; p += ps { // every page header and its first elements
		for i := p; i < p+48; i++ {
			offsets = append(offsets, i)
		}
	}
	masks := []byte{0x01, 0x80, 0xff, 0x10}
	detected := 0
	dir := t.TempDir()
	for n, off := range offsets {
		mask := masks[n%len(masks)]
		b := append([]byte(nil), orig...)
		b[off] ^= mask
		path := fmt.Sprintf("%s/flip-%d-%x.db", dir, off, mask)
		writeFile(t, path, b)
		if where := wantSafe(t, path); where != "" {
			detected++
		}
		_ = os.Remove(path)
	}
	t.Logf("%d of %d flips detected", detected, len(offsets))
	if detected == 0 {
		t.Fatal("no flip was detected")
	}
}

// TestFlippedPayload flips a byte inside a stored payload: the record's
// CRC-32C catches it on read and in Check.
func TestFlippedPayload(t *testing.T) {
	path := tempPath(t)
	smallCache(t, path, 5)
	id := payloadMarker(2)
	orig := readFile(t, path)
	i := strings.Index(string(orig), id)
	if i < 0 || strings.Count(string(orig), id) != 1 {
		t.Fatal("payload not found once in the file")
	}
	orig[i+5] ^= 0x01
	writeFile(t, path, orig)
	db := openT(t, path, &store.Options{Timeout: -1})
	err := db.View(func(tx *store.Tx) error {
		_, err := tx.Get("pods", "ns-2/pod-000002")
		return err
	})
	if !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("Get: %v", err)
	}
	probs, err := db.Check(nil)
	if err != nil || len(probs) != 1 || !strings.Contains(probs[0].Error(), `"ns-2/pod-000002"`) {
		t.Fatalf("Check: %v %v", probs, err)
	}
}

// TestPanicInsideTransaction damages a page under an open DB (as a disk or
// another program could): bbolt panics inside the transaction, and the
// store returns ErrCorrupt from View, Commit and Check instead, and still
// closes.
func TestPanicInsideTransaction(t *testing.T) {
	path := tempPath(t)
	smallCache(t, path, 40)
	db := openT(t, path, &store.Options{NoSync: true, Timeout: -1})
	var root uint64
	var ps int
	if err := db.Bolt(func(b *bolt.DB) error {
		ps = b.Info().PageSize
		return b.View(func(tx *bolt.Tx) error {
			root = uint64(tx.Bucket([]byte("informers")).Bucket([]byte("pods")).Bucket([]byte("objects")).Root())
			return nil
		})
	}); err != nil {
		t.Fatal(err)
	}
	if root == 0 {
		t.Fatal("objects bucket is inline; the test needs a page")
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The page now claims another id: bbolt's page check panics.
	if _, err := f.WriteAt([]byte{0xef, 0xbe, 0xad, 0xde, 0, 0, 0, 0}, int64(root)*int64(ps)); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()

	err = db.View(func(tx *store.Tx) error { return tx.ForEach("pods", func(string, *store.Record) error { return nil }) })
	if !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), "read") {
		t.Fatalf("View: %v", err)
	}
	if err := db.Commit(podBatch(t, "pods", 0, 1, "2")); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("Commit: %v", err)
	}
	probs, err := db.Check(nil)
	if err == nil && len(probs) == 0 {
		t.Fatal("Check found nothing")
	}
	if err != nil && !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("Check: %v", err)
	}
	// Other informers still read.
	if err := db.View(func(tx *store.Tx) error { _, err := tx.State("empty"); return err }); err != nil {
		t.Fatalf("View of another informer: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// And the next Open refuses the file.
	if _, err := store.Open(path, &store.Options{Timeout: -1}); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("reopen: %v", err)
	}
}
