package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
	"k8s.io/utils/clock"

	"github.com/boltinformer/boltinformer/internal/safefile"
)

// DefaultLockTimeout is how long Open waits for another process's file lock
// when Options.Timeout is zero.
const DefaultLockTimeout = 2 * time.Second

// Options configure Open. A nil *Options means the defaults.
type Options struct {
	// Timeout is how long to wait for the file lock before returning
	// ErrLocked. Zero means DefaultLockTimeout; negative means try once.
	Timeout time.Duration
	// ReadOnly opens the file with a shared lock and refuses writes. The
	// file must exist and be initialised.
	ReadOnly bool
	// NoSync skips fsync on commit. It gives up durability: for tests and
	// benchmarks only.
	NoSync bool
	// Clock is used for creation and commit times. Default: the real clock.
	Clock clock.PassiveClock
	// OpenFile is passed to bbolt (test hook, like bbolt's Options.OpenFile).
	OpenFile func(string, int, os.FileMode) (*os.File, error)
	// BeforeCommit, when set, is called inside every write transaction just
	// before it commits; an error aborts the transaction (failpoint hook).
	BeforeCommit func() error
	// InitialMmapSize is the size bbolt first maps the file at. Zero means
	// the larger of 1 GiB and twice the file's size on 64-bit (address
	// space only: it spares a growing file bbolt's remaps, which copy every
	// node a write transaction holds), bbolt's default on 32-bit; negative
	// means bbolt's default.
	InitialMmapSize int
}

// DB is an open cache file. It is safe for concurrent use. The zero value is
// not usable: use Open.
type DB struct {
	path     string
	readOnly bool
	clock    clock.PassiveClock
	hook     func() error
	created  time.Time
	version  uint32 // of the file as opened (older ones are migrated)

	// closeMu guards bolt against Close while a transaction runs: readers
	// and writers hold it shared, Close holds it exclusively.
	closeMu sync.RWMutex
	bolt    *bolt.DB // nil once closed
}

