package reflector

import "errors"

// ErrNoResume means the ListerWatcher was asked for a disk answer it does
// not have (a programming error).
var ErrNoResume = errors.New("reflector: no resume state")
