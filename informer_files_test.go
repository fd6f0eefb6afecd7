package boltinformer_test

// The files the library creates beside the cache (issue 14, item 6): never
// through a symbolic link, never over an existing file, and durable (the
// directory fsync'd after each create and rename).

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	testclock "k8s.io/utils/clock/testing"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/internal/safefile"
	"github.com/boltinformer/boltinformer/recovery"
	"github.com/boltinformer/boltinformer/store"
)

// TestRegressionOpenRefusesSymlink: a dangling symbolic link at the cache
// path used to make Open create its target wherever it pointed. A
// read-write Open now refuses any link at the path, with an error that
// says so, and creates nothing; a read-only open may still read through
// one.
func TestRegressionOpenRefusesSymlink(t *testing.T) {
	dir, elsewhere := t.TempDir(), t.TempDir()
	target := filepath.Join(elsewhere, "created-by-the-agent")
	path := filepath.Join(dir, "cache.db")
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	db, err := boltinformer.Open(path, &boltinformer.Options{Logger: &quietLogger})
	if err == nil {
		_ = db.Close()
		t.Fatal("Open through a dangling link succeeded")
	}
	if !errors.Is(err, store.ErrForeign) || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("Open through a dangling link: %v, want ErrForeign naming the link", err)
	}
	if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the link's target: %v, want it never created", err)
	}
	if ents, _ := os.ReadDir(elsewhere); len(ents) != 0 {
		t.Fatalf("created beside the target: %v", ents)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 || ents[0].Type()&os.ModeSymlink == 0 {
		t.Fatalf("the cache directory holds %v, want the link alone", ents)
	}

	// A link to a valid cache file: refused read-write, the file
	// untouched; readable read-only.
	real := newCacheFile(t, 3).path
	before, err := os.ReadFile(real)
	if err != nil {
		t.Fatal(err)
	}
	linked := filepath.Join(dir, "linked.db")
	if err := os.Symlink(real, linked); err != nil {
		t.Fatal(err)
	}
	if db, err := boltinformer.Open(linked, &boltinformer.Options{Logger: &quietLogger}); err == nil || !errors.Is(err, store.ErrForeign) {
		if db != nil {
			_ = db.Close()
		}
		t.Fatalf("Open through a link to a cache file: %v, want ErrForeign", err)
	}
	if after, _ := os.ReadFile(real); !bytes.Equal(before, after) {
		t.Fatal("the linked cache file changed")
	}
	sdb, err := store.Open(linked, &store.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("read-only open through a link: %v", err)
	}
	_ = sdb.Close()
}

// TestRegressionDamageCopyRefusesSymlink: the copy kept for a damaged
// record used to be opened with create-and-truncate at a predictable name
// (one per second), so a link planted there between the name check and
// the create (a race won 114 of 200 tries) made the agent overwrite any
// file it could write. The test wins the race every time: it plants a
// link at each name just before the create (or the rename), one to a
// file that must stay as it is and a dangling one whose target must not
// appear. The copy lands under another name.
func TestRegressionDamageCopyRefusesSymlink(t *testing.T) {
	f := newCacheFile(t, 20)
	damageRecord(t, f.path, "ns-1/pod-000010", "checksum", false)
	elsewhere := t.TempDir()
	victim := filepath.Join(elsewhere, "victim")
	const precious = "a file the agent can write but must not touch"
	if err := os.WriteFile(victim, []byte(precious), 0o600); err != nil {
		t.Fatal(err)
	}
	dangling := filepath.Join(elsewhere, "created-by-the-agent")
	var mu sync.Mutex
	planted := map[string]string{} // link -> target
	calls := 0
	plant := func(link, target string) {
		if err := os.Symlink(target, link); err != nil {
			t.Errorf("plant %s: %v", link, err)
			return
		}
		planted[link] = target
	}
	defer safefile.SetHooks(safefile.Hooks{BeforeCreate: func(path string) {
		mu.Lock()
		defer mu.Unlock()
		if !strings.HasPrefix(path, f.path+".corrupt-") {
			return
		}
		switch calls++; calls {
		case 1: // at the name the finished copy is renamed to
			plant(strings.TrimSuffix(path, ".tmp"), victim)
		case 2: // at the file about to be created
			plant(path, victim)
		case 3:
			plant(path, dangling)
		}
	}})()
	r := f.open(nil, nil)
	waitFor(t, "the copy", func() bool { return r.inf.Health().DamageCopy != "" })
	r.close()
	mu.Lock()
	defer mu.Unlock()
	if b, err := os.ReadFile(victim); err != nil || string(b) != precious {
		t.Fatalf("the link's target was written: %d bytes, %v", len(b), err)
	}
	if calls < 4 || len(planted) != 3 {
		t.Fatalf("%d creates, links planted %v: the race was not run", calls, planted)
	}
	if _, err := os.Lstat(dangling); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the dangling link's target: %v, want it never created", err)
	}
	for link, target := range planted {
		if got, err := os.Readlink(link); err != nil || got != target {
			t.Fatalf("planted link %s: %q, %v", link, got, err)
		}
	}
	copies := damageCopies(t, f.path)
	var regular []string
	for _, c := range copies {
		if fi, err := os.Lstat(c); err == nil && fi.Mode().IsRegular() {
			regular = append(regular, c)
		}
	}
	if len(regular) != 1 {
		t.Fatalf("copies %v, regular %v: want one", copies, regular)
	}
}

