package store

import (
	"math/bits"
	"os"
	"path/filepath"
	"testing"
)

// White-box: the mapping size is bbolt's business and not observable from
// outside, short of timing a growing file.
func TestInitialMmapSize(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.db")
	big := filepath.Join(dir, "big.db")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	// A sparse file of 768 MiB: more than half the default reserve.
	if err := f.Truncate(768 << 20); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()

	if got := initialMmapSize(4096, missing); got != 4096 {
		t.Errorf("requested 4096: got %d", got)
	}
	if got := initialMmapSize(-1, missing); got != 0 {
		t.Errorf("negative: got %d, want 0 (bbolt's default)", got)
	}
	if bits.UintSize < 64 {
		if got := initialMmapSize(0, missing); got != 0 {
			t.Errorf("32-bit default: got %d, want 0", got)
		}
		return
	}
	if got := initialMmapSize(0, missing); got != defaultMmapReserve {
		t.Errorf("new file: got %d, want %d", got, defaultMmapReserve)
	}
	if got := initialMmapSize(0, big); got != 2*(768<<20) {
		t.Errorf("768 MiB file: got %d, want twice its size", got)
	}
}
