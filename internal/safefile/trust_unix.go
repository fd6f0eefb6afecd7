//go:build unix

package safefile

import (
	"errors"
	"io/fs"
	"os"
	"syscall"
)

// openNoFollow opens path for reading, refusing a symbolic link, and
// without blocking on a FIFO.
func openNoFollow(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, untrusted(path, "a symbolic link: give the file itself")
	}
	return f, err
}

// owner returns the uid that owns st.
func owner(st fs.FileInfo) (uint32, bool) {
	s, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return s.Uid, true
}

// trustedOwner checks that st belongs to this process's user or root.
func trustedOwner(path string, st fs.FileInfo) error {
	uid, ok := owner(st)
	if !ok {
		return nil
	}
	if euid := uint32(os.Geteuid()); uid != euid && uid != 0 {
		return untrusted(path, "owned by uid %d, not by this process's user (uid %d) or root", uid, euid)
	}
	return nil
}

func trustedFile(path string, st fs.FileInfo, secret bool) error {
	if !st.Mode().IsRegular() {
		return untrusted(path, "not a regular file (%s)", st.Mode().Type())
	}
	if err := trustedOwner(path, st); err != nil {
		return err
	}
	perm := st.Mode().Perm()
	if perm&0o022 != 0 {
		return untrusted(path, "mode %04o: group or others may write it (chmod go-w %s)", perm, path)
	}
	if secret && perm&0o077 != 0 {
		return untrusted(path, "mode %04o: group or others may read it (chmod 600 %s)", perm, path)
	}
	return nil
}

// trustedDir checks one directory: the file's own (first) may be written
// by its owner only; one above it also by others when sticky.
func trustedDir(path string, st fs.FileInfo, first bool) error {
	if err := trustedOwner(path, st); err != nil {
		return err
	}
	perm := st.Mode().Perm()
	if perm&0o022 == 0 || (!first && st.Mode()&fs.ModeSticky != 0) {
		return nil
	}
	return untrusted(path, "directory mode %04o: group or others may write it, and replace what it holds (chmod go-w %s)", perm, path)
}
