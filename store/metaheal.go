package store

import (
	"os"

	bolt "go.etcd.io/bbolt"
)

// A power loss while bbolt writes a meta page can leave that page invalid:
// garbage where the write did not land (a device that does not write a
// sector atomically, or stale blocks). bbolt then uses the other meta page,
// the last commit, and its next commit rewrites the invalid one. Until
// then bbolt's Tx.Check, which reads both meta pages as pages of their own
// id, panics on it, and Check reports ErrCorrupt: an agent with
// Options.Verify quarantined a file that held exactly its last commit, and
// `inspect check` called it corrupt. So a read-write Open rewrites an
// invalid meta page at once, with an empty commit: it writes the meta slot
// of the next transaction id, which is the invalid one. TestPowerLoss
// found this (its garbage states); docs/RELIABILITY.md 8.7.

// invalidMeta reports whether exactly one of the two meta pages of the
// file at path is invalid.
func invalidMeta(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return false
	}
	v := &pageVerifier{f: f, size: uint64(fi.Size())}
	if _, err := v.readMeta(); err != nil {
		return false
	}
	_, ok0 := v.metaAt(0)
	_, ok1 := v.metaAt(v.ps)
	return ok0 != ok1
}

// healMeta rewrites an invalid meta page with an empty commit. Its error
// is not Open's: the file is sound, and the next commit writes the same
// page (or fails and is reported then).
func healMeta(bdb *bolt.DB) {
	_ = bdb.Update(func(*bolt.Tx) error { return nil })
}
