package recovery

import "errors"

// ErrQuarantined marks a Report whose file was quarantined.
var ErrQuarantined = errors.New("recovery: cache file quarantined")