// Open opens (creating, unless read-only) the cache file at path. The file
// is created with mode 0600 and its directory, if missing, with 0700, and
// the new entries are fsync'd (an empty file, which bbolt initialises, is
// taken for a new one). A read-write open refuses a symbolic link
// at path (ErrForeign), dangling or not: it never creates or writes a
// file through a link.
//
// Errors: ErrLocked if another process holds the file past the timeout;
// ErrForeign for a file not written by boltinformer; a *VersionError for an
// unsupported format version; ErrCorrupt for a damaged file. On any error
// the file is left as it was.
func Open(path string, opts *Options) (db *DB, err error) {
	if opts == nil {
		opts = &Options{}
	}
	c := opts.Clock
	if c == nil {
		c = clock.RealClock{}
	}
	// What this open creates, to sync before it returns (dirsync.go).
	var newDirs []string
	newFile := false
	if !opts.ReadOnly {
		newDirs = missingDirs(filepath.Dir(path))
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, fmt.Errorf("store: create directory of %s: %w", path, err)
		}
		if newFile, err = createFile(path); err != nil {
			return nil, err
		}
		if !newFile {
			// An empty file is one bbolt is about to initialise: the file
			// of an Open that created it and stopped before its directory
			// was synced (a crash), or one created by someone else. Its
			// name is made durable as a new file's is.
			if fi, err := os.Lstat(path); err == nil && fi.Mode().IsRegular() && fi.Size() == 0 {
				newFile = true
			}
		}
	} else if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	if err := precheckFile(path); err != nil {
		return nil, err
	}
	timeout := opts.Timeout
	switch {
	case timeout == 0:
		timeout = DefaultLockTimeout
	case timeout < 0:
		timeout = time.Nanosecond
	}
	openFile := opts.OpenFile
	if openFile == nil {
		openFile = os.OpenFile
	}
	if !opts.ReadOnly {
		// A link planted at the path after createFile looked is refused
		// too (ELOOP), never followed (bbolt opens with O_CREATE).
		next := openFile
		openFile = func(name string, flag int, mode os.FileMode) (*os.File, error) {
			f, err := next(name, flag|safefile.NoFollow, mode)
			if errors.Is(err, syscall.ELOOP) {
				return nil, symlinkError(name)
			}
			return f, err
		}
	}
	bopts := &bolt.Options{
		Timeout:         timeout,
		ReadOnly:        opts.ReadOnly,
		NoSync:          opts.NoSync,
		OpenFile:        openFile,
		InitialMmapSize: initialMmapSize(opts.InitialMmapSize, path),
		FreelistType:    bolt.FreelistMapType,
	}
	// bbolt follows its pages without bounds checks: prove the page tree
	// sound (verifyPages) before it does, holding a shared lock so that no
	// writer changes the file meanwhile. A read-only DB keeps that handle.
	var bdb *bolt.DB
	fi, err := os.Stat(path)
	if err == nil && fi.Size() == 0 && opts.ReadOnly {
		// bbolt would try to initialise it through a read-only handle.
		return nil, fmt.Errorf("%w: %s is empty", ErrForeign, path)
	}
	if err == nil && fi.Size() > 0 {
		ro := *bopts
		ro.ReadOnly = true
		if bdb, err = openBolt(path, &ro); err != nil {
			if errors.Is(err, ErrLocked) {
				return nil, err
			}
			// bbolt's own complaint is less precise than ours.
			if verr := verifyPages(path); verr != nil {
				return nil, verr
			}
			return nil, err
		}
		if err := verifyPages(path); err != nil {
			_ = bdb.Close()
			return nil, err
		}
		// Refuse a foreign file or another version before a read-write
		// bbolt open, which may write (a freelist it has to rebuild).
		if !opts.ReadOnly {
			probe := &DB{path: path, readOnly: true, bolt: bdb}
			if _, err := probe.checkMeta(); err != nil {
				_ = bdb.Close()
				return nil, err
			}
		}
		if !opts.ReadOnly {
			if err := bdb.Close(); err != nil {
				return nil, fmt.Errorf("store: close %s: %w", path, err)
			}
			bdb = nil
		}
	}
	if bdb == nil {
		if bdb, err = openBolt(path, bopts); err != nil {
			return nil, err
		}
	}
	db = &DB{path: path, readOnly: opts.ReadOnly, clock: c, hook: opts.BeforeCommit, bolt: bdb}
	if err := db.init(); err != nil {
		_ = bdb.Close()
		return nil, err
	}
	if (newFile || len(newDirs) > 0) && !opts.NoSync {
		if err := syncCreated(path, newFile, newDirs); err != nil {
			_ = bdb.Close()
			return nil, err
		}
	}
	if !opts.ReadOnly && !newFile && invalidMeta(path) {
		healMeta(bdb) // metaheal.go
	}
	if db.version < FormatVersion {
		// An older file: a read-write open migrates it, a read-only one
		// cannot.
		if db.readOnly && db.version >= readableAsIs {
			return db, nil
		}
		if db.readOnly {
			_ = bdb.Close()
			return nil, &VersionError{Path: path, Found: db.version, Supported: FormatVersion}
		}
		if err := db.migrate(db.version); err != nil {
			_ = bdb.Close()
			return nil, err
		}
		db.version = FormatVersion
	}
	return db, nil
}

