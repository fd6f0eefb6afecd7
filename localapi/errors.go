package localapi

import "errors"

var (
	// ErrUnsafePath means a listener's path is not something localapi
	// created or may replace (a symlink, a regular file, a directory).
	ErrUnsafePath = errors.New("localapi: unsafe socket path")
	// ErrInUse means another process serves on the socket path.
	ErrInUse = errors.New("localapi: socket in use")
	// ErrToken means the bearer token file (or the TLS key or
	// certificate) is missing, empty, or not to be trusted: another
	// user's, readable or writable by others, or in a directory another
	// user owns or may write (see LoadOrCreateToken).
	ErrToken = errors.New("localapi: bad token file")
	// ErrNoResource means a resource could not be described (no kind or
	// resource name could be derived for an informer).
	ErrNoResource = errors.New("localapi: cannot describe resource")
	// ErrClosed means the handler was closed.
	ErrClosed = errors.New("localapi: handler closed")
)
