package boltinformer

import "errors"

var (
	// ErrStarted means an operation that must precede Run came after it.
	ErrStarted = errors.New("boltinformer: informer has already started")
	// ErrStopped means the informer has stopped.
	ErrStopped = errors.New("boltinformer: informer has stopped")
	// ErrInformerExists means the DB already has an informer of that name.
	ErrInformerExists = errors.New("boltinformer: informer name already in use")
	// ErrClosed means the DB was used after Close.
	ErrClosed = errors.New("boltinformer: DB is closed")
)
