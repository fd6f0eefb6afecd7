package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/boltinformer/boltinformer/internal/safefile"
)

// A file's fsync makes its data and size durable, not its name: "Calling
// fsync() does not necessarily ensure that the entry in the directory
// containing the file has also reached disk. For that an explicit fsync()
// on a file descriptor for the directory is also needed" (fsync(2)). So
// Open, when it creates the cache file (or its directories), fsyncs the
// directories that gained an entry before it returns: otherwise a power
// loss could take away a new file with every commit acknowledged in it.
// TestPowerLoss (recovery) found this; docs/RELIABILITY.md 8.7.

// missingDirs returns dir and those of its ancestors that do not exist,
// from the top down.
func missingDirs(dir string) []string {
	var out []string
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
			break
		}
		out = append([]string{d}, out...)
		if filepath.Dir(d) == d {
			break
		}
	}
	return out
}

// syncCreated makes the entries Open created durable: the new file's in
// its directory (where a symlink at path points, if it is one), and each
// new directory's in its parent.
func syncCreated(path string, newFile bool, newDirs []string) error {
	var dirs []string
	for _, d := range newDirs {
		dirs = append(dirs, filepath.Dir(d))
	}
	if newFile {
		real, err := filepath.EvalSymlinks(path)
		if err != nil {
			return fmt.Errorf("store: sync the directory of %s: %w", path, err)
		}
		dirs = append(dirs, filepath.Dir(real))
	}
	for _, d := range dirs {
		if err := syncDir(d); err != nil {
			return fmt.Errorf("store: sync the directory entry of new %s: %w", path, err)
		}
	}
	return nil
}

// syncDir fsyncs a directory (safefile.SyncDir: a no-op where directories
// cannot be fsync'd, as on Windows, whose NTFS journals its directory
// entries).
func syncDir(dir string) error { return safefile.SyncDir(dir) }
