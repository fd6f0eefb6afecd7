package indexer

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/api/meta"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	clientgofeaturegate "k8s.io/client-go/features"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/lru"

	"github.com/boltinformer/boltinformer/internal/codec"
	"github.com/boltinformer/boltinformer/store"
)

// Mode selects what the indexer keeps in memory.
type Mode int

const (
	// Full keeps every decoded object in memory: reads never touch the
	// file, once the objects of a warm load are decoded (at first access,
	// or by the background fill: see Decoded).
	Full Mode = iota
	// Bounded keeps only keys, index sets and an LRU of decoded objects; a
	// miss decodes from the file.
	Bounded
)

// DefaultCacheSize is the number of decoded objects a Bounded indexer keeps
// when Options.CacheSize is zero.
const DefaultCacheSize = 1024

// Options configure Open. Example is required.
type Options struct {
	// Example is an object of the informer's type (e.g. &corev1.Pod{}, or
	// &unstructured.Unstructured{} for CRDs); it selects the payload codec.
	Example any
	// Mode is Full (default) or Bounded.
	Mode Mode
	// CacheSize bounds the decoded objects of a Bounded indexer; 0 means
	// DefaultCacheSize.
	CacheSize int
	// KeyFunc makes the store key. Default: cache.DeletionHandlingMetaNamespaceKeyFunc.
	KeyFunc cache.KeyFunc
	// Keyring, when set, encrypts payloads at rest (AES-GCM). A warm load
	// checks it against the file: a payload sealed with a key id it lacks
	// or with another key (or a sealed payload and no keyring) makes Open
	// fail with ErrEncryptionKey, leaving the file untouched; records of
	// another key id than Current (plaintext records included, and sealed
	// ones when Current is "") are rewritten with Current in the file
	// before Open returns.
	Keyring *codec.Keyring
	// ForceJSON stores typed objects as JSON instead of protobuf.
	ForceJSON bool
	// Committer is the group-commit loop to write through (shared among the
	// informers of one file). Nil: the indexer runs its own until Close.
	Committer *store.Committer
	// CommitterOptions configure the indexer's own committer.
	CommitterOptions *store.CommitterOptions
	// Fresh ignores what the file holds for this informer: the indexer
	// starts empty and the old data is replaced only when the first Replace
	// (a complete list) commits (a cold start).
	Fresh bool
	// Identity fills the identity fields of the state record (ClusterID,
	// Resource, ListOptions, Transform); the rest is the indexer's.
	Identity store.State
	// Logger is used for errors that have no caller to return to; the
	// indexer adds the key "informer" (its name) to it, so it must not
	// have that key already.
	Logger *klog.Logger
	// OnUndecodable, when set, is called (outside the indexer's lock, from
	// whichever goroutine found them) with the number of objects loaded
	// from the file that were just found not to decode: their checksums
	// hold but their payloads do not decode (a writer's bug or a crafted
	// file). They are left out of List until a write replaces them; the
	// informer relists.
	OnUndecodable func(n int)
	// Transform, when set, is applied to every object the indexer stores
	// (Add, Update, Replace, and the adds and updates of a Transaction),
	// before it is indexed and written, like client-go's
	// cache.WithTransformer: the key is the untransformed object's, and an
	// error refuses the object (Replace: the whole list, changing nothing)
	// with "transforming: <err>". Deletions are not transformed. Objects
	// are stored after it, so a file saved with another transform holds
	// other objects: put its fingerprint in Identity.Transform (the
	// informer's recovery.Decide compares it). Unlike client-go's store,
	// whose Transaction skips the transform, every object stored here has
	// passed it. A warm load does not run it (the stored objects did).
	Transform cache.TransformFunc
	// Scheme resolves the kinds of objects of other types than Example's
	// (what a transform returns, e.g. *metav1.PartialObjectMetadata), which
	// are stored with their kind. Default: client-go's scheme (the
	// meta.k8s.io/v1 types are always known).
	Scheme *kruntime.Scheme
	// VerifyRecords makes a Full warm load read and verify every record
	// even when the file has an envelope snapshot of the informer (see
	// load), and makes a damaged record (one that fails its checksum or
	// does not decode) an error of Open in both modes. Without it, the
	// load leaves such a record out (undecodable, reported through
	// OnUndecodable) and serves the others. Bounded mode always reads the
	// records.
	VerifyRecords bool
}

// item is what memory holds per key. Guarded by Indexer.mu.
type item struct {
	rv, uid  string
	vals     [][]string // index values, aligned with indexSet.names
	valNames []string   // the names vals is aligned with
	// lazy: loaded from the file and not decoded yet (Full mode, lazy.go).
	lazy bool
	// unchecked: vals are as loaded from the file, not yet compared with
	// the index functions' values for the object (verify.go). A lazy item
	// is unchecked.
	unchecked bool
}

type opKind uint8

const (
	opPut opKind = iota
	opDelete
	opReindex // rewrite only the record's index values
)

