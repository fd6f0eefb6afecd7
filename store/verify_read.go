//go:build !(linux || darwin || freebsd || netbsd || openbsd)

package store

import "os"

// mapFile: no memory map on this platform; the verifier reads pages.
func mapFile(*os.File, uint64) ([]byte, func()) { return nil, func() {} }
