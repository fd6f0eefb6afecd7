package store

import "syscall"

// mapPopulate prefaults the verifier's map in one call (Linux): cheaper
// than a fault for every page header the walk touches.
const mapPopulate = syscall.MAP_POPULATE