// pendingOp is a mutation not yet on disk; only the last per key is kept.
type pendingOp struct {
	kind  opKind
	obj   any
	names []string
	vals  [][]string
	// tomb is the last state of a delete this put replaced in the same
	// commit, kept as the delete's (deletes.go); nil for none.
	tomb any
}

// Indexer is a cache.Indexer (and cache.TransactionStore) persisted in a
// store.DB. Create it with Open; Close flushes it.
type Indexer struct {
	db      *store.DB
	name    string
	codec   *codec.Codec
	keyring *codec.Keyring // the codec's, for messages
	keyFunc cache.KeyFunc
	// defaultKeyFunc: keyFunc is the default (Options.KeyFunc nil).
	defaultKeyFunc bool
	bounded        bool
	logger         klog.Logger

	committer     *store.Committer
	onUndecodable func(int)
	// mark and durable are the durability notices (durable.go), guarded
	// by mu.
	// windowKeep and windowSrc are the window's (window.go): how many
	// changes the file keeps, and where they come from.
	windowKeep int
	windowSrc  WindowSource
	windowLock func() (unlock func())
	// windowEnc are the encodings of the objects after the last window
	// batch's changes, by object (window.go); used by Pending only.
	windowEnc map[kruntime.Object][]byte
	mark      func() uint64
	durable   func(uint64)
	transform cache.TransformFunc
	strict    bool               // Options.VerifyRecords: a damaged record fails Open
	stop      context.CancelFunc // own committer, else nil
	done      chan struct{}

	// lru holds decoded objects in Bounded mode; it locks itself. Lock
	// order: mu before lru.
	lru *lru.Cache

	// mu guards the fields below. Lock order: store.Committer's commitMu
	// before mu (the committer calls Pending and Committed).
	mu sync.RWMutex
	// Kept deletes (deletes.go): keepDeletes keeps each delete's last
	// state; deletesFrom is the resourceVersion from which they all are;
	// prune asks the next commit to remove those at or before it, pruned
	// is the last pruned.
	keepDeletes                bool
	deletesFrom, prune, pruned string
	items                      map[string]*item
	// objs holds the decoded objects by key in Full mode (nil in Bounded):
	// a map of its own, like client-go's items, so that a Get is one map
	// lookup and not a second, cache-missing pointer chase to an item.
	objs map[string]any
	// lazyN counts the items (Full mode, after a warm load) whose objects
	// are still on disk only; uncheckedN those whose index values are not
	// checked yet (both modes; verify.go); loadKeys are the loaded keys in
	// file order, for the fill to walk from fillPos; undecodable are the
	// keys whose record did not decode (lazy.go; in both modes), unreported
	// how many of them OnUndecodable has not been told about yet; healed
	// counts by index the items whose loaded values the check found stale.
	lazyN      int
	uncheckedN int
	loadKeys   []string
	// feed is set while InitialList hands over the loaded objects.
	feed        *initialFeed
	fillPos     int
	undecodable map[string]error
	unreported  int
	healed      map[string]int
	checkFailed int  // loaded objects an index function failed on (verify.go)
	rebuilding  bool // load rebuilds every index: the fill's check is moot
	idx         *indexSet
	rv          string // of the last applied mutation
	synced      bool
	identity    store.State
	pending     map[string]*pendingOp
	inflight    map[string]*pendingOp // taken by the committer, not yet acknowledged
	stateDirty  bool
	reset       bool // the next batch replaces the informer's old data
	listed      bool // a Replace (complete list) since the last batch taken
	drop        []string
	saved       store.State // the state record last committed or loaded
	resealed    int         // records the load rewrote for the keyring
	commitErr   error
	closed      bool
	// unpersisted are the keys whose object in memory cannot be written
	// (its type cannot be encoded, or its encoding failed), with why.
	// While there is any, Pending hands over nothing: the file stays at
	// the last resourceVersion whose objects it holds.
	unpersisted map[string]error
	// held is set by Hold: Pending hands over nothing until Release
	// (persist.go).
	held bool

	// types are the record types (store.Record.Type) other than the
	// example's that the informer's records may carry: the state record's
	// Types. Copy-on-write (decodes read it without mu); written under mu.
	types atomic.Pointer[map[string]bool]

	// indexErrs are the keys whose object is stored without the values
	// of some index, because an index function failed on it, with the
	// error (since Open: the records do not say why a value is missing).
	indexErrs map[string]error

	// The background fill of lazy objects (lazy.go), which also checks the
	// loaded index values (verify.go): fillMu makes the fill and the
	// callers that need every object or every index value take turns; it
	// is taken before mu. decoded is closed when no key is lazy, verified
	// when none is unchecked.
	fillMu       sync.Mutex
	fillStop     context.CancelFunc
	fillExited   chan struct{}
	decoded      chan struct{}
	decodedOnce  sync.Once
	verified     chan struct{}
	verifiedOnce sync.Once
	// handoff asks the background fill to stop and leave the rest to a
	// Bounded InitialList (lazy.go).
	handoff atomic.Bool
}

