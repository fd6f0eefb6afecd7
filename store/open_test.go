package store_test

import (
	"encoding/binary"
	"errors"
	"hash/fnv"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/boltinformer/boltinformer/internal/safefile"
	"github.com/boltinformer/boltinformer/store"
)

func TestOpenCreatesModes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "b")
	path := filepath.Join(dir, "cache.db")
	db := openT(t, path, nil)
	if db.Path() != path || db.ReadOnly() {
		t.Fatalf("Path %q ReadOnly %v", db.Path(), db.ReadOnly())
	}
	for _, c := range []struct {
		path string
		want os.FileMode
	}{{dir, 0o700 | os.ModeDir}, {filepath.Dir(dir), 0o700 | os.ModeDir}, {path, 0o600}} {
		fi, err := os.Stat(c.path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != c.want {
			t.Errorf("%s: mode %v, want %v", c.path, fi.Mode(), c.want)
		}
	}
	if !db.Created().Equal(epoch) {
		t.Errorf("Created %v, want %v", db.Created(), epoch)
	}
	if n, err := db.Size(); err != nil || n <= 0 {
		t.Errorf("Size %d, %v", n, err)
	}
	// An existing directory keeps its mode.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	db2 := openT(t, filepath.Join(dir, "other.db"), nil)
	_ = db2.Close()
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o755 {
		t.Errorf("existing directory changed to %v", fi.Mode())
	}
}

func TestReopenKeepsMeta(t *testing.T) {
	path := tempPath(t)
	smallCache(t, path, 3)
	header := func() []byte {
		var h []byte
		db := openT(t, path, &store.Options{NoSync: true, Clock: clocktesting.NewFakeClock(epoch.Add(time.Hour))})
		if !db.Created().Equal(epoch) {
			t.Errorf("Created %v after reopen, want %v", db.Created(), epoch)
		}
		_ = db.Bolt(func(b *bolt.DB) error {
			return b.View(func(tx *bolt.Tx) error {
				h = append(h, tx.Bucket([]byte("meta")).Get([]byte("header"))...)
				return nil
			})
		})
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		return h
	}
	h1, h2 := header(), header()
	if string(h1) != string(h2) || len(h1) != 24 {
		t.Fatalf("header changed on reopen: %x -> %x", h1, h2)
	}
	db := openT(t, path, &store.Options{ReadOnly: true})
	if !db.Created().Equal(epoch) || !db.ReadOnly() {
		t.Fatalf("read-only: Created %v ReadOnly %v", db.Created(), db.ReadOnly())
	}
	if err := db.Commit(&store.Batch{Informer: "x"}); !errors.Is(err, store.ErrReadOnly) {
		t.Fatalf("Commit on read-only DB: %v", err)
	}
	if err := db.DeleteInformer("pods"); !errors.Is(err, store.ErrReadOnly) {
		t.Fatalf("DeleteInformer on read-only DB: %v", err)
	}
}

func TestClosed(t *testing.T) {
	db := openT(t, tempPath(t), nil)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := db.View(func(*store.Tx) error { return nil }); !errors.Is(err, store.ErrClosed) {
		t.Errorf("View after Close: %v", err)
	}
	if err := db.Commit(&store.Batch{Informer: "x"}); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Commit after Close: %v", err)
	}
	if _, err := db.Check(nil); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Check after Close: %v", err)
	}
	if err := db.Bolt(func(*bolt.DB) error { return nil }); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Bolt after Close: %v", err)
	}
}

// wantLocked checks that err is ErrLocked naming path and that it came
// within bound.
func wantLocked(t *testing.T, err error, path string, took, bound time.Duration) {
	t.Helper()
	if !errors.Is(err, store.ErrLocked) {
		t.Fatalf("got %v, want ErrLocked", err)
	}
	if !strings.Contains(err.Error(), path) {
		t.Errorf("error %q does not name %s", err, path)
	}
	if took > bound {
		t.Errorf("ErrLocked after %s, want within %s", took, bound)
	}
}

func openTimed(path string, opts *store.Options) (*store.DB, time.Duration, error) {
	start := time.Now()
	db, err := store.Open(path, opts)
	return db, time.Since(start), err
}

