package recovery_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/recovery/crashtest"
	"github.com/boltinformer/boltinformer/store"
)

// commitLog records the commit attempts of a DB.
type commitLog struct {
	mu       sync.Mutex
	attempts int
	failures int
	lastErr  error
}

func (l *commitLog) onCommit(info boltinformer.CommitInfo) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.attempts++
	if info.Err != nil {
		l.failures++
	}
	l.lastErr = info.Err
}

func (l *commitLog) get() (attempts, failures int, last error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.attempts, l.failures, l.lastErr
}

// faultSwitch is a BeforeCommit failpoint that fails every commit while
// an error is set.
type faultSwitch struct{ err atomic.Pointer[error] }

func (f *faultSwitch) set(err error) {
	if err == nil {
		f.err.Store(nil)
		return
	}
	f.err.Store(&err)
}

func (f *faultSwitch) hook() error {
	if p := f.err.Load(); p != nil {
		return *p
	}
	return nil
}

// checkFaulted asserts what a running agent reports during a commit
// fault: the cache serves the newest state from memory, the error is
// reported, and the saved resourceVersion (memory's idea of the disk and
// the disk itself) has not moved past what was committed before.
func checkFaulted(t *testing.T, a *agent, src *crashtest.Source, h *crashtest.History, committed string, want error) {
	t.Helper()
	a.caughtUp(t, src)
	if got := a.saved(); got != committed {
		t.Errorf("saved resourceVersion %s during the fault, want %s", got, committed)
	}
	fs, err := crashtest.VerifyDB(a.db.Store(), informerName, h.StateAt, &crashtest.VerifyOptions{Indexers: crashIndexers(true)})
	if err != nil {
		t.Errorf("file during the fault: %v", err)
	} else if itoa(fs.RV) != committed {
		t.Errorf("file holds resourceVersion %d during the fault, want %s", fs.RV, committed)
	}
	health := a.inf.Health()
	if health.CommitError == "" || !strings.Contains(health.CommitError, want.Error()) {
		t.Errorf("Health().CommitError = %q, want it to report %v", health.CommitError, want)
	}
	if health.SavedResourceVersion != committed || health.AppliedResourceVersion != src.ResourceVersion() {
		t.Errorf("health saved %s applied %s, want %s and %s", health.SavedResourceVersion, health.AppliedResourceVersion, committed, src.ResourceVersion())
	}
	if err := a.db.Healthy(); !errors.Is(err, boltinformer.ErrUnhealthy) || !errors.Is(err, want) {
		t.Errorf("Healthy() = %v, want ErrUnhealthy wrapping %v", err, want)
	}
	if err := a.db.LastCommitError(); !errors.Is(err, want) {
		t.Errorf("LastCommitError() = %v, want %v", err, want)
	}
}

// checkRecovered waits for the commit after the fault cleared and
// checks that the file matches memory and the truth.
func checkRecovered(t *testing.T, a *agent, src *crashtest.Source, h *crashtest.History) {
	t.Helper()
	want := src.ResourceVersion()
	waitFor(t, "a commit after the fault cleared", func() bool {
		return a.saved() == want && a.db.LastCommitError() == nil
	})
	fs, err := crashtest.VerifyDB(a.db.Store(), informerName, h.StateAt, &crashtest.VerifyOptions{Indexers: crashIndexers(true)})
	if err != nil {
		t.Fatalf("file after recovery: %v", err)
	}
	if itoa(fs.RV) != want {
		t.Fatalf("file at %d after recovery, want %s", fs.RV, want)
	}
	if err := a.db.Healthy(); err != nil {
		t.Fatalf("Healthy() after recovery: %v", err)
	}
	if h := a.inf.Health(); h.CommitError != "" {
		t.Fatalf("CommitError after recovery: %q", h.CommitError)
	}
}

