package processor

import "errors"

// ErrInvalidRegistration is returned by RemoveListener for a registration that
// is nil or was not returned by AddListener of this package. Removing a
// *Listener that was already removed, or that belongs to another Processor,
// is not an error (client-go's RemoveEventHandler is idempotent).
var ErrInvalidRegistration = errors.New("processor: registration was not returned by AddListener")
