package store

import (
	"fmt"
	"os"
	"path/filepath"

	bolt "go.etcd.io/bbolt"

	"github.com/boltinformer/boltinformer/internal/safefile"
)

// CopyFile writes a consistent copy of the file, as of one read
// transaction, to path: a new file (never an existing one, never through
// a symbolic link: the error then wraps fs.ErrExist or syscall.ELOOP) of
// mode 0600, fsync'd, and its directory entry fsync'd too. fits, when
// set, is given the copy's size before anything is created, and its error
// stops the copy. A copy that could not be written is removed. (bbolt's Tx.CopyFile opens
// with O_CREATE|O_TRUNC, which follows a link planted at the name.)
func (db *DB) CopyFile(path string, fits func(size int64) error) error {
	err := db.withBolt("copy", func(b *bolt.DB) error {
		return b.View(func(tx *bolt.Tx) error {
			if fits != nil {
				if err := fits(tx.Size()); err != nil {
					return err
				}
			}
			f, err := safefile.CreateExcl(path, 0o600)
			if err != nil {
				return err
			}
			_, err = tx.WriteTo(f)
			if err == nil {
				err = f.Sync()
			}
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				_ = os.Remove(path) // ours: created exclusively above
				return err
			}
			return safefile.SyncDir(filepath.Dir(path))
		})
	})
	if err != nil {
		return fmt.Errorf("store: copy %s to %s: %w", db.path, path, err)
	}
	return nil
}