var (
	_ cache.Indexer          = (*Indexer)(nil)
	_ cache.TransactionStore = (*Indexer)(nil)
	_ store.Source           = (*Indexer)(nil)
)

// Open loads (unless opts.Fresh) the informer name from db and returns its
// indexer. Index names that the file lacks are rebuilt from the objects;
// index buckets no longer named in indexers are dropped. A damaged record
// (its checksum fails, or its payload does not decode) is left out and
// reported through OnUndecodable (the other records are served), or, with
// VerifyRecords, makes Open fail with an error wrapping store.ErrCorrupt.
// A record that the keyring does not open makes Open fail with an error
// wrapping ErrEncryptionKey; so does, wrapping ErrCorrupt, a key id none of
// whose first records decodes (a wrong example type, not damage to one
// record), and a file that cannot be read. Records whose encryption key id
// is not the keyring's current one are resealed with it (see
// Options.Keyring).
func Open(db *store.DB, name string, indexers cache.Indexers, opts *Options) (*Indexer, error) {
	if opts == nil || opts.Example == nil {
		return nil, errors.New("indexer: Options.Example is required")
	}
	if err := validIndexers(indexers); err != nil {
		return nil, err
	}
	c, err := newCodec(opts)
	if err != nil {
		return nil, err
	}
	x := &Indexer{
		db:       db,
		name:     name,
		codec:    c,
		keyring:  opts.Keyring,
		keyFunc:  opts.KeyFunc,
		bounded:  opts.Mode == Bounded,
		items:    map[string]*item{},
		idx:      newIndexSet(indexers),
		identity: opts.Identity,
		pending:  map[string]*pendingOp{},

		onUndecodable: opts.OnUndecodable,
		transform:     opts.Transform,
		strict:        opts.VerifyRecords,
		decoded:       make(chan struct{}),
		verified:      make(chan struct{}),

		undecodable: map[string]error{},
		indexErrs:   map[string]error{},
		unpersisted: map[string]error{},
		healed:      map[string]int{},
	}
	x.types.Store(&map[string]bool{})
	if x.keyFunc == nil {
		x.keyFunc, x.defaultKeyFunc = cache.DeletionHandlingMetaNamespaceKeyFunc, true
	}
	if !x.bounded {
		x.objs = map[string]any{}
	}
	x.logger = klog.Background()
	if opts.Logger != nil {
		x.logger = *opts.Logger
	}
	x.logger = x.logger.WithValues("informer", name)
	if x.bounded {
		size := opts.CacheSize
		if size <= 0 {
			size = DefaultCacheSize
		}
		x.lru = lru.New(size)
	}
	if opts.Fresh {
		x.reset = true
	} else if err := x.load(!x.bounded && !opts.VerifyRecords); err != nil {
		return nil, err
	}
	x.committer = opts.Committer
	if x.committer == nil {
		x.committer = store.NewCommitter(db, opts.CommitterOptions)
		ctx, cancel := context.WithCancel(context.Background())
		x.stop, x.done = cancel, make(chan struct{})
		go func() {
			defer close(x.done)
			x.committer.Run(ctx)
		}()
	}
	x.committer.Add(x)
	if x.stateDirty || len(x.pending) > 0 {
		x.committer.Notify(1)
	}
	if x.lazyN == 0 {
		x.decodedOnce.Do(func() { close(x.decoded) })
	}
	if x.uncheckedN > 0 {
		x.startFill()
	} else {
		x.verifiedOnce.Do(func() { close(x.verified) })
	}
	x.flushUndecodable() // what the load left out
	return x, nil
}

// Name returns the informer name.
func (x *Indexer) Name() string { return x.name }

// Flush commits everything applied so far (with every other source of the
// same committer) and returns the commit's error, or an error wrapping
// ErrNotPersisted while the indexer holds objects it cannot write, or
// ErrHeld while its commits are held (Hold); in both cases it commits
// nothing of this indexer.
func (x *Indexer) Flush(ctx context.Context) error {
	err := x.committer.Flush(ctx)
	x.mu.RLock()
	nerr := x.unpersistedErrLocked()
	herr := x.heldErrLocked()
	x.mu.RUnlock()
	if nerr != nil {
		return nerr
	}
	if herr != nil {
		return herr
	}
	return err
}

// Close flushes and stops the indexer's own committer. The indexer must not
// be used afterwards. It does not close the DB. Closed while its commits
// are held (Hold), it commits nothing of them and returns nil: the file
// stays at its saved state, an exact past state the next start resumes
// from (it logs so).
func (x *Indexer) Close() error {
	x.mu.Lock()
	if x.closed {
		x.mu.Unlock()
		return nil
	}
	x.mu.Unlock()
	x.stopFill()
	err := x.Flush(context.Background())
	held := errors.Is(err, ErrHeld)
	if held {
		x.logger.Info("Closed with commits held: the file stays at its saved resourceVersion, which the next start resumes from", "reason", err)
		err = nil
	}
	x.committer.Remove(x)
	if x.stop != nil {
		x.stop()
		<-x.done
	}
	if err == nil && !held {
		// Nothing of ours is left to commit: leave the next start the
		// envelopes of what the file holds (store.Snapshot). It is only
		// an optimisation, so a failure is logged, not returned.
		if serr := x.db.WriteSnapshot(x.name); serr != nil {
			x.logger.V(2).Info("No envelope snapshot written", "err", serr)
		}
	}
	x.mu.Lock()
	x.closed = true
	x.mu.Unlock()
	if err != nil {
		return fmt.Errorf("indexer %q: close: %w", x.name, err)
	}
	return nil
}