// openBolt opens the bbolt file, mapping its errors to ours. A panic in
// bbolt is returned as ErrCorrupt, and the file it had opened (and locked)
// is closed.
func openBolt(path string, bopts *bolt.Options) (bdb *bolt.DB, err error) {
	var file *os.File
	o := *bopts
	openFile := o.OpenFile
	if openFile == nil {
		openFile = os.OpenFile
	}
	o.OpenFile = func(name string, flag int, mode os.FileMode) (*os.File, error) {
		f, err := openFile(name, flag, mode)
		file = f
		return f, err
	}
	defer func() {
		if r := recover(); r != nil {
			if file != nil {
				_ = file.Close()
			}
			bdb, err = nil, corruptf("%s: %v", path, r)
		}
	}()
	bdb, err = bolt.Open(path, 0o600, &o)
	if err != nil {
		switch {
		case errors.Is(err, bolterrors.ErrTimeout):
			return nil, fmt.Errorf("%w: %s (waited %s)", ErrLocked, path, bopts.Timeout)
		case errors.Is(err, ErrForeign):
			return nil, err
		case errors.Is(err, bolterrors.ErrInvalid), errors.Is(err, bolterrors.ErrChecksum),
			errors.Is(err, bolterrors.ErrVersionMismatch), errors.Is(err, bolterrors.ErrInvalidMapping):
			return nil, corruptf("%s: %v", path, err)
		}
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	return bdb, nil
}

// createFile creates the cache file at path if there is nothing there,
// never through a symbolic link: a link at the path, dangling or not, is
// refused (anyone who can write the directory could otherwise make the
// agent create or write a file wherever the link points). It reports
// whether it created the file.
func createFile(path string) (created bool, err error) {
	fi, err := os.Lstat(path)
	switch {
	case err == nil && fi.Mode()&fs.ModeSymlink != 0:
		return false, symlinkError(path)
	case err == nil:
		return false, nil
	case !errors.Is(err, fs.ErrNotExist):
		return false, fmt.Errorf("store: stat %s: %w", path, err)
	}
	f, err := safefile.CreateExcl(path, 0o600)
	switch {
	case errors.Is(err, fs.ErrExist):
		return false, nil // created meanwhile: opened as it is (a link is refused then)
	case errors.Is(err, syscall.ELOOP):
		return false, symlinkError(path)
	case err != nil:
		return false, fmt.Errorf("store: %w", err)
	}
	if err := f.Close(); err != nil {
		return false, fmt.Errorf("store: create %s: %w", path, err)
	}
	return true, nil
}

// symlinkError is the error for a symbolic link at the cache path.
func symlinkError(path string) error {
	to, err := os.Readlink(path)
	if err != nil {
		to = "?"
	}
	return fmt.Errorf("%w: %s is a symbolic link (to %s): a cache file is never opened for writing through a link; give the path of the file itself", ErrForeign, path, to)
}

// precheckFile rejects, before bbolt maps it, a file too short to hold
// bbolt's two meta pages (bbolt itself treats an empty file as new).
func precheckFile(path string) error {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("store: stat %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%w: %s is not a regular file", ErrForeign, path)
	}
	if fi.Size() > 0 && fi.Size() < 2*1024 {
		return corruptf("%s: file is %d bytes, shorter than two bbolt meta pages", path, fi.Size())
	}
	return nil
}

// init validates the meta record, or writes it into a new file. A bbolt
// panic is returned as ErrCorrupt.
func (db *DB) init() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = corruptf("%s: %v", db.path, r)
		}
	}()
	fresh, err := db.checkMeta()
	switch {
	case err != nil:
		return err
	case !fresh:
		return nil
	case db.readOnly:
		return fmt.Errorf("%w: %s is empty", ErrForeign, db.path)
	}
	now := db.clock.Now().UTC()
	err = db.bolt.Update(func(tx *bolt.Tx) error {
		m, err := tx.CreateBucketIfNotExists(bucketMeta)
		if err != nil {
			return err
		}
		if _, err := tx.CreateBucketIfNotExists(bucketInformers); err != nil {
			return err
		}
		return m.Put(keyHeader, encodeHeader(header{Version: FormatVersion, Created: now}))
	})
	if err != nil {
		return fmt.Errorf("store: initialise %s: %w", db.path, err)
	}
	db.created, db.version = now, FormatVersion
	return nil
}

// checkMeta validates the meta record and sets db.created; fresh reports a
// file without any bucket, to be initialised.
func (db *DB) checkMeta() (fresh bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			fresh, err = false, corruptf("%s: %v", db.path, r)
		}
	}()
	var hdr []byte
	var foreign bool
	err = db.bolt.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketMeta); b != nil {
			// A "meta" bucket without our header is another program's:
			// init writes the bucket and the header in one transaction.
			hdr = append([]byte{}, b.Get(keyHeader)...)
			foreign = b.Get(keyHeader) == nil
			return nil
		}
		return tx.ForEach(func([]byte, *bolt.Bucket) error {
			foreign = true
			return nil
		})
	})
	if err != nil {
		return false, fmt.Errorf("store: read meta of %s: %w", db.path, err)
	}
	switch {
	case foreign:
		return false, fmt.Errorf("%w: %s has buckets but no %q record in a %q bucket", ErrForeign, db.path, keyHeader, bucketMeta)
	case hdr == nil:
		return true, nil
	}
	h, err := decodeHeader(db.path, hdr)
	if err != nil {
		return false, err
	}
	db.created, db.version = h.Created, h.Version
	return false, nil
}