// TestRegressionDirectorySynced: a new directory entry survives power
// loss only once its directory is fsync'd. The cache file's creation, a
// quarantine's rename and a damage copy's rename are each followed by
// an fsync of the directory (observed through safefile's hooks: the test
// fails if one is removed).
func TestRegressionDirectorySynced(t *testing.T) {
	var mu sync.Mutex
	var events []string
	defer safefile.SetHooks(safefile.Hooks{
		BeforeCreate: func(p string) { mu.Lock(); events = append(events, "create "+p); mu.Unlock() },
		SyncedDir:    func(d string) { mu.Lock(); events = append(events, "sync "+d); mu.Unlock() },
		Renamed:      func(_, p string) { mu.Lock(); events = append(events, "rename "+p); mu.Unlock() },
	})()
	take := func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := events
		events = nil
		return out
	}
	// syncedAfter checks that the directory of the last event naming a
	// path that starts with prefix was synced after it.
	syncedAfter := func(what, prefix string, evs []string) {
		t.Helper()
		last := -1
		for i, e := range evs {
			if _, p, _ := strings.Cut(e, " "); strings.HasPrefix(p, prefix) && !strings.HasPrefix(e, "sync ") {
				last = i
			}
		}
		if last < 0 {
			t.Fatalf("%s: no create or rename of %s* in %v", what, prefix, evs)
		}
		want := "sync " + filepath.Dir(prefix)
		if !slices.Contains(evs[last+1:], want) {
			t.Fatalf("%s: the directory was not fsync'd after %q: %v", what, evs[last], evs)
		}
	}

	// The cache file, and the directories Open creates.
	base := t.TempDir()
	path := filepath.Join(base, "a", "b", "cache.db")
	db, err := boltinformer.Open(path, &boltinformer.Options{Logger: &quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	evs := take()
	syncedAfter("new cache file", path, evs)
	for _, d := range []string{base, filepath.Join(base, "a")} {
		if !slices.Contains(evs, "sync "+d) {
			t.Fatalf("new directory: %s not fsync'd: %v", d, evs)
		}
	}

	// A quarantine.
	clk := testclock.NewFakeClock(time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC))
	aside, err := recovery.QuarantineFile(path, clk)
	if err != nil {
		t.Fatal(err)
	}
	syncedAfter("quarantine", aside, take())

	// A damage copy.
	f := newCacheFile(t, 20)
	damageRecord(t, f.path, "ns-1/pod-000010", "checksum", false)
	take()
	r := f.open(nil, nil)
	waitFor(t, "the copy", func() bool { return r.inf.Health().DamageCopy != "" })
	r.close()
	syncedAfter("damage copy", r.f.path+".corrupt-", take())
}
