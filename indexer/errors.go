package indexer

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/util/sets"
)

var (
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
