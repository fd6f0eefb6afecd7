//go:build !unix

package safefile

const noFollow = 0

// syncDir: directories cannot be fsync'd here.
func syncDir(string) error { return nil }
