package store

import (
	"errors"
	"fmt"
)

// Sentinel errors that callers branch on. Every error returned by this
// package that has one of these causes wraps it, so use errors.Is.
var (
	// ErrLocked means another process (or another DB in this process) holds
	// the file lock and it was not released within Options.Timeout.
	ErrLocked = errors.New("store: cache file is locked by another process")

	// ErrCorrupt means the file or one of its records is damaged: bbolt
	// rejected it, a page could not be read, a checksum did not match or a
	// record did not decode.
	ErrCorrupt = errors.New("store: cache file is corrupt")

	// ErrForeign means the file is a bbolt file (or another file) that was
	// not written by boltinformer.
	ErrForeign = errors.New("store: not a boltinformer cache file")

	// ErrUnsupportedVersion means the file's format version is not one this
	// build can read. The file is left untouched. See *VersionError.
	ErrUnsupportedVersion = errors.New("store: unsupported format version")

	// ErrReadOnly means a write was attempted on a DB opened read-only.
	ErrReadOnly = errors.New("store: cache file is open read-only")

	// ErrClosed means the DB (or committer) was used after Close.
	ErrClosed = errors.New("store: cache file is closed")

	// ErrNoInformer means the file holds no informer of that name.
	ErrNoInformer = errors.New("store: no such informer in the cache file")

	// ErrInvalidName means an informer or index name cannot be stored.
	ErrInvalidName = errors.New("store: invalid informer or index name")
)

// VersionError reports a file whose format version this build does not
// support. It wraps ErrUnsupportedVersion.
type VersionError struct {
	Path      string
	Found     uint32
	Supported uint32
}

// Error implements error.
func (e *VersionError) Error() string {
	if e.Found > e.Supported {
		return fmt.Sprintf("store: %s: format version %d is newer than supported %d", e.Path, e.Found, e.Supported)
	}
	if e.Found >= minMigratable {
		return fmt.Sprintf("store: %s: format version %d is older than %d: open it read-write to migrate it", e.Path, e.Found, e.Supported)
	}
	return fmt.Sprintf("store: %s: format version %d is not supported (this build reads %d)", e.Path, e.Found, e.Supported)
}

// Unwrap returns ErrUnsupportedVersion.
func (e *VersionError) Unwrap() error { return ErrUnsupportedVersion }

// corruptf returns an error wrapping ErrCorrupt.
func corruptf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}