func objectRV(obj any) (rv, uid string, ok bool) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return "", "", false
	}
	return m.GetResourceVersion(), string(m.GetUID()), true
}

// putLocked stores obj under key in memory and queues its write. An index
// function's error is returned after obj is stored without values in
// that index.
func (x *Indexer) putLocked(key string, obj any) error {
	vals, ierr := x.idx.compute(key, obj)
	x.noteIndexErrLocked(key, ierr)
	x.checkStorableLocked(key, obj)
	it := x.items[key]
	if it == nil {
		it = &item{}
		x.items[key] = it
	}
	x.idx.update(key, it.vals, vals)
	it.vals, it.valNames = vals, x.idx.names
	it.rv, it.uid, _ = objectRV(obj)
	if !x.bounded {
		x.setObjectLocked(key, obj)
	} else {
		x.forgetLazyLocked(key)
		x.lru.Remove(key)
	}
	x.queueLocked(key, pendingOp{kind: opPut, obj: obj, names: x.idx.names, vals: vals})
	return ierr
}

// noteIndexErrLocked records whether key's object is stored without some
// index values (err, from compute, not nil).
func (x *Indexer) noteIndexErrLocked(key string, err error) {
	if err != nil {
		x.indexErrs[key] = err
	} else if len(x.indexErrs) > 0 {
		delete(x.indexErrs, key)
	}
}

// IndexErrors returns the number of objects stored without the values of
// some index because an index function failed on them: those applied
// since this Open, and those the warm load's check of the loaded index
// values found (it runs the current functions on every loaded object).
func (x *Indexer) IndexErrors() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.indexErrs)
}

// queueLocked makes op key's pending mutation, reusing the pendingOp a
// newer mutation of the same key replaces (only the last is kept): under a
// stream of updates to the same objects the informer loop allocates none.
// An op in x.pending belongs to no batch (Pending takes the whole map).
func (x *Indexer) queueLocked(key string, op pendingOp) {
	if cur := x.pending[key]; cur != nil {
		op.tomb = keptDelete(cur, op)
		*cur = op
		return
	}
	x.pending[key] = &op
}

// keptDelete returns the kept delete (deletes.go) that op, replacing cur
// as a key's pending mutation, must still write: a delete followed by a
// create in one commit is a delete, then a put.
func keptDelete(cur *pendingOp, op pendingOp) any {
	switch {
	case op.kind == opDelete:
		return nil // its own (op.obj), the latest
	case cur.kind == opDelete && cur.obj != nil:
		return cur.obj
	default:
		return cur.tomb
	}
}

// deleteLocked deletes key. final is the delete's last state (nil for a
// list that no longer has the key, whose resourceVersion is rv): kept when
// the indexer keeps deletes.
func (x *Indexer) deleteLocked(key string, final any, rv string) {
	it := x.items[key]
	if it == nil {
		return
	}
	tomb := x.tombstoneLocked(key, final, rv)
	delete(x.unpersisted, key)
	x.idx.update(key, it.vals, nil)
	x.forgetLazyLocked(key)
	delete(x.indexErrs, key)
	delete(x.items, key)
	delete(x.objs, key)
	if x.bounded {
		x.lru.Remove(key)
	}
	x.queueLocked(key, pendingOp{kind: opDelete, obj: tomb})
}

func (x *Indexer) setRVFromLocked(obj any) {
	if rv, _, ok := objectRV(obj); ok {
		x.rv = rv
		x.stateDirty = true
	}
}

// Add inserts obj (an Update of an existing key).
func (x *Indexer) Add(obj any) error { return x.Update(obj) }

// transformed returns obj after Options.Transform.
func (x *Indexer) transformed(obj any) (any, error) {
	if x.transform == nil {
		return obj, nil
	}
	out, err := x.transform(obj)
	if err != nil {
		return nil, fmt.Errorf("transforming: %w", err)
	}
	return out, nil
}

// Update stores obj. An index function's error (ErrIndexFunc) is returned
// after obj is stored without values in that index.
func (x *Indexer) Update(obj any) error {
	key, err := x.keyFunc(obj)
	if err != nil {
		return cache.KeyError{Obj: obj, Err: err}
	}
	if obj, err = x.transformed(obj); err != nil {
		return err
	}
	x.mu.Lock()
	err = x.putLocked(key, obj)
	x.setRVFromLocked(obj)
	x.mu.Unlock()
	x.committer.Notify(1)
	return err
}

