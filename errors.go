package boltinformer

import (
	"errors"
	"fmt"

	"github.com/boltinformer/boltinformer/indexer"
	"github.com/boltinformer/boltinformer/store"
)

var (
	// ErrStarted means an operation that must precede Run came after it.
	ErrStarted = errors.New("boltinformer: informer has already started")
	// ErrStopped means the informer has stopped.
	ErrStopped = errors.New("boltinformer: informer has stopped")
	// ErrInformerExists means the DB already has an informer of that name.
	ErrInformerExists = errors.New("boltinformer: informer name already in use")
	// ErrApply is wrapped by the *ApplyError an informer reports (to its
	// watch error handler, Health and the log) when it could not apply
	// objects as received: an index function failed (the object is
	// stored without that index's values and delivered; the error also
	// wraps ErrIndexFunc), or the cache refused the object (not stored,
	// not delivered).
	ErrApply = errors.New("boltinformer: objects not applied as received")
	// ErrIndexFunc is wrapped by an *ApplyError (and the indexer's write
	// errors) when an index function failed on an object: the object is
	// stored without values in that index. Each failure an ApplyError
	// carries is an *IndexFuncError, naming the object and the index. It
	// is indexer.ErrIndexFunc.
	ErrIndexFunc = indexer.ErrIndexFunc
	// ErrLocked is wrapped by Open's error when another process holds the
	// file's lock for longer than Options.LockTimeout. It is
	// store.ErrLocked.
	ErrLocked = store.ErrLocked
	// ErrForeign is wrapped by Open's error when the path is not a
	// boltinformer cache file (another bbolt file, a symbolic link, not a
	// bbolt file and not empty): it is never quarantined nor overwritten.
	// It is store.ErrForeign.
	ErrForeign = store.ErrForeign
	// ErrUnsupportedVersion is wrapped by Open's error when the file's
	// format version is newer than this library reads (never quarantined:
	// a newer agent wrote it). It is store.ErrUnsupportedVersion.
	ErrUnsupportedVersion = store.ErrUnsupportedVersion
	// ErrCorrupt is wrapped by Open's error for a damaged file with
	// Options.FailOnCorrupt (without it the file is quarantined and a new
	// one started), and by NewInformer's for a damaged record with
	// FailOnCorrupt; a damaged record read later (Get, or a Bounded
	// informer's miss) wraps it too. It is store.ErrCorrupt.
	ErrCorrupt = store.ErrCorrupt
	// ErrNotPersisted is wrapped by Informer.Flush's and DB.Close's errors
	// while an informer holds objects it cannot write to the file (a
	// transform returned a type no scheme knows, see
	// InformerOptions.Scheme): they are served from memory, and the file
	// stays at the last resourceVersion whose objects it holds
	// (Health.NotPersisted says which). It is indexer.ErrNotPersisted.
	ErrNotPersisted = indexer.ErrNotPersisted
	// ErrCommitsHeld is wrapped by Informer.Flush's error while a warm
	// start with ReplayDownDeletes holds its commits until it is fresh
	// (Health.CommitsHeld): the file stays at its saved resourceVersion on
	// purpose. It is indexer.ErrHeld.
	ErrCommitsHeld = indexer.ErrHeld
	// ErrNoInformer means the cache file holds no informer of that name
	// (DB.DropInformers). It is store.ErrNoInformer.
	ErrNoInformer = store.ErrNoInformer
	// ErrClosed means the DB was used after Close.
	ErrClosed = errors.New("boltinformer: DB is closed")
	// ErrEncryptionKey means an informer's Keyring (or its absence) does
	// not open the payloads the file holds for it: a key id the keyring
	// lacks, a wrong key under the right id, or sealed payloads and no
	// keyring. A configuration error: NewInformer returns it and leaves the
	// file untouched (no copy, no cold start). It is indexer.ErrEncryptionKey.
	ErrEncryptionKey = indexer.ErrEncryptionKey
	// ErrClusterIdentity means NewFactory could not establish the cluster
	// identity and the server was reachable (so the start is not offline):
	// the kube-system lookup got an answer that is not the namespace (401,
	// 403, 404, 5xx after retries) or a certificate the config does not
	// trust. Set FactoryOptions.ClusterID, grant the read, or use
	// IdentityEndpoint.
	ErrClusterIdentity = errors.New("boltinformer: cluster identity not established")
)

// clientGoError is an error whose text is client-go's, word for word
// (callers match it), wrapping the sentinel callers of this package branch
// on with errors.Is.
type clientGoError struct {
	text     string
	sentinel error
}

func (e *clientGoError) Error() string { return e.text }
func (e *clientGoError) Unwrap() error { return e.sentinel }

// errHandlerNotAdded is AddEventHandler's error on a stopped informer.
func errHandlerNotAdded(handler any) error {
	return &clientGoError{fmt.Sprintf("handler %v was not added to shared informer because it has stopped already", handler), ErrStopped}
}

// errIndexerNotAdded is AddIndexers' error on a stopped informer.
var errIndexerNotAdded = &clientGoError{"indexer was not added because it has stopped already", ErrStopped}

// errAlreadyStarted is the error of a setter that must precede Run.
var errAlreadyStarted = &clientGoError{"informer has already started", ErrStarted}

// errRunTwice is start's error for a second Run (logged with client-go's
// warning).
var errRunTwice = fmt.Errorf("%w: Run more than once is not allowed", ErrStarted)
