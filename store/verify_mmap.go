//go:build linux || darwin || freebsd || netbsd || openbsd

package store

import (
	"os"
	"syscall"
)

// mapFile maps f read-only for the page verifier, which then reads pages
// in place instead of copying them with pread: a warm start touches only
// the pages' headers and element tables, not the values. It returns nil
// when the file cannot be mapped (the verifier falls back to reads).
func mapFile(f *os.File, size uint64) (data []byte, unmap func()) {
	if size == 0 || size != uint64(int(size)) {
		return nil, func() {}
	}
	b, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED|mapPopulate)
	if err != nil {
		return nil, func() {}
	}
	return b, func() { _ = syscall.Munmap(b) }
}