// Delete removes obj's key (obj may be a cache.DeletedFinalStateUnknown).
func (x *Indexer) Delete(obj any) error {
	key, err := x.keyFunc(obj)
	if err != nil {
		return cache.KeyError{Obj: obj, Err: err}
	}
	x.mu.Lock()
	x.deleteLocked(key, obj, "")
	x.setRVFromLocked(obj)
	x.mu.Unlock()
	x.committer.Notify(1)
	return nil
}

// Transaction applies txns under one lock acquisition; the resourceVersion
// becomes that of the last one (like client-go's thread-safe store). An
// object an index function failed on is stored (without values in that
// index): its index is among SuccessfulIndices and the error, wrapping
// ErrIndexFunc, among Errors.
func (x *Indexer) Transaction(txns ...cache.Transaction) *cache.TransactionError {
	type keyed struct {
		key string
		txn cache.Transaction
		i   int
	}
	ks := make([]keyed, 0, len(txns))
	var errs []error
	for i, t := range txns {
		key, err := x.keyFunc(t.Object)
		if err != nil {
			errs = append(errs, cache.KeyError{Obj: t.Object, Err: err})
			continue
		}
		if t.Type == cache.TransactionTypeAdd || t.Type == cache.TransactionTypeUpdate {
			if t.Object, err = x.transformed(t.Object); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		ks = append(ks, keyed{key, t, i})
	}
	ok := make([]int, 0, len(ks))
	x.mu.Lock()
	for _, k := range ks {
		switch k.txn.Type {
		case cache.TransactionTypeAdd, cache.TransactionTypeUpdate:
			if err := x.putLocked(k.key, k.txn.Object); err != nil {
				errs = append(errs, err)
				if Refused(err) {
					continue
				}
			}
		case cache.TransactionTypeDelete:
			x.deleteLocked(k.key, k.txn.Object, "")
		}
		ok = append(ok, k.i)
	}
	if len(ks) > 0 {
		x.setRVFromLocked(ks[len(ks)-1].txn.Object)
	}
	x.mu.Unlock()
	x.committer.Notify(len(ks))
	if len(errs) > 0 {
		return &cache.TransactionError{SuccessfulIndices: ok, TotalTransactions: len(txns), Errors: errs}
	}
	return nil
}

// Replace replaces the whole content with list as of resourceVersion. Only
// the objects that changed (or are gone) are written; an object whose
// resourceVersion, UID and index values are unchanged is not rewritten.
// Index function errors are returned, joined, after every object is
// stored (without values in the failing indexes).
func (x *Indexer) Replace(list []any, resourceVersion string) error {
	keys := make([]string, len(list))
	if x.transform != nil {
		list = slices.Clone(list) // the caller's list is not rewritten
	}
	for i, obj := range list {
		key, err := x.keyFunc(obj)
		if err != nil {
			return cache.KeyError{Obj: obj, Err: err}
		}
		keys[i] = key
		if list[i], err = x.transformed(obj); err != nil {
			return err
		}
	}
	x.mu.Lock()
	seen := make(map[string]struct{}, len(list))
	var firstErr error
	for i, obj := range list {
		key := keys[i]
		seen[key] = struct{}{}
		_, bad := x.undecodable[key] // its record must be rewritten
		if it := x.items[key]; it != nil && !x.reset && !bad {
			rv, uid, _ := objectRV(obj)
			if rv != "" && rv == it.rv && uid == it.uid {
				// Unchanged on disk: swap the object in memory only,
				// unless its index values are not the record's (an index
				// function that failed, on it now or before, or one that
				// changed since the record was written and whose check
				// has not reached it), which putLocked rewrites.
				vals, ierr := x.idx.compute(key, obj)
				_, failed := x.indexErrs[key]
				if ierr == nil && !failed && slices.Equal(it.valNames, x.idx.names) && sameValues(vals, it.vals) {
					it.vals = vals
					if !x.bounded {
						x.setObjectLocked(key, obj)
					} else {
						x.forgetLazyLocked(key)
					}
					continue
				}
			}
		}
		if err := x.putLocked(key, obj); err != nil {
			firstErr = errors.Join(firstErr, err)
		}
	}
	for key := range x.items {
		if _, ok := seen[key]; !ok {
			x.deleteLocked(key, nil, resourceVersion)
		}
	}
	if x.keepDeletes && x.deletesFrom == "" {
		// A cold start's first list: the deletes are kept from it.
		x.deletesFrom = resourceVersion
	}
	x.rv = resourceVersion
	x.synced = true
	x.listed = true
	x.stateDirty = true
	x.mu.Unlock()
	x.committer.Notify(len(list) + 1)
	return firstErr
}

// Resync is meaningless for a store, as in client-go.
func (x *Indexer) Resync() error { return nil }

// Bookmark records that the store is current as of rv.
func (x *Indexer) Bookmark(rv string) {
	x.mu.Lock()
	x.rv = rv
	x.stateDirty = true
	x.mu.Unlock()
	x.committer.Notify(1)
}

// LastStoreSyncResourceVersion returns the resourceVersion of the last
// applied mutation, like client-go's store (which returns "" unless the
// AtomicFIFO feature is enabled).
func (x *Indexer) LastStoreSyncResourceVersion() string {
	if !clientgofeaturegate.FeatureGates().Enabled(clientgofeaturegate.AtomicFIFO) {
		return ""
	}
	return x.ResourceVersion()
}

// ResourceVersion returns the resourceVersion of the last applied mutation
// (which may not be on disk yet; see SavedState).
func (x *Indexer) ResourceVersion() string {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.rv
}

// Synced reports whether a complete list (or a loaded synced file) is in
// the store.
func (x *Indexer) Synced() bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.synced
}