// TestCommitFaults injects each kind of write failure at the commit
// failpoint (Options.BeforeCommit, inside the bbolt transaction, which it
// aborts): disk full, an fsync error, a file system turned read-only.
func TestCommitFaults(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"disk-full", fmt.Errorf("write cache.db: %w", syscall.ENOSPC)},
		{"fsync-error", fmt.Errorf("fdatasync cache.db: %w", syscall.EIO)},
		{"read-only", fmt.Errorf("write cache.db: %w", syscall.EROFS)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := smallHistory(11)
			src := h.Source(0, 300)
			path := filepath.Join(t.TempDir(), "cache.db")
			var fault faultSwitch
			var log commitLog
			a := startAgent(t, path, src, &boltinformer.Options{BeforeCommit: fault.hook, OnCommit: log.onCommit})
			a.caughtUp(t, src)
			waitFor(t, "the first commit", func() bool { return a.saved() == "300" })

			fault.set(tc.err)
			feed(t, h, src, 300, 700)
			src.Bookmark()
			_, before, _ := log.get()
			// Retries, with backoff: at least three failed attempts.
			waitFor(t, "three failed commits", func() bool {
				_, f, _ := log.get()
				return f >= before+3
			})
			checkFaulted(t, a, src, h, "300", tc.err)

			fault.set(nil)
			checkRecovered(t, a, src, h)
			attempts, failures, _ := log.get()
			t.Logf("%s: %d commit attempts, %d failed", tc.name, attempts, failures)

			if err := a.stop(); err != nil {
				t.Fatal(err)
			}
			b := startAgent(t, path, src, nil)
			if !b.inf.Decision().Warm {
				t.Fatalf("restart after the fault: %+v", b.inf.Decision())
			}
			b.caughtUp(t, src)
		})
	}
}

// TestIntermittentCommitFaults fails every other commit while events flow,
// then stops failing: nothing is lost, and the file ends equal to memory.
func TestIntermittentCommitFaults(t *testing.T) {
	h := smallHistory(12)
	src := h.Source(0, 200)
	path := filepath.Join(t.TempDir(), "cache.db")
	var n atomic.Int64
	var failing atomic.Bool
	failing.Store(true)
	hook := func() error {
		if failing.Load() && n.Add(1)%2 == 0 {
			return fmt.Errorf("fdatasync: %w", syscall.EIO)
		}
		return nil
	}
	a := startAgent(t, path, src, &boltinformer.Options{BeforeCommit: hook, CommitMaxOps: 50})
	for from := int64(200); from < 2000; from += 100 {
		feed(t, h, src, from, from+100)
		if from%500 == 0 {
			src.Bookmark()
		}
		// Each saved state is exactly a past truth.
		if _, err := crashtest.VerifyDB(a.db.Store(), informerName, h.StateAt, &crashtest.VerifyOptions{Indexers: crashIndexers(true), Sample: 50}); err != nil {
			t.Fatal(err)
		}
	}
	a.caughtUp(t, src)
	failing.Store(false)
	checkRecovered(t, a, src, h)
}

