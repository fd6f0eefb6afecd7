package recovery

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"k8s.io/utils/clock"

	"github.com/boltinformer/boltinformer/internal/safefile"
	"github.com/boltinformer/boltinformer/store"
)

// Copies of a file with a damaged record.
//
// A damaged record found once the file is open cannot be handled by
// renaming the file aside (its other informers use it), and the relist
// that heals it rewrites or deletes the record: a copy of the whole file
// is kept first, for a post-mortem. The same damage is found again at
// every start until a relist has healed it (a device offline for days
// restarts many times): one copy per damage is kept, not one per start.
// A damage is identified by DamageID; the copy's name carries the ids of
// the damage known when it was made, <file>.corrupt-<UTC time>-<id>-<id>
// (as many as fit a file name, up to maxNameIDs), and a later start that
// finds any of them keeps no new copy. A copy holds the whole file, so
// every damage present when it was made; a damage first found by a later
// start (one only a read finds, in Bounded mode) is not named by it and
// gets a copy of its own, within the MaxFiles bound.

// DefaultMaxFiles is CopyOptions.MaxFiles when zero.
const DefaultMaxFiles = 3

// DamageID identifies one damaged record: the informer, the record's key
// ("" for the informer's state record) and its bytes as found. Starts
// over the same damage find the same id.
func DamageID(informer, key string, raw []byte) string {
	h := sha256.New()
	h.Write([]byte(informer))
	h.Write([]byte{0})
	h.Write([]byte(key))
	h.Write([]byte{0})
	h.Write(raw)
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// CopyOptions configure KeepCopy. A nil *CopyOptions means the defaults.
type CopyOptions struct {
	// Clock names the copy. Default: the real clock.
	Clock clock.PassiveClock
	// MaxFiles bounds the disk that damage takes: no copy is made while
	// this many files named <file>.corrupt-* (copies and quarantined
	// files) lie beside the cache file. Zero means DefaultMaxFiles;
	// negative means no copies at all.
	MaxFiles int
}

// Copy says what KeepCopy did.
type Copy struct {
	// Path is the copy that holds the damage: made now (Written) or by an
	// earlier start. "" when none is kept (Skipped says why).
	Path    string
	Written bool
	Skipped string
}

// maxNameIDs bounds the damage ids a copy's name carries, and maxNameLen
// its length (file systems allow 255 bytes).
const (
	maxNameIDs = 8
	maxNameLen = 240
)

// errNoRoom stops a copy that would take too much of the free space.
var errNoRoom = errors.New("recovery: not enough free space for a copy")

// KeepCopy keeps a consistent copy of db's file for the damage ids (see
// DamageID; at least one), unless a copy named for one of them lies
// beside the file already (a regular file: a link is no copy), the
// MaxFiles bound is reached, or the copy would take more than half of the
// file system's free space (the cache's own commits need it). The copy is
// written under a temporary name (<copy>.tmp), created exclusively, never
// through a link, fsync'd, then renamed without replacing anything, and
// the directory fsync'd (store.DB.CopyFile, safefile). Not making a copy
// is not an error.
func KeepCopy(db *store.DB, ids []string, opts *CopyOptions) (Copy, error) {
	o := CopyOptions{}
	if opts != nil {
		o = *opts
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.MaxFiles == 0 {
		o.MaxFiles = DefaultMaxFiles
	}
	if len(ids) == 0 {
		return Copy{}, errors.New("recovery: a copy needs the id of its damage")
	}
	ids = slices.Sorted(slices.Values(ids))
	path := db.Path()
	dir, prefix := filepath.Dir(path), filepath.Base(path)+".corrupt-"
	entries, err := os.ReadDir(dir)
	if err != nil {
		return Copy{}, fmt.Errorf("recovery: list copies of %s: %w", path, err)
	}
	files := 0
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, prefix) || !e.Type().IsRegular() {
			continue
		}
		files++
		named := strings.Split(strings.TrimPrefix(name, prefix), "-")[1:] // after the time
		for _, id := range ids {
			if slices.Contains(named, id) {
				return Copy{Path: filepath.Join(dir, name)}, nil
			}
		}
	}
	switch {
	case o.MaxFiles < 0:
		return Copy{Skipped: "copies are disabled"}, nil
	case files >= o.MaxFiles:
		return Copy{Skipped: fmt.Sprintf("%d files %s* lie beside the cache file already (the bound is %d): remove those no longer needed", files, prefix, o.MaxFiles)}, nil
	}
	fits := func(size int64) error {
		if free, ok := safefile.FreeBytes(dir); ok && uint64(size) > free/2 {
			return fmt.Errorf("%w: the copy takes %d bytes, the file system has %d free", errNoRoom, size, free)
		}
		return nil
	}
	stamp := o.Clock.Now().UTC().Format(stampLayout)
	for i := 0; i <= maxNameTries; i++ {
		name := prefix + stamp
		if i > 0 {
			name += fmt.Sprintf(".%d", i)
		}
		for j, id := range ids {
			if j == maxNameIDs || len(name)+1+len(id) > maxNameLen && j > 0 {
				break
			}
			name += "-" + id
		}
		aside := filepath.Join(dir, name)
		// Written under a temporary name, so that the copy's name (which
		// stops further copies of its damage) never names a partial copy.
		tmp := aside + ".tmp"
		err := db.CopyFile(tmp, fits)
		if err == nil {
			if err = safefile.RenameNoReplace(tmp, aside); err != nil {
				_ = os.Remove(tmp)
			}
		}
		switch {
		case errors.Is(err, fs.ErrExist):
			continue
		case errors.Is(err, errNoRoom):
			return Copy{Skipped: err.Error()}, nil
		case err != nil:
			return Copy{}, fmt.Errorf("recovery: %w", err)
		}
		if err := safefile.SyncDir(dir); err != nil {
			return Copy{Path: aside, Written: true}, fmt.Errorf("recovery: %w", err)
		}
		return Copy{Path: aside, Written: true}, nil
	}
	return Copy{}, fmt.Errorf("recovery: no free name for a copy of %s", path)
}