// SavedState returns the state record as last committed (or loaded).
func (x *Indexer) SavedState() store.State {
	x.mu.RLock()
	defer x.mu.RUnlock()
	s := x.saved
	s.Indexes = append([]string(nil), s.Indexes...)
	return s
}

// CommitError returns the error of this indexer's last commit, or nil.
func (x *Indexer) CommitError() error {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.commitErr
}

// Identity returns the identity fields this indexer writes with its
// commits (ClusterID, Resource, ListOptions, Transform): what it was
// opened with, or the last SetIdentity.
func (x *Indexer) Identity() store.State {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.identity
}

// SetIdentity replaces the identity fields of the state record; they are
// written with the next commit.
func (x *Indexer) SetIdentity(id store.State) {
	x.mu.Lock()
	x.identity = id
	x.stateDirty = true
	x.mu.Unlock()
	x.committer.Notify(1)
}

// Get returns the object with obj's key.
func (x *Indexer) Get(obj any) (any, bool, error) {
	key, err := x.keyFunc(obj)
	if err != nil {
		return nil, false, cache.KeyError{Obj: obj, Err: err}
	}
	return x.GetByKey(key)
}

// forgetLazyLocked notes that memory now holds key's state, index values
// computed by the current functions (or that key is gone): it is no
// longer lazy, unchecked or undecodable. It reports whether it was lazy.
func (x *Indexer) forgetLazyLocked(key string) (lazy bool) {
	if x.uncheckedN == 0 && len(x.undecodable) == 0 {
		return false
	}
	delete(x.undecodable, key)
	if it := x.items[key]; it != nil {
		if it.lazy {
			x.clearLazyLocked(it)
			lazy = true
		}
		x.checkedLocked(it)
	}
	return lazy
}

// setObjectLocked makes obj key's object in memory (Full mode), in place
// of what the load left on disk, if anything (forgetLazyLocked): an
// InitialList handing over the loaded objects gets it then.
func (x *Indexer) setObjectLocked(key string, obj any) {
	lazy := x.forgetLazyLocked(key)
	x.objs[key] = obj
	if lazy && x.feed != nil {
		x.feed.add(obj)
	}
}

// clearLazyLocked marks it decoded (or changed). The caller checks its
// index values, or computes them afresh, and calls checkedLocked.
func (x *Indexer) clearLazyLocked(it *item) {
	it.lazy = false
	x.lazyN--
	if x.lazyN == 0 {
		x.decodedOnce.Do(func() { close(x.decoded) })
	}
}

// GetByKey returns the object stored under key.
func (x *Indexer) GetByKey(key string) (any, bool, error) {
	x.mu.RLock()
	if !x.bounded {
		obj, ok := x.objs[key]
		if ok || (x.lazyN == 0 && len(x.undecodable) == 0) {
			x.mu.RUnlock()
			return obj, ok, nil
		}
		if err, bad := x.undecodable[key]; bad {
			x.mu.RUnlock()
			return nil, false, x.undecodableError(key, err)
		}
		if it := x.items[key]; it == nil || !it.lazy {
			x.mu.RUnlock()
			return nil, false, nil
		}
		// Decoded under the shared lock, so the answer is of this
		// moment; installed after.
		objs, errs, err := x.decodeKeys([]string{key})
		x.mu.RUnlock()
		if err != nil {
			return nil, false, fmt.Errorf("indexer %q: get %q: %w", x.name, key, err)
		}
		x.installAfter([]string{key}, objs, errs)
		if errs[0] != nil {
			return nil, false, x.undecodableError(key, errs[0])
		}
		return objs[0], true, nil
	}
	if x.items[key] == nil {
		x.mu.RUnlock()
		return nil, false, nil
	}
	obj, bad, err := x.fetchLocked(key)
	x.mu.RUnlock()
	if bad != nil {
		x.markUndecodable([]badRead{*bad})
	}
	if err != nil {
		return nil, false, err
	}
	return obj, true, nil
}