// TestLockSameProcess: bbolt locks with flock(2), which belongs to the open
// file description, so a second Open of the same file in the same process
// conflicts just as another process would.
func TestLockSameProcess(t *testing.T) {
	path := tempPath(t)
	openT(t, path, nil)

	_, took, err := openTimed(path, &store.Options{Timeout: 150 * time.Millisecond})
	wantLocked(t, err, path, took, 2*time.Second)
	if took < 100*time.Millisecond {
		t.Errorf("gave up after %s, before the timeout", took)
	}
	_, took, err = openTimed(path, &store.Options{Timeout: -1})
	wantLocked(t, err, path, took, time.Second)

	// A shared (read-only) lock conflicts with the writer's exclusive one.
	_, took, err = openTimed(path, &store.Options{ReadOnly: true, Timeout: 100 * time.Millisecond})
	wantLocked(t, err, path, took, 2*time.Second)
}

// TestLockReadOnlyShared: read-only opens share the lock with each other
// and keep writers out.
func TestLockReadOnlyShared(t *testing.T) {
	path := tempPath(t)
	smallCache(t, path, 2)
	r1 := openT(t, path, &store.Options{ReadOnly: true})
	r2 := openT(t, path, &store.Options{ReadOnly: true, Timeout: -1})
	for _, db := range []*store.DB{r1, r2} {
		if err := db.View(func(tx *store.Tx) error {
			if got := tx.Informers(); len(got) != 2 {
				t.Errorf("Informers %v", got)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	_, took, err := openTimed(path, &store.Options{Timeout: 100 * time.Millisecond})
	wantLocked(t, err, path, took, 2*time.Second)
	_ = r1.Close()
	_ = r2.Close()
	openT(t, path, &store.Options{Timeout: -1})
}

// TestLockOtherProcess holds the file in a child process (this test binary
// re-run with holdEnv set).
func TestLockOtherProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess")
	}
	path := tempPath(t)
	smallCache(t, path, 1)
	for _, c := range []struct {
		name      string
		env       string
		rwLocked  bool // a read-write open fails while the child holds it
		roLocked  bool // a read-only open fails
		childMode string
	}{
		{"child-read-write", holdEnv, true, true, "exclusive"},
		{"child-read-only", holdROEnv, true, false, "shared"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), c.env+"="+path)
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
			if line := readLine(t, stdout, 30*time.Second); line != "locked" {
				t.Fatalf("helper said %q", line)
			}

			db, took, err := openTimed(path, &store.Options{Timeout: 200 * time.Millisecond})
			if c.rwLocked {
				wantLocked(t, err, path, took, 3*time.Second)
			} else if err != nil {
				t.Fatal(err)
			} else {
				_ = db.Close()
			}
			db, took, err = openTimed(path, &store.Options{ReadOnly: true, Timeout: 200 * time.Millisecond})
			if c.roLocked {
				wantLocked(t, err, path, took, 3*time.Second)
			} else if err != nil {
				t.Fatalf("read-only open beside a %s holder: %v", c.childMode, err)
			} else {
				_ = db.Close()
			}

			// Once the child lets go, Open succeeds (the lock dies with
			// the holder's descriptor).
			_ = stdin.Close()
			_, _ = io.Copy(io.Discard, stdout)
			if err := cmd.Wait(); err != nil {
				t.Fatalf("helper: %v", err)
			}
			db, err = store.Open(path, &store.Options{Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			_ = db.Close()
		})
	}
}

// TestLockReleasedOnKill: a SIGKILLed holder releases the lock.
func TestLockReleasedOnKill(t *testing.T) {
	if testing.Short() {
		t.Skip("subprocess")
	}
	path := tempPath(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holdEnv+"="+path)
	if _, err := cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if line := readLine(t, stdout, 30*time.Second); line != "locked" {
		t.Fatalf("helper said %q", line)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	db, err := store.Open(path, &store.Options{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	_ = db.Close()
}

// putHeader rewrites the meta record through bbolt directly.
func putHeader(t *testing.T, path string, hdr []byte) {
	t.Helper()
	b, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("meta")).Put([]byte("header"), hdr)
	}); err != nil {
		t.Fatal(err)
	}
}

// header builds a meta record as docs/FORMAT.md describes it.
func header(magic, version uint32, created time.Time) []byte {
	b := make([]byte, 24)
	binary.BigEndian.PutUint32(b[0:], magic)
	binary.BigEndian.PutUint32(b[4:], version)
	binary.BigEndian.PutUint64(b[8:], uint64(created.UnixNano()))
	h := fnv.New64a()
	_, _ = h.Write(b[:16])
	binary.BigEndian.PutUint64(b[16:], h.Sum64())
	return b
}

const magic = 0x42494E46

func TestHeaderLayout(t *testing.T) {
	path := tempPath(t)
	openT(t, path, nil).Close()
	var got []byte
	b, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	_ = b.View(func(tx *bolt.Tx) error {
		got = append(got, tx.Bucket([]byte("meta")).Get([]byte("header"))...)
		if tx.Bucket([]byte("informers")) == nil {
			t.Error("no informers bucket")
		}
		return nil
	})
	_ = b.Close()
	if want := header(magic, store.FormatVersion, epoch); string(got) != string(want) {
		t.Fatalf("meta record %x, want %x (docs/FORMAT.md)", got, want)
	}
}

func TestBadHeader(t *testing.T) {
	good := header(magic, store.FormatVersion, epoch)
	newer := store.FormatVersion + 1
	badSum := append([]byte(nil), good...)
	badSum[23] ^= 1
	for _, c := range []struct {
		name    string
		hdr     []byte
		version uint32 // for a *VersionError
		want    error
	}{
		{"version-newer", header(magic, newer, epoch), newer, store.ErrUnsupportedVersion},
		{"version-0", header(magic, 0, epoch), 0, store.ErrUnsupportedVersion},
		// The version is checked before the checksum: a newer file whose
		// record we cannot verify still says "newer".
		{"version-newer-bad-checksum", header(magic, newer, epoch)[:16], newer, store.ErrUnsupportedVersion},
		{"bad-magic", header(0x12345678, 1, epoch), 0, store.ErrForeign},
		{"empty", []byte{}, 0, store.ErrForeign},
		{"bad-checksum", badSum, 0, store.ErrCorrupt},
		{"short", good[:20], 0, store.ErrCorrupt},
		{"long", append(append([]byte(nil), good...), 0), 0, store.ErrCorrupt},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := tempPath(t)
			smallCache(t, path, 1)
			putHeader(t, path, c.hdr)
			before := fileHash(t, path)
			for _, ro := range []bool{false, true} {
				db, err := store.Open(path, &store.Options{ReadOnly: ro})
				if err == nil {
					_ = db.Close()
					t.Fatalf("read-only %v: opened", ro)
				}
				if !errors.Is(err, c.want) {
					t.Fatalf("read-only %v: %v, want %v", ro, err, c.want)
				}
				if !strings.Contains(err.Error(), path) {
					t.Errorf("error %q does not name the file", err)
				}
				var ve *store.VersionError
				if errors.As(err, &ve) != (c.want == store.ErrUnsupportedVersion) {
					t.Fatalf("errors.As VersionError = %v for %v", !(c.want == store.ErrUnsupportedVersion), err)
				}
				if ve != nil && (ve.Found != c.version || ve.Supported != store.FormatVersion || ve.Path != path) {
					t.Fatalf("VersionError %+v", ve)
				}
				if fileHash(t, path) != before {
					t.Fatalf("read-only %v: Open changed the file", ro)
				}
			}
		})
	}
}

