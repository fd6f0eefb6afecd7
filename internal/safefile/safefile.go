// Package safefile creates and renames the files boltinformer writes
// beside a cache file (copies kept for a post-mortem, quarantined files,
// the cache file itself) without following symbolic links and without
// overwriting anything, and makes their directory entries durable.
//
// Anyone who can write the cache's directory can plant a link at a name
// the library is about to create; a create that follows it (O_CREAT
// without O_EXCL) writes wherever the link points, with the agent's
// rights. Every create here is O_CREAT|O_EXCL|O_NOFOLLOW, so a planted
// link (dangling or not) makes it fail instead. A new directory entry (a
// created or renamed file) survives power loss only once its directory is
// fsync'd (bbolt and etcd document the same): SyncDir does it.
package safefile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync/atomic"
)

// NoFollow is the open flag that refuses a symbolic link as the last
// component of a path (O_NOFOLLOW), or 0 where the platform has none.
const NoFollow = noFollow

// Hooks observe this package's operations (tests only).
type Hooks struct {
	// BeforeCreate is called with the path CreateExcl is about to create.
	BeforeCreate func(path string)
	// SyncedDir is called with each directory SyncDir fsync'd.
	SyncedDir func(dir string)
	// Renamed is called after RenameNoReplace renamed oldpath to newpath.
	Renamed func(oldpath, newpath string)
}

var hooks atomic.Pointer[Hooks]

// SetHooks installs h until the returned function is called (tests only;
// not for concurrent tests).
func SetHooks(h Hooks) (restore func()) {
	old := hooks.Swap(&h)
	return func() { hooks.Store(old) }
}

// CreateExcl creates path for writing with perm: never an existing file,
// never through a symbolic link (the error then wraps fs.ErrExist, or
// syscall.ELOOP). The caller owns the file and closes it.
func CreateExcl(path string, perm os.FileMode) (*os.File, error) {
	if h := hooks.Load(); h != nil && h.BeforeCreate != nil {
		h.BeforeCreate(path)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL|NoFollow, perm)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	return f, nil
}

// SyncDir fsyncs directory dir, making the entries created, renamed or
// removed in it durable. Where the platform cannot fsync a directory it
// does nothing.
func SyncDir(dir string) error {
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	if h := hooks.Load(); h != nil && h.SyncedDir != nil {
		h.SyncedDir(dir)
	}
	return nil
}

// RenameNoReplace renames oldpath to newpath, failing with an error
// wrapping fs.ErrExist if newpath exists (a symbolic link included: it is
// never followed). Where the platform has no atomic no-replace rename, a
// check precedes the rename (a race with another creator of newpath can
// then replace that entry, never what a link at newpath points to).
func RenameNoReplace(oldpath, newpath string) error {
	if err := renameNoReplace(oldpath, newpath); err != nil {
		return fmt.Errorf("rename %s to %s: %w", oldpath, newpath, err)
	}
	if h := hooks.Load(); h != nil && h.Renamed != nil {
		h.Renamed(oldpath, newpath)
	}
	return nil
}

// renameChecked is the portable fallback of renameNoReplace.
func renameChecked(oldpath, newpath string) error {
	if _, err := os.Lstat(newpath); err == nil {
		return fs.ErrExist
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return os.Rename(oldpath, newpath)
}
