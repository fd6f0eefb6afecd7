package store

import (
	"math/bits"
	"os"
)

// defaultMmapReserve is the address space a 64-bit process maps for a file
// when Options.InitialMmapSize is zero.
const defaultMmapReserve = 1 << 30

// initialMmapSize is the InitialMmapSize given to bbolt. bbolt maps the file
// at twice its size at most up to 1 GiB and remaps whenever a transaction
// needs more; every remap dereferences (copies out of the map) each node the
// write transaction holds, which is most of a large commit's CPU while the
// file grows. Mapping more than the file costs address space only (no
// memory, no disk), so on 64-bit the default is the larger of 1 GiB and
// twice the file's size, as etcd maps 10 GiB up front. On 32-bit, or when
// the caller chose a size (negative means bbolt's own default), the choice
// is left alone.
func initialMmapSize(requested int, path string) int {
	switch {
	case requested > 0:
		return requested
	case requested < 0 || bits.UintSize < 64:
		return 0
	}
	size := defaultMmapReserve
	if fi, err := os.Stat(path); err == nil && fi.Size() > int64(size)/2 {
		size = int(2 * fi.Size())
	}
	return size
}
