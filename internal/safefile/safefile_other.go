//go:build !linux

package safefile

// renameNoReplace: no atomic no-replace rename used here.
func renameNoReplace(oldpath, newpath string) error { return renameChecked(oldpath, newpath) }

// FreeBytes: not looked up on this platform.
func FreeBytes(string) (uint64, bool) { return 0, false }