// List returns every object (unordered, as client-go's). After a warm
// load it first waits for every object to be decoded (in parallel).
func (x *Indexer) List() []any {
	x.fillForRead()
	x.mu.RLock()
	out := make([]any, 0, len(x.items))
	if !x.bounded {
		defer x.mu.RUnlock()
		for _, obj := range x.objs {
			out = append(out, obj)
		}
		if x.lazyN > 0 {
			// The fill could not read the file: decode the rest here.
			var lazy []string
			for k, it := range x.items {
				if it.lazy {
					lazy = append(lazy, k)
				}
			}
			out, _, _ = x.appendLazyLocked(out, lazy)
		}
		return out
	}
	keys := make([]string, 0, len(x.items))
	for k := range x.items {
		keys = append(keys, k)
	}
	out, bad := x.fetchManyLocked(keys)
	x.mu.RUnlock()
	x.markUndecodable(bad)
	return out
}

// ListKeys returns every key.
func (x *Indexer) ListKeys() []string {
	x.mu.RLock()
	defer x.mu.RUnlock()
	out := make([]string, 0, len(x.items))
	for k := range x.items {
		out = append(out, k)
	}
	return out
}

// Len returns the number of objects.
func (x *Indexer) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.items)
}

func (x *Indexer) noIndex(name string) error {
	return errNoIndex(name)
}

// Index returns the objects that share a value with obj in the named index
// (the index function runs on obj, which may be a probe object). After a
// warm load it first waits until the index's loaded values are verified
// (at once for the namespace index, whose values the keys confirm; for
// the others, IndexesVerified).
func (x *Indexer) Index(indexName string, obj any) ([]any, error) {
	if err := x.waitIndex(indexName); err != nil {
		return nil, err
	}
	x.mu.RLock()
	f := x.idx.indexers[indexName]
	if f == nil {
		x.mu.RUnlock()
		return nil, x.noIndex(indexName)
	}
	values, err := f(obj)
	if err != nil {
		x.mu.RUnlock()
		return nil, err
	}
	idx := x.idx.byName[indexName]
	var keys sets.Set[string]
	if len(values) == 1 {
		keys = idx[values[0]]
	} else {
		keys = sets.New[string]()
		for _, v := range values {
			keys = keys.Union(idx[v])
		}
	}
	return x.objectsUnlock(keys), nil
}

// objectsLocked returns the objects of keys. In Full mode, the lazy ones
// are decoded under the caller's shared lock; their keys and objects are
// returned for the caller to install (installAfter) once it has released
// it. In Bounded mode, the records found not to decode are returned for
// the caller to mark (markUndecodable) then.
func (x *Indexer) objectsLocked(keys sets.Set[string]) (out []any, lazyKeys []string, lazyObjs []kruntime.Object, lazyErrs []error, bad []badRead) {
	out = make([]any, 0, keys.Len())
	if x.bounded {
		out, bad = x.fetchManyLocked(sets.List(keys))
		return out, nil, nil, nil, bad
	}
	for k := range keys {
		if obj, ok := x.objs[k]; ok {
			out = append(out, obj)
		} else if it := x.items[k]; it != nil && it.lazy {
			lazyKeys = append(lazyKeys, k)
		}
	}
	if len(lazyKeys) == 0 {
		return out, nil, nil, nil, nil
	}
	sort.Strings(lazyKeys)
	out, lazyObjs, lazyErrs = x.appendLazyLocked(out, lazyKeys)
	if lazyObjs == nil {
		return out, nil, nil, nil, nil
	}
	return out, lazyKeys, lazyObjs, lazyErrs, nil
}

// appendLazyLocked decodes the lazy keys from the file under the caller's
// shared lock and appends the objects that decode to out. It returns what
// was decoded for installAfter, or nil objs if the file could not be read
// (logged).
func (x *Indexer) appendLazyLocked(out []any, keys []string) (_ []any, objs []kruntime.Object, errs []error) {
	objs, errs, err := x.decodeKeys(keys)
	if err != nil {
		x.logger.Error(err, "Objects not readable")
		return out, nil, nil
	}
	for i, obj := range objs {
		if errs[i] == nil {
			out = append(out, obj)
		}
	}
	return out, objs, errs
}

// objectsUnlock is objectsLocked for a caller holding the shared lock,
// which it releases.
func (x *Indexer) objectsUnlock(keys sets.Set[string]) []any {
	out, lk, lo, le, bad := x.objectsLocked(keys)
	x.mu.RUnlock()
	if len(lk) > 0 {
		x.installAfter(lk, lo, le)
	}
	x.markUndecodable(bad)
	return out
}

// fillForRead decodes every lazy object before a read that needs them all
// (List).
func (x *Indexer) fillForRead() {
	x.mu.RLock()
	n := x.lazyN
	x.mu.RUnlock()
	if n == 0 {
		return
	}
	if err := x.fill(context.Background()); err != nil {
		x.logger.Error(err, "Decoding the loaded objects")
	}
}