// Path returns the file's path.
func (db *DB) Path() string { return db.path }

// ReadOnly reports whether the DB was opened read-only.
func (db *DB) ReadOnly() bool { return db.readOnly }

// Created returns when the file was created.
func (db *DB) Created() time.Time { return db.created }

// Close closes the file, waiting for running transactions. Closing twice is
// not an error.
func (db *DB) Close() error {
	db.closeMu.Lock()
	defer db.closeMu.Unlock()
	if db.bolt == nil {
		return nil
	}
	err := db.bolt.Close()
	db.bolt = nil
	if err != nil {
		return fmt.Errorf("store: close %s: %w", db.path, err)
	}
	return nil
}

// Size returns the file's size in bytes.
func (db *DB) Size() (int64, error) {
	fi, err := os.Stat(db.path)
	if err != nil {
		return 0, fmt.Errorf("store: stat %s: %w", db.path, err)
	}
	return fi.Size(), nil
}

// View runs fn in a read-only transaction. A bbolt panic on a damaged page
// is returned as ErrCorrupt.
func (db *DB) View(fn func(*Tx) error) error {
	return db.withBolt("read", func(b *bolt.DB) error {
		return b.View(func(btx *bolt.Tx) error { return fn(&Tx{tx: btx}) })
	})
}

// withBolt runs fn with the open bbolt DB, holding closeMu shared, and
// turns a bbolt panic (a damaged page) into ErrCorrupt naming what it did.
func (db *DB) withBolt(what string, fn func(*bolt.DB) error) (err error) {
	db.closeMu.RLock()
	defer db.closeMu.RUnlock()
	if db.bolt == nil {
		return ErrClosed
	}
	defer func() {
		if r := recover(); r != nil {
			err = corruptf("%s: %s: %v", db.path, what, r)
		}
	}()
	return fn(db.bolt)
}

// Bolt runs fn with the underlying bbolt DB (for statistics, compaction and
// checks by cmd/inspect). fn must not write unless the DB is writable and
// must not keep db after it returns.
func (db *DB) Bolt(fn func(*bolt.DB) error) error {
	return db.withBolt("bolt", fn)
}

// update runs fn in a write transaction with the commit hook.
func (db *DB) update(fn func(*bolt.Tx) error) error {
	if db.readOnly {
		return ErrReadOnly
	}
	return db.withBolt("write", func(b *bolt.DB) error {
		return b.Update(func(btx *bolt.Tx) error {
			if err := fn(btx); err != nil {
				return err
			}
			if db.hook != nil {
				return db.hook()
			}
			return nil
		})
	})
}

// DeleteInformer removes an informer's bucket (objects, indexes and state).
// Removing an absent informer is not an error.
func (db *DB) DeleteInformer(name string) error {
	if err := db.DeleteInformers(name); err != nil && !errors.Is(err, ErrNoInformer) {
		return err
	}
	return nil
}

// DeleteInformers removes the named informers' buckets (objects, indexes,
// state and envelope snapshot) in one transaction: after a crash at any
// point the file holds all of them or none (bbolt commits a transaction
// by one meta page write). A name the file does not hold is an error
// wrapping ErrNoInformer, and nothing is removed.
func (db *DB) DeleteInformers(names ...string) error {
	err := db.update(func(tx *bolt.Tx) error {
		root := tx.Bucket(bucketInformers)
		for _, name := range names {
			if root == nil || root.Bucket([]byte(name)) == nil {
				return fmt.Errorf("%w: %q", ErrNoInformer, name)
			}
		}
		for _, name := range names {
			if err := root.DeleteBucket([]byte(name)); err != nil && !errors.Is(err, bolterrors.ErrBucketNotFound) {
				return fmt.Errorf("informer %q: %w", name, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("store: delete informers %q: %w", names, err)
	}
	return nil
}
