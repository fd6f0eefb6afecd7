package indexer

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/util/sets"
)

var (
	// ErrIndexFunc is wrapped by the error of a write (Add, Update,
	// Replace, Patch, Transaction) when an index function failed on an
	// object: the object is stored nonetheless, with no values in that
	// index (client-go's indexer panics instead). Each failure is an
	// *IndexFuncError; a write with several returns them joined.
	// AddIndexers is the exception: it refuses the new indexes (see it).
	ErrIndexFunc = errors.New("indexer: index function failed")
	// ErrClosed means the indexer was used after Close.
	ErrClosed = errors.New("indexer: closed")
	// ErrIndexConflict means AddIndexers named an index that exists.
	ErrIndexConflict = errors.New("indexer: indexer conflict")
	// ErrNoIndex means a query named an index that does not exist.
	ErrNoIndex = errors.New("indexer: index does not exist")
	// ErrEncryptionKey means the keyring given (or its absence) does not
	// open the payloads the file holds for the informer: a key id the
	// keyring lacks, a key that is not the one they were sealed with, or
	// sealed payloads and no keyring. A configuration error, not damage:
	// Open leaves the file untouched.
	ErrEncryptionKey = errors.New("indexer: the keyring does not open the cache file's sealed payloads")
	// ErrNotPersisted means the indexer holds objects it cannot write to
	// the file (a transform returned a type its codec cannot encode, or
	// an encoding failed): they are served from memory, and the indexer
	// commits nothing more until they are deleted or replaced, so that its
	// saved resourceVersion never passes an object it did not write.
	ErrNotPersisted = errors.New("indexer: objects cannot be persisted")
	// ErrHeld is wrapped by Flush's error while the indexer's commits are
	// held (Hold): what it applied is in memory only, and the file stays
	// at its saved state, on purpose.
	ErrHeld = errors.New("indexer: commits held")
	// ErrNotKept means the deletes asked for are not all kept in the file
	// (they are kept from a later resourceVersion, or not at all):
	// Deletes cannot say what was deleted.
	ErrNotKept = errors.New("indexer: deletes not kept that far back")
)

// clientGoError is an error whose text is client-go's indexer's, word for
// word (callers match it), wrapping the sentinel to branch on.
type clientGoError struct {
	text     string
	sentinel error
}

func (e *clientGoError) Error() string { return e.text }
func (e *clientGoError) Unwrap() error { return e.sentinel }

// errNoIndex is a query's error for an index that does not exist.
func errNoIndex(name string) error {
	return &clientGoError{fmt.Sprintf("Index with name %s does not exist", name), ErrNoIndex}
}

// errIndexConflict is AddIndexers' error for names that exist.
func errIndexConflict(names []string) error {
	return &clientGoError{fmt.Sprintf("indexer conflict: %v", sets.New(names...)), ErrIndexConflict}
}

// IndexFuncError is one index function's failure on one object, which was
// stored without values in that index. It wraps ErrIndexFunc and the
// function's error.
type IndexFuncError struct {
	// Key is the object's key, Index the index's name.
	Key, Index string
	// Err is the index function's error.
	Err error
}

// Error says what failed, in client-go's words (its indexer panics with
// them), and what was done.
func (e *IndexFuncError) Error() string {
	return fmt.Sprintf("indexer: unable to calculate an index entry for key %q on index %q: %v (stored without values for that index)", e.Key, e.Index, e.Err)
}

// Unwrap returns ErrIndexFunc and the index function's error.
func (e *IndexFuncError) Unwrap() []error { return []error{ErrIndexFunc, e.Err} }

// Refused reports whether err, returned by a write, says that an object
// was not stored: true for every error but index function errors (which
// store the object) and nil.
func Refused(err error) bool {
	switch e := err.(type) {
	case nil:
		return false
	case *IndexFuncError:
		return false
	case interface{ Unwrap() []error }:
		for _, inner := range e.Unwrap() {
			if Refused(inner) {
				return true
			}
		}
		return false
	case interface{ Unwrap() error }:
		if inner := e.Unwrap(); inner != nil {
			return Refused(inner)
		}
	}
	return true
}

// IndexFuncErrors returns the index function errors err holds (joined or
// wrapped), in order.
func IndexFuncErrors(err error) []*IndexFuncError {
	var out []*IndexFuncError
	var walk func(error)
	walk = func(err error) {
		switch e := err.(type) {
		case nil:
		case *IndexFuncError:
			out = append(out, e)
		case interface{ Unwrap() []error }:
			for _, inner := range e.Unwrap() {
				walk(inner)
			}
		case interface{ Unwrap() error }:
			walk(e.Unwrap())
		}
	}
	walk(err)
	return out
}
