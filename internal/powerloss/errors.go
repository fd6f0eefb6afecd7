package powerloss

import "errors"

var (
	// ErrMalformed is wrapped by Parse's errors for a line it cannot read:
	// not strace output, or a string strace truncated (raise -s).
	ErrMalformed = errors.New("powerloss: malformed trace")
	// ErrUnsupported is wrapped by Parse's errors when the traced program
	// did something to the data file that the model does not cover (a
	// write(2) at the file offset, a shared writable mapping, a rename).
	ErrUnsupported = errors.New("powerloss: not covered by the model")
)