func TestVersionErrorText(t *testing.T) {
	newer := &store.VersionError{Path: "/x", Found: 3, Supported: 1}
	if got := newer.Error(); got != "store: /x: format version 3 is newer than supported 1" {
		t.Errorf("newer: %q", got)
	}
	older := &store.VersionError{Path: "/x", Found: 0, Supported: 1}
	if !strings.Contains(older.Error(), "not supported") || !errors.Is(older, store.ErrUnsupportedVersion) {
		t.Errorf("older: %q", older)
	}
}

// boltFile creates a plain bbolt file with fn's buckets.
func boltFile(t *testing.T, fn func(*bolt.Tx) error, opts *bolt.Options) string {
	t.Helper()
	path := tempPath(t)
	b, err := bolt.Open(path, 0o600, opts)
	if err != nil {
		t.Fatal(err)
	}
	if fn != nil {
		if err := b.Update(fn); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestForeignBoltFile(t *testing.T) {
	for _, c := range []struct {
		name string
		fn   func(*bolt.Tx) error
	}{
		{"other-buckets", func(tx *bolt.Tx) error {
			b, err := tx.CreateBucket([]byte("widgets"))
			if err != nil {
				return err
			}
			return b.Put([]byte("a"), []byte("b"))
		}},
		// A "meta" bucket of another program, without our header, is not
		// ours either: Open must not write a header into it.
		{"meta-without-header", func(tx *bolt.Tx) error {
			b, err := tx.CreateBucket([]byte("meta"))
			if err != nil {
				return err
			}
			return b.Put([]byte("version"), []byte("3"))
		}},
		{"empty-meta-bucket", func(tx *bolt.Tx) error {
			_, err := tx.CreateBucket([]byte("meta"))
			return err
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := boltFile(t, c.fn, nil)
			before := fileHash(t, path)
			for _, ro := range []bool{false, true} {
				db, err := store.Open(path, &store.Options{ReadOnly: ro})
				if err == nil {
					_ = db.Close()
					t.Fatalf("read-only %v: opened a foreign file", ro)
				}
				if !errors.Is(err, store.ErrForeign) {
					t.Fatalf("read-only %v: %v, want ErrForeign", ro, err)
				}
			}
			if fileHash(t, path) != before {
				t.Fatal("Open changed a foreign file")
			}
		})
	}
}

// TestRejectedFileUntouched: a bbolt file written without a freelist
// (NoFreelistSync) makes a read-write bbolt open write one; Open must
// refuse a foreign file or another format version before that.
func TestRejectedFileUntouched(t *testing.T) {
	foreign := boltFile(t, func(tx *bolt.Tx) error {
		_, err := tx.CreateBucket([]byte("widgets"))
		return err
	}, &bolt.Options{NoFreelistSync: true})
	newer := boltFile(t, func(tx *bolt.Tx) error {
		if _, err := tx.CreateBucket([]byte("informers")); err != nil {
			return err
		}
		m, err := tx.CreateBucket([]byte("meta"))
		if err != nil {
			return err
		}
		return m.Put([]byte("header"), header(magic, store.FormatVersion+1, epoch))
	}, &bolt.Options{NoFreelistSync: true})
	for path, want := range map[string]error{foreign: store.ErrForeign, newer: store.ErrUnsupportedVersion} {
		before := fileHash(t, path)
		if _, err := store.Open(path, nil); !errors.Is(err, want) {
			t.Fatalf("Open: %v, want %v", err, want)
		}
		if fileHash(t, path) != before {
			t.Fatalf("Open changed a file it refused (%v)", want)
		}
	}
}

// TestEmptyBoltFile: a bbolt file with no buckets at all (as bbolt.Open
// creates it) is taken as a new cache and initialised, like an empty file;
// read-only, it is refused as ErrForeign since it cannot be initialised.
func TestEmptyBoltFile(t *testing.T) {
	path := boltFile(t, nil, nil)
	before := fileHash(t, path)
	if _, err := store.Open(path, &store.Options{ReadOnly: true}); !errors.Is(err, store.ErrForeign) {
		t.Fatalf("read-only: %v", err)
	}
	if fileHash(t, path) != before {
		t.Fatal("read-only Open changed the file")
	}
	db := openT(t, path, nil)
	if !db.Created().Equal(epoch) {
		t.Fatalf("Created %v", db.Created())
	}
}

// TestEmptyFile: a zero-length file (e.g. created by the caller, or by a
// crash between creation and bbolt's first write) is initialised as new.
func TestEmptyFile(t *testing.T) {
	path := tempPath(t)
	writeFile(t, path, nil)
	if _, err := store.Open(path, &store.Options{ReadOnly: true}); !errors.Is(err, store.ErrForeign) {
		t.Fatalf("read-only open of an empty file: %v", err)
	}
	if b := readFile(t, path); len(b) != 0 {
		t.Fatal("read-only open wrote to an empty file")
	}
	db := openT(t, path, nil)
	if err := db.Commit(podBatch(t, "pods", 0, 2, "5")); err != nil {
		t.Fatal(err)
	}
	probs, err := db.Check(nil)
	if err != nil || len(probs) > 0 {
		t.Fatalf("Check: %v %v", probs, err)
	}
}

func TestOpenMissingReadOnly(t *testing.T) {
	path := tempPath(t)
	if _, err := store.Open(path, &store.Options{ReadOnly: true}); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("read-only open of a missing file: %v", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("read-only open created the file")
	}
}

func TestOpenNotRegular(t *testing.T) {
	dir := t.TempDir()
	if _, err := store.Open(dir, nil); !errors.Is(err, store.ErrForeign) {
		t.Fatalf("Open of a directory: %v", err)
	}
}

// TestRegressionEmptyFileDirectorySynced: an empty file at the path (left
// by an Open that created it and crashed before it synced the directory,
// or created by someone else) is initialised by bbolt like a new one, but
// its directory entry was never synced: a power loss after commits were
// acknowledged in it could take the file away. Open syncs its directory
// as for a file it creates.
func TestRegressionEmptyFileDirectorySynced(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cache.db")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var synced []string
	defer safefile.SetHooks(safefile.Hooks{SyncedDir: func(d string) { synced = append(synced, d) }})()
	db, err := store.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(synced, dir) {
		t.Fatalf("Open of an empty file synced directories %v, not %s", synced, dir)
	}
	// A file that holds a database is not new: nothing is synced.
	synced = nil
	db, err = store.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if len(synced) != 0 {
		t.Fatalf("Open of an existing file synced %v", synced)
	}
}
