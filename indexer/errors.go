package indexer

import "errors"

var (
	// ErrClosed means the indexer was used after Close.
	ErrClosed = errors.New("indexer: closed")
	// ErrIndexConflict means AddIndexers named an index that exists.
	ErrIndexConflict = errors.New("indexer: indexer conflict")
	// ErrNoIndex means a query named an index that does not exist.
	ErrNoIndex = errors.New("indexer: index does not exist")
)
