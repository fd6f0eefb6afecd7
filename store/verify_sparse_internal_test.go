package store

import (
	"os"
	"path/filepath"
	"testing"
)

// TestRegressionSparseFileVerify: a cache file extended sparsely to 16 GiB
// (bbolt grows files ahead of use; anyone may truncate one longer) opens
// without the page verifier reading or mapping past bbolt's high-water
// mark. It used to map the whole file with MAP_POPULATE: 26 s and 16 GiB
// of page cache. White-box: what the verifier read is not observable from
// outside, short of timing it.
func TestRegressionSparseFileVerify(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache.db")
	db, err := Open(path, &Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	m, err := (&pageVerifier{f: f, size: uint64(fi.Size())}).readMeta()
	_ = f.Close()
	if err != nil {
		t.Fatal(err)
	}
	used := m.hwm * m.pageSize // what bbolt uses; the file is longer (grown ahead)
	t.Logf("file %d bytes, in use %d", fi.Size(), used)
	const sparse = 16 << 30
	if err := os.Truncate(path, sparse); err != nil {
		t.Skipf("no sparse 16 GiB file here: %v", err)
	}
	var got []verifyStats
	verifyObserver = func(s verifyStats) { got = append(got, s) }
	defer func() { verifyObserver = nil }()
	for _, ro := range []bool{false, true} {
		got = nil
		db, err := Open(path, &Options{ReadOnly: ro, NoSync: true})
		if err != nil {
			t.Fatalf("read-only %v: %v", ro, err)
		}
		_ = db.Close()
		if len(got) == 0 {
			t.Fatalf("read-only %v: the page verifier did not run", ro)
		}
		for _, s := range got {
			if s.Mapped > used || s.Read > used || s.Pages == 0 {
				t.Errorf("read-only %v: the verifier mapped %d and read %d bytes (%d pages) of a %d-byte file whose bbolt data is at most %d bytes",
					ro, s.Mapped, s.Read, s.Pages, int64(sparse), used)
			}
		}
	}
}
