package safefile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// ErrUntrusted is wrapped by the errors of OpenTrusted and CheckDir: a
// file or directory that another user may have planted, replaced or
// read.
var ErrUntrusted = errors.New("safefile: untrusted file")

// UntrustedError says which file or directory is not trusted, and why.
type UntrustedError struct {
	Path   string
	Reason string
}

func (e *UntrustedError) Error() string { return e.Path + ": " + e.Reason }

// Is makes errors.Is(err, ErrUntrusted) true.
func (e *UntrustedError) Is(target error) bool { return target == ErrUntrusted }

func untrusted(path, format string, args ...any) error {
	return &UntrustedError{Path: path, Reason: fmt.Sprintf(format, args...)}
}

// OpenTrusted opens path for reading when it may be trusted, as ssh trusts
// its key files (StrictModes): a regular file, not a symbolic link, owned
// by this process's user (its effective uid) or root, that group and
// others cannot write (nor read, when secret), in a directory that passes
// CheckDir. The error names the path and the reason (an
// *UntrustedError, wrapping ErrUntrusted). Where the platform has no
// owners and modes, only the file's type is checked.
func OpenTrusted(path string, secret bool) (*os.File, error) {
	f, err := openNoFollow(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err == nil {
		err = trustedFile(path, st, secret)
	}
	if err == nil {
		err = CheckDir(filepath.Dir(path))
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// ReadTrusted is OpenTrusted, then the whole file.
func ReadTrusted(path string, secret bool) ([]byte, error) {
	f, err := OpenTrusted(path, secret)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// CheckDir checks that the existing directory dir may hold files to
// trust: owned by this process's user or root and writable by no one
// else (others could replace what it holds), and every directory above
// it, after resolving symbolic links, likewise, but that a directory
// above it may be writable by others when it is sticky (/tmp: others
// cannot remove or rename what is not theirs). The error names the
// directory and the reason.
func CheckDir(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return err
	}
	for d, first := real, true; ; d, first = filepath.Dir(d), false {
		st, err := os.Lstat(d)
		if err != nil {
			return err
		}
		name := d
		if d != abs {
			name = fmt.Sprintf("%s (of %s)", d, abs)
		}
		if !st.IsDir() {
			return untrusted(name, "not a directory")
		}
		if err := trustedDir(name, st, first); err != nil {
			return err
		}
		if parent := filepath.Dir(d); parent == d {
			return nil
		}
	}
}