// TestDiskFull fills a small tmpfs for real: commits fail with ENOSPC from
// bbolt's writes while the informer serves from memory, and succeed once
// space is freed. Needs permission to mount (root in the test container);
// skipped otherwise.
func TestDiskFull(t *testing.T) {
	dir := mountTmpfs(t, "size=12m")
	h := crashtest.NewHistory(13, &crashtest.HistoryOptions{Keys: 200, Growth: 400, MaxKeys: 4000, MaxPadding: 3000})
	src := h.Source(0, 200)
	path := filepath.Join(dir, "cache.db")
	var log commitLog
	a := startAgent(t, path, src, &boltinformer.Options{OnCommit: log.onCommit})
	a.caughtUp(t, src)
	waitFor(t, "the first commit", func() bool { return a.saved() == "200" })

	// Fill the file system, leaving less than the next commits need.
	ballast := filepath.Join(dir, "ballast")
	fillDisk(t, ballast)
	committed := a.saved()
	rv := int64(200)
	for i := 0; ; i++ {
		if i == 50 {
			t.Fatalf("no ENOSPC after %d events; file %d bytes", rv, crashtest.FileSize(path))
		}
		feed(t, h, src, rv, rv+400)
		rv += 400
		a.caughtUp(t, src)
		if err := a.db.Flush(t.Context()); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("flush on a full disk: %v, want ENOSPC", err)
			}
			break
		}
		committed = a.saved()
	}
	t.Logf("disk full at resourceVersion %d (saved %s), file %d bytes", rv, committed, crashtest.FileSize(path))
	_, before, _ := log.get()
	feed(t, h, src, rv, rv+100)
	src.Bookmark()
	waitFor(t, "two more failed commits", func() bool {
		_, f, _ := log.get()
		return f >= before+2
	})
	if committed = a.saved(); rvOf(t, committed) >= rv {
		t.Fatalf("saved resourceVersion %s on a full disk, applied %d", committed, rv+100)
	}
	checkFaulted(t, a, src, h, committed, syscall.ENOSPC)

	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	checkRecovered(t, a, src, h)
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := crashtest.VerifyFile(path, informerName, h.StateAt, &crashtest.VerifyOptions{Indexers: crashIndexers(true)}); err != nil {
		t.Fatal(err)
	}
}

// TestReadOnlyFileSystem opens a valid cache file on a file system that
// is mounted read-only (a tmpfs remounted ro): Open fails with the
// file system's error, not ErrCorrupt; the file is neither quarantined nor
// changed, and stays readable for offline inspection. (A file system
// cannot be remounted read-only while the cache file is open for writing:
// the kernel refuses with EBUSY, so that case is injected in
// TestCommitFaults/read-only.)
func TestReadOnlyFileSystem(t *testing.T) {
	dir := mountTmpfs(t, "size=16m")
	h := smallHistory(14)
	src := h.Source(0, 300)
	path := filepath.Join(dir, "cache.db")
	a := startAgent(t, path, src, nil)
	a.caughtUp(t, src)
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	before := readFile(t, path)
	if err := syscall.Mount("", dir, "", syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
		t.Fatalf("remount read-only: %v", err)
	}
	for _, failOnCorrupt := range []bool{false, true} {
		db, err := boltinformer.Open(path, &boltinformer.Options{FailOnCorrupt: failOnCorrupt, LockTimeout: -1})
		if err == nil {
			_ = db.Close()
			t.Fatal("Open succeeded on a read-only file system")
		}
		if !errors.Is(err, syscall.EROFS) || errors.Is(err, store.ErrCorrupt) {
			t.Fatalf("Open on a read-only file system: %v, want EROFS and not ErrCorrupt", err)
		}
		t.Logf("FailOnCorrupt=%t: %v", failOnCorrupt, err)
	}
	if q, _ := crashtest.Quarantined(dir); len(q) > 0 {
		t.Fatalf("quarantined: %v", q)
	}
	if after := readFile(t, path); string(after) != string(before) {
		t.Fatal("the file changed")
	}
	fs, err := crashtest.VerifyFile(path, informerName, h.StateAt, &crashtest.VerifyOptions{Indexers: crashIndexers(true)})
	if err != nil {
		t.Fatal(err)
	}
	if fs.RV != 300 {
		t.Fatalf("read-only file at %d", fs.RV)
	}
}

// mountTmpfs mounts a tmpfs with the given options on a new directory and
// unmounts it at the end of the test; it skips the test when mounting is
// not permitted.
func mountTmpfs(t *testing.T, opts string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, opts); err != nil {
		t.Skipf("cannot mount a tmpfs (%s) here: %v; this test needs CAP_SYS_ADMIN", opts, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// fillDisk writes path until the file system is full.
func fillDisk(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for i := 0; i < 1<<20; i++ { // bounded: 4 GiB
		if _, err := f.Write(buf); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return
			}
			t.Fatal(err)
		}
	}
	t.Fatal("the file system never filled up")
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