// IndexKeys returns the keys of the objects having indexedValue in the
// named index, sorted. After a warm load it first waits until the index's
// loaded values are verified (as Index does).
func (x *Indexer) IndexKeys(indexName, indexedValue string) ([]string, error) {
	if err := x.waitIndex(indexName); err != nil {
		return nil, err
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.idx.indexers[indexName] == nil {
		return nil, x.noIndex(indexName)
	}
	return sets.List(x.idx.byName[indexName][indexedValue]), nil
}

// ListIndexFuncValues returns the values present in the named index.
// After a warm load it first waits until the index's loaded values are
// verified (as Index does); if that fails (the file cannot be read), the
// error is logged and the values memory holds are returned.
func (x *Indexer) ListIndexFuncValues(indexName string) []string {
	if err := x.waitIndex(indexName); err != nil {
		x.logger.Error(err, "Index values not verified", "index", indexName)
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	idx := x.idx.byName[indexName]
	out := make([]string, 0, len(idx))
	for v := range idx {
		out = append(out, v)
	}
	return out
}

// ByIndex returns the objects having indexedValue in the named index.
// After a warm load it first waits until the index's loaded values are
// verified (as Index does).
func (x *Indexer) ByIndex(indexName, indexedValue string) ([]any, error) {
	if err := x.waitIndex(indexName); err != nil {
		return nil, err
	}
	x.mu.RLock()
	if x.idx.indexers[indexName] == nil {
		x.mu.RUnlock()
		return nil, x.noIndex(indexName)
	}
	return x.objectsUnlock(x.idx.byName[indexName][indexedValue]), nil
}

// GetIndexers returns the index functions.
func (x *Indexer) GetIndexers() cache.Indexers {
	x.mu.RLock()
	defer x.mu.RUnlock()
	out := make(cache.Indexers, len(x.idx.indexers))
	for k, v := range x.idx.indexers {
		out[k] = v
	}
	return out
}

// AddIndexers adds indexes, backfilling them from the objects in memory
// (Full) or on disk (Bounded). The new index buckets are written, with the
// state record naming them, in one commit.
func (x *Indexer) AddIndexers(newIndexers cache.Indexers) error {
	// The backfill reads every object (Full mode: decoded by the fill,
	// which checks the loaded index values too).
	if err := x.waitIndexes(); err != nil {
		return err
	}
	defer x.flushUndecodable()
	x.mu.Lock()
	defer x.mu.Unlock()
	var conflict []string
	for name := range newIndexers {
		if _, ok := x.idx.indexers[name]; ok {
			conflict = append(conflict, name)
		}
	}
	if len(conflict) > 0 {
		return errIndexConflict(conflict)
	}
	if err := validIndexers(newIndexers); err != nil {
		return err
	}
	all := cache.Indexers{}
	for k, v := range x.idx.indexers {
		all[k] = v
	}
	for k, v := range newIndexers {
		all[k] = v
	}
	if _, err := x.reindexLocked(newIndexSet(all), true); err != nil {
		return err
	}
	x.committer.Notify(len(x.items) + 1)
	return nil
}

// reindexLocked switches to idx, recomputing every object's index values
// and queueing their records for rewriting. If strict, an index
// function's error is returned as err before anything changes (AddIndexers
// refuses the new indexes, as its caller can fix them); else the object
// is kept without values in that index and idxErr returns the errors,
// joined (a load must not fail on one object). err is also what makes
// the switch impossible (objects that cannot be read).
func (x *Indexer) reindexLocked(idx *indexSet, strict bool) (idxErr, err error) {
	keys := make([]string, 0, len(x.items))
	for k := range x.items {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	vals := make([][][]string, len(keys))
	var objs []any
	if x.bounded {
		var bad []badRead
		var rerr error
		if objs, bad, rerr = x.readManyLocked(keys); rerr != nil {
			return nil, fmt.Errorf("indexer %q: backfill: %w", x.name, rerr)
		}
		for _, b := range bad {
			x.undecodable[b.key] = b.err
			x.unreported++
		}
	}
	failed := map[string]error{}
	var errs []error
	for i, k := range keys {
		obj := any(nil)
		if x.bounded {
			obj = objs[i]
		} else {
			obj = x.objs[k]
		}
		if obj == nil {
			// Undecodable: no index values until the server sends it.
			continue
		}
		v, cerr := idx.compute(k, obj)
		if cerr != nil {
			if strict {
				return nil, cerr
			}
			failed[k] = cerr
			errs = append(errs, cerr)
		}
		vals[i] = v
	}
	x.idx = idx
	x.indexErrs = failed
	for i, k := range keys {
		it := x.items[k]
		x.idx.update(k, nil, vals[i])
		it.vals, it.valNames = vals[i], idx.names
		x.checkedLocked(it)
		if op := x.pending[k]; op != nil && op.kind == opPut {
			op.names, op.vals = idx.names, vals[i]
			continue
		}
		x.pending[k] = &pendingOp{kind: opReindex, names: idx.names, vals: vals[i]}
	}
	x.stateDirty = true
	return errors.Join(errs...), nil
}

// decodeWorkers bounds parallel decoding.
func decodeWorkers() int { return max(1, runtime.GOMAXPROCS(0)) }
