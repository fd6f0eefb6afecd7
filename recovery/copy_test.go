package recovery_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	testclock "k8s.io/utils/clock/testing"

	"github.com/boltinformer/boltinformer/recovery"
	"github.com/boltinformer/boltinformer/store"
)

// TestKeepCopy: one copy per damage (a copy named for any of the ids
// known when it was made counts, a link named so does not), the bound on
// the files beside the cache, and copies disabled.
func TestKeepCopy(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cache.db")
	db, err := store.Open(path, nil)
	must(t, err)
	defer db.Close()
	clk := testclock.NewFakeClock(time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC))
	opts := &recovery.CopyOptions{Clock: clk}
	a, b := recovery.DamageID("pods", "ns/a", []byte("x")), recovery.DamageID("pods", "ns/b", []byte("y"))
	if a == b || a != recovery.DamageID("pods", "ns/a", []byte("x")) {
		t.Fatalf("damage ids %s %s", a, b)
	}

	first, err := recovery.KeepCopy(db, []string{b, a}, opts)
	must(t, err)
	if !first.Written || !strings.HasSuffix(first.Path, "-"+min(a, b)+"-"+max(a, b)) {
		t.Fatalf("first copy: %+v", first)
	}
	if fi, err := os.Lstat(first.Path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the copy: %v %v", fi, err)
	}
	// The same damage (any of its ids), later: no new copy.
	clk.Step(time.Hour)
	for _, ids := range [][]string{{a}, {b}, {b, recovery.DamageID("pods", "ns/c", nil)}} {
		again, err := recovery.KeepCopy(db, ids, opts)
		must(t, err)
		if again.Written || again.Path != first.Path {
			t.Fatalf("ids %v: %+v, want the first copy", ids, again)
		}
	}
	// A link named for a damage is no copy: a real one is made beside it.
	c := recovery.DamageID("pods", "ns/c", []byte("z"))
	must(t, os.Symlink(filepath.Join(t.TempDir(), "x"), path+".corrupt-20260701T110000Z-"+c))
	second, err := recovery.KeepCopy(db, []string{c}, opts)
	must(t, err)
	if !second.Written {
		t.Fatalf("second damage: %+v", second)
	}
	// The bound: a quarantined file makes three files.
	must(t, os.WriteFile(path+".corrupt-20260101T000000Z", nil, 0o600))
	d := recovery.DamageID("pods", "ns/d", nil)
	third, err := recovery.KeepCopy(db, []string{d}, opts)
	must(t, err)
	if third.Written || third.Path != "" || !strings.Contains(third.Skipped, "bound is 3") {
		t.Fatalf("past the bound: %+v", third)
	}
	more, err := recovery.KeepCopy(db, []string{d}, &recovery.CopyOptions{Clock: clk, MaxFiles: 4})
	must(t, err)
	if !more.Written {
		t.Fatalf("MaxFiles 4: %+v", more)
	}
	off, err := recovery.KeepCopy(db, []string{recovery.DamageID("pods", "ns/e", nil)}, &recovery.CopyOptions{MaxFiles: -1})
	must(t, err)
	if off.Written || off.Skipped == "" {
		t.Fatalf("copies disabled: %+v", off)
	}
	if m, _ := filepath.Glob(path + ".corrupt-*.tmp"); len(m) != 0 {
		t.Fatalf("temporary files left: %v", m)
	}
}
