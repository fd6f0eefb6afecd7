package boltinformer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/boltinformer/boltinformer/fresh"
	"github.com/boltinformer/boltinformer/indexer"
	"github.com/boltinformer/boltinformer/processor"
	"github.com/boltinformer/boltinformer/recovery"
	"github.com/boltinformer/boltinformer/reflector"
	"github.com/boltinformer/boltinformer/store"
)

// SyncPolicy says when a warm-started informer reports HasSynced.
type SyncPolicy int

const (
	// SyncAfterDiskLoad reports synced as soon as the cache is loaded from
	// disk (the moment Loaded; the default: an edge agent must work
	// offline, and its handlers start at once).
	SyncAfterDiskLoad SyncPolicy = iota
	// SyncAfterFresh reports synced once the cache equals the server's
	// state at a known resourceVersion (the moment Fresh: see
	// FreshChecker), or, with InformerOptions.FreshTimeout, once that
	// long has passed without it (the server is unreachable: the cache
	// serves what it loaded, and Health.Stale says so). What a
	// controller wants: after WaitForCacheSync it reads no object deleted
	// while it was down. A cold start is fresh with its first list.
	SyncAfterFresh
	// SyncAfterResume is SyncAfterFresh.
	//
	// Deprecated: it waited for the first watch event, which on a quiet
	// resource is the apiserver's bookmark about a minute later; it now
	// means SyncAfterFresh.
	SyncAfterResume = SyncAfterFresh
)

// MemoryMode says what an informer's indexer keeps in memory
// (InformerOptions.Memory).
type MemoryMode int

const (
	// FullMemory keeps every decoded object in memory (like client-go).
	FullMemory MemoryMode = iota
	// BoundedMemory keeps keys, index sets and an LRU of decoded objects;
	// a read of an object not in the LRU decodes it from the file.
	BoundedMemory
)

// DefaultCacheSize is the number of decoded objects a BoundedMemory
// informer keeps when InformerOptions.CacheSize is 0.
const DefaultCacheSize = 1024

// indexerMode returns m as the indexer's mode.
func (m MemoryMode) indexerMode() (indexer.Mode, error) {
	switch m {
	case FullMemory:
		return indexer.Full, nil
	case BoundedMemory:
		return indexer.Bounded, nil
	default:
		return 0, fmt.Errorf("boltinformer: InformerOptions.Memory: unknown %v (want FullMemory or BoundedMemory)", m)
	}
}

// String implements fmt.Stringer.
func (m MemoryMode) String() string {
	switch m {
	case FullMemory:
		return "full"
	case BoundedMemory:
		return "bounded"
	default:
		return fmt.Sprintf("MemoryMode(%d)", int(m))
	}
}

// InformerOptions configure DB.NewInformer. A nil *InformerOptions means
// the defaults.
type InformerOptions struct {
	// ClusterID identifies the cluster (e.g. the kube-system namespace
	// UID, or EndpointIdentity of the rest.Config). A file saved for
	// another cluster is not resumed, nor one saved without an identity
	// (filled while it was unknown: it may be any cluster's). "" skips the
	// check (an offline start) and keeps the saved identity.
	ClusterID string
	// Resource names what lw lists; part of the identity: a file saved
	// under another Resource is not resumed. A Factory sets the
	// GroupVersionResource ("/v1, Resource=pods"). Default:
	// DefaultResource(example), the kind ("/v1, Kind=Pod"; unstructured and
	// metadata-only examples by their apiVersion and kind; such an example
	// without them, as client-go's metadatainformer passes, needs an
	// explicit Resource, or every resource would share one). A file saved
	// under the default of earlier versions, the example's Go type
	// ("*v1.Pod"), is resumed by an informer of that type that leaves
	// Resource "", and saved under the kind at its next commit.
	Resource string
	// ListOptions fingerprints lw's selectors (see ListOptionsFingerprint);
	// a file saved with other selectors is not resumed.
	ListOptions string
	// TransformID fingerprints the transform given to SetTransform: objects
	// are stored after the transform, so a file saved with another
	// transform is not resumed. SetTransform without it logs a warning:
	// the file's identity cannot tell transforms apart.
	TransformID string
	// SyncPolicy; default SyncAfterDiskLoad.
	SyncPolicy SyncPolicy
	// Metadata lists, metadata only, what lw lists (same resource,
	// namespace and selectors): with SyncAfterFresh or ReplayDownDeletes,
	// one such list after a warm start tells which objects changed while
	// the informer was down, so that it knows when the resumed watch has
	// brought them (the moment Fresh); with Getter, it makes relists
	// partial. A Factory sets it (k8s.io/client-go/metadata). Nil: a warm
	// start is fresh at the first watch event the server sends.
	Metadata MetadataLister
	// Getter reads one object as it was at an exact resourceVersion. With
	// Metadata, a relist (after a 410: an apiserver restart answers it to
	// every older resourceVersion) lists metadata, diffs it against the
	// cache and reads only what changed, instead of listing every object;
	// see PartialRelistRatio. A Factory sets it.
	Getter ObjectGetter
	// PartialRelistRatio is the largest share of the objects that a
	// partial relist reads one by one; a larger change lists everything.
	// 0 means DefaultPartialRelistRatio; negative turns partial relists
	// off.
	PartialRelistRatio float64
	// ReplayDownDeletes makes every handler added after Run first get
	// OnDelete for each object deleted while the informer was down (the
	// deletes a warm start's catch-up or relist applied before it was
	// fresh), then its initial adds: a controller that registers its
	// handlers only once the caches have synced (controller-runtime) hears
	// about them, as it would have live. Handlers added before Run get
	// those deletes as they happen. It works in either SyncPolicy: with
	// SyncAfterDiskLoad the informer still finds out when it is fresh
	// (FreshBookmarkWait, Metadata), without making HasSynced wait for it,
	// so a handler added at any time gets every delete made while down,
	// replayed or live. That costs the reads FreshBookmarkWait and
	// FreshListMax describe, where SyncAfterDiskLoad alone makes none
	// beyond the watch.
	//
	// So that a process killed before it is fresh hears of them at its
	// next start, a warm start holds its commits until fresh: the file
	// stays at the saved resourceVersion (Health.CommitsHeld), the next
	// start resumes from there and applies the same deletes again, and
	// Flush returns an error wrapping ErrCommitsHeld (a stop before fresh
	// leaves the file as it was, an exact past state). The hold ends at
	// Fresh, or after FreshTimeout without it (if set): from then on a
	// kill before fresh loses those deletes' replay, as without the hold.
	ReplayDownDeletes bool
	// ChangedFirst makes a handler added after Run get, of a warm start's
	// objects, those changed, created or deleted while the informer was
	// down first: the deletes (ReplayDownDeletes), then the changed and
	// created objects as adds with isInInitialList false, then the others
	// as initial adds; the handler's HasSynced waits for the changed ones
	// only, and the unchanged ones reach it while it works on those.
	// controller-runtime's priority queue then takes the changed ones at
	// once and the unchanged at low priority
	// (controller-runtime's cache sets it). False keeps client-go's
	// order: every object as an initial add. ChangedSince tells them apart
	// for a handler of its own.
	ChangedFirst bool
	// FreshTimeout bounds SyncAfterFresh's wait: after this long without
	// being fresh (the server unreachable), HasSynced reports true and the
	// cache serves what it loaded (Health.Stale). 0 waits for Fresh.
	FreshTimeout time.Duration
	// FreshBookmarkWait, with SyncAfterFresh or ReplayDownDeletes, makes a
	// warm start fresh by a bookmark on the resumed watch, when one comes
	// within this long,
	// instead of by a metadata list of every object: a bookmark says that
	// every event before its resourceVersion has been sent. Once its watch
	// is accepted, the informer lists one object's metadata (Metadata with
	// Limit 1: a consistent read at the server's current resourceVersion R,
	// which also moves kube-apiserver's watch cache to R), and is fresh at
	// the first bookmark or watch event at or after R (at once when it has
	// applied exactly R: nothing changed). kube-apiserver sends a bookmark
	// 2 s before a watch's deadline, so until it is fresh the informer's
	// watches have a 3 s timeout: the bookmark comes about a second in. It
	// costs the server one object and the watch, where the metadata list of
	// every object costs about as much of its CPU as a cold start
	// (docs/BENCHMARKS.md, "controller-runtime"). Without Metadata, any
	// bookmark on the resumed watch makes it fresh. It hands over to the
	// metadata list when no bookmark comes in time, when R is behind the
	// cache or the object read is older than the cache's copy (another
	// history: the list finds it and relists), or when resourceVersions do
	// not compare; after a 410 or a relist the informer asked for, the
	// relist decides. It cannot tell a cluster restored from an etcd backup
	// without a bumped revision and written past the file from the file's
	// own history (README, "Loaded, Fresh, Live"). 0, the default, lists
	// metadata at once.
	FreshBookmarkWait time.Duration
	// FreshListMax, with Metadata and SyncAfterFresh or ReplayDownDeletes:
	// a warm start whose cache holds at most this many objects lists every
	// object's metadata at once, beside the wait for a bookmark, and is
	// fresh by whichever tells first: up to about 10,000 objects the list
	// comes sooner than kube-apiserver's bookmark, which takes 0 to 2.3 s,
	// at the cost of a metadata list of every object (managedFields
	// included: about two thirds of a protobuf LIST's bytes). 0 means
	// DefaultFreshListMax; negative never lists at once (the apiserver's
	// bytes first: kube-controller-manager's example does so).
	FreshListMax int
	// Memory is FullMemory (default) or BoundedMemory, with CacheSize
	// decoded objects in the bounded LRU (0: DefaultCacheSize, 1024).
	Memory    MemoryMode
	CacheSize int
	// Keyring encrypts payloads at rest (e.g. for Secrets). A warm start
	// checks it against the file: payloads it cannot open (a key id it
	// lacks, another key under the same id, or sealed payloads and no
	// Keyring) make NewInformer fail with ErrEncryptionKey, touching
	// nothing; records sealed with another key id than Current, or not
	// sealed, are rewritten with Current before NewInformer returns
	// (decision reason "resealed"), so plaintext does not stay on disk
	// once a keyring is given and a rotated-out key can be dropped after
	// one start. Current "" rewrites sealed records in plaintext: how to
	// stop encrypting.
	Keyring *Keyring
	// Scheme knows the kinds of the objects the informer stores when they
	// are not of the example's type: a transform may return any type the
	// scheme knows (protobuf where the type has it, JSON otherwise), and
	// *metav1.PartialObjectMetadata always. An object of a type it does
	// not know is kept in memory and holds the file back (Health's
	// NotPersisted). Default: client-go's kubernetes scheme.
	Scheme *runtime.Scheme
	// Logger; default the DB's.
	Logger *klog.Logger
}

// Informer is a cache.SharedIndexInformer whose indexer is persisted. Build
// it with DB.NewInformer; listers may read its indexer at once.
type Informer struct {
	db         *DB
	name       string
	resource   string
	indexer    *indexer.Indexer
	lw         cache.ListerWatcher
	objectType runtime.Object
	processor  *processor.Processor
	decision   recovery.Decision
	policy     SyncPolicy
	logger     klog.Logger
	synced     chan struct{}
	// The moments of a start (fresh.go): the file loaded (or first list),
	// the watch accepted; fr decides the third, Fresh (package fresh).
	loaded, live *moment
	fr           *fresh.Tracker
	metadata     MetadataLister
	getter       ObjectGetter
	partialRatio float64
	partial      atomic.Pointer[partialAnswer] // the next ReplacedAll is a partial relist
	freshTimeout time.Duration
	stale        atomic.Bool // synced by FreshTimeout, not fresh
	// downDeletes are the deletes applied before a warm start was fresh,
	// replayed to late handlers (ReplayDownDeletes); guarded by
	// blockDeltas.
	replayDeletes bool
	downDeletes   []processor.Notification
	// changedFirst is InformerOptions.ChangedFirst; resumedFrom the
	// resourceVersion a warm start resumed from (handlers.go).
	changedFirst bool
	resumedFrom  string
	// closeOnce closes the indexer once: when Run returns (the name is
	// released) or when the DB closes.
	closeOnce  sync.Once
	closeErr   error
	runStarted atomic.Int64 // UnixNano when Run started
	// initialDone is closed once a warm start has queued the disk objects
	// to the handlers registered before Run (at once for a cold start);
	// handlersSynced once synced and initialDone are both closed: the
	// handlers' own HasSynced builds on it.
	initialDone    chan struct{}
	handlersSynced chan struct{}
	diskAnswer     atomic.Bool // the next ReplacedAll is the disk answer
	counters       informerCounters
	// apply is what the cache could not apply as received (apply.go).
	apply applyState
	// runCtx is Run's context, set by start before the loop runs: the
	// watch error handler's, for what the loop reports (reportApply).
	runCtx      context.Context
	listed      atomic.Bool  // a list (from disk or server) was applied
	expiredSeen atomic.Int64 // reflector.Stats.Expired at the last relist

	// Undecodable objects found after the load (onUndecodable): a copy of
	// the file is kept once, and a relist is requested from the reflector
	// (resumePtr, set by start) or, before Run, when it starts.
	relistWanted atomic.Bool
	copyKept     atomic.Bool
	damageCopy   atomic.Pointer[string] // Health.DamageCopy
	resumePtr    atomic.Pointer[reflector.ListerWatcher]

	// transformID is InformerOptions.TransformID, for SetTransform's
	// warning.
	transformID string

	// startedMu guards started, stopped, controller, resume, transform,
	// watchErrorHandler and the resync periods. Lock order: startedMu
	// before blockDeltas.
	startedMu                       sync.Mutex
	started, stopped                bool
	controller                      *controller
	resume                          *reflector.ListerWatcher
	transform                       cache.TransformFunc
	watchErrorHandler               cache.WatchErrorHandlerWithContext
	resyncCheckPeriod               time.Duration
	defaultEventHandlerResyncPeriod time.Duration
	listeners                       map[*processor.Listener]struct{}
	// lateWG waits for the goroutines that queue a late handler's
	// unchanged objects (ChangedFirst); Run waits for them.
	lateWG sync.WaitGroup
	// resuming are the listeners added by AddEventHandlerSince; resumers
	// counts them (the loop reads it to distribute progress).
	resuming map[*processor.Listener]bool
	resumers atomic.Int64

	// blockDeltas serializes event distribution with handler registration,
	// so a late handler joins between two events.
	blockDeltas sync.Mutex
	// windowLocked: the batch the indexer is taking was taken holding
	// blockDeltas (window.go); read and written by the committer's
	// goroutine only (the indexer's Pending).
	windowLocked bool
	obs          observerSet // Observe (observe.go)
}

var _ cache.SharedIndexInformer = (*Informer)(nil)

// NewInformer returns the informer name of this DB: lw lists and watches
// objects like example, handlers without their own period resync every
// resync (0: never), indexers are its indexes. It loads the saved objects
// at once when the file can be resumed (recovery.Decide), else it starts
// cold and replaces the old objects when the first list commits.
func (db *DB) NewInformer(name string, lw cache.ListerWatcher, example runtime.Object, resync time.Duration, indexers cache.Indexers, opts *InformerOptions) (_ *Informer, err error) {
	// The name first: a refused call must touch nothing (no read of the
	// file, no indexer joining the shared commit loop, no copy kept).
	if err := db.reserve(name); err != nil {
		return nil, err
	}
	registered := false
	defer func() {
		if !registered {
			db.release(name)
		}
	}()
	o := InformerOptions{}
	if opts != nil {
		o = *opts
	}
	// base is the caller's logger as given: the handlers' panics are
	// logged with it, with client-go's keys only.
	base := db.logger
	if o.Logger != nil {
		base = *o.Logger
	}
	logger := base.WithValues("informer", name)
	mode, err := o.Memory.indexerMode()
	if err != nil {
		return nil, err
	}
	defaultResource := o.Resource == ""
	if defaultResource {
		if err := kindKnown(example); err != nil {
			return nil, fmt.Errorf("boltinformer: informer %q: %w", name, err)
		}
		o.Resource = DefaultResource(example)
	}
	identity := store.State{ClusterID: o.ClusterID, Resource: o.Resource, ListOptions: o.ListOptions, Transform: o.TransformID}
	var saved *store.State
	err = db.store.View(func(tx *store.Tx) error {
		var err error
		saved, err = tx.State(name)
		return err
	})
	decide := identity
	legacy := defaultResource && saved != nil && saved.Resource != identity.Resource && saved.Resource == goTypeResource(example)
	if legacy {
		// Saved under the old default Resource (the Go type): the same
		// informer. Resume it; the next commit writes the kind.
		decide.Resource = saved.Resource
	}
	decision := recovery.Decide(saved, decide)
	if legacy && decision.Warm {
		decision.Detail += fmt.Sprintf("; saved under the earlier default resource %q, now %q", saved.Resource, identity.Resource)
	}
	if decision.Warm && identity.ClusterID == "" {
		// Offline, the identity could not be looked up: keep the saved one
		// rather than erase it with the next commit.
		identity.ClusterID = saved.ClusterID
	}
	var damaged error        // a state or object record that does not decode
	var damagedKeys []string // its key, if known ("" for the state record)
	var coldCopy string      // the copy kept for it
	if err != nil {
		damaged, damagedKeys = err, []string{""}
		decision = recovery.Decision{Reason: recovery.ReasonCorrupt, Detail: err.Error()}
	}
	sink := &undecodableSink{}
	iopts := &indexer.Options{
		OnUndecodable: sink.report,
		Example:       example,
		Mode:          mode,
		CacheSize:     o.CacheSize,
		Keyring:       o.Keyring.codec(),
		Scheme:        o.Scheme,
		Committer:     db.committer,
		Fresh:         !decision.Warm,
		Identity:      identity,
		Logger:        &base, // the indexer adds the key "informer" itself
		// FailOnCorrupt promises the error of a damaged record from Open:
		// read them all at the start, not the envelope snapshot.
		VerifyRecords: db.failOnCorrupt,
	}
	var idx *indexer.Indexer
	if damaged == nil {
		idx, err = indexer.Open(db.store, name, indexers, iopts)
		if err != nil && errors.Is(err, store.ErrCorrupt) && decision.Warm {
			damaged = err
			decision = recovery.Decision{Reason: recovery.ReasonCorrupt, Detail: err.Error()}
		}
	}
	if damaged != nil {
		// Damage the load cannot leave out (the state record, or no record
		// of an encryption key id decodes): with FailOnCorrupt, the error;
		// else start cold (the new list replaces the old data) after
		// keeping a copy of the file (one per damage), since the
		// replacement deletes the damaged record.
		if db.failOnCorrupt {
			return nil, fmt.Errorf("boltinformer: informer %q: %w", name, damaged)
		}
		cp, cerr := db.keepCopy(name, damagedKeys, damaged.Error())
		if cerr != nil {
			return nil, fmt.Errorf("boltinformer: informer %q: %w", name, errors.Join(damaged, cerr))
		}
		logCopy(logger, "Damaged cache file: starting cold", damaged, cp, nil)
		decision.Detail += copyDetail(cp)
		coldCopy = cp.Path
		iopts.Fresh = true
		idx, err = indexer.Open(db.store, name, indexers, iopts)
	} else if err == nil && idx.Undecodable() > 0 {
		// Records the load left out (reported to the informer once it is
		// built, sink.attach: a copy kept, a relist wanted): the others
		// are served meanwhile.
		decision.Detail += fmt.Sprintf("; %d records do not decode: served without them until a relist replaces them", idx.Undecodable())
	}
	if err != nil {
		return nil, fmt.Errorf("boltinformer: informer %q: %w", name, err)
	}
	if n := idx.Resealed(); n > 0 {
		decision.Reason = recovery.ReasonResealed
		decision.Detail += fmt.Sprintf("; rewrote %d records for the keyring", n)
	}
	inf := &Informer{
		db:                              db,
		name:                            name,
		resource:                        o.Resource,
		indexer:                         idx,
		lw:                              lw,
		objectType:                      example,
		processor:                       processor.New(&processor.Options{Clock: db.clock, Logger: base}),
		decision:                        decision,
		policy:                          o.SyncPolicy,
		transformID:                     o.TransformID,
		metadata:                        o.Metadata,
		getter:                          o.Getter,
		partialRatio:                    cmp.Or(o.PartialRelistRatio, DefaultPartialRelistRatio),
		freshTimeout:                    o.FreshTimeout,
		replayDeletes:                   o.ReplayDownDeletes,
		changedFirst:                    o.ChangedFirst,
		resumedFrom:                     idx.ResourceVersion(),
		loaded:                          newMoment("loaded"),
		live:                            newMoment("live"),
		logger:                          logger,
		synced:                          make(chan struct{}),
		initialDone:                     make(chan struct{}),
		handlersSynced:                  make(chan struct{}),
		resyncCheckPeriod:               resync,
		defaultEventHandlerResyncPeriod: resync,
		listeners:                       map[*processor.Listener]struct{}{},
		resuming:                        map[*processor.Listener]bool{},
	}
	if db.checkpoints.names(name) {
		// A checkpoint resumes from a position in this informer: keep
		// its deletes, and drop those every checkpoint on disk has
		// passed.
		idx.KeepDeletes()
		if rv, ok := db.checkpoints.minPosition(name); ok {
			idx.PruneDeletes(rv)
		}
	}
	inf.fr = inf.newTracker(&o)
	idx.SetDurable(inf.durableMark, inf.durable)
	if coldCopy != "" {
		inf.damageCopy.Store(&coldCopy)
	}
	if o.ReplayDownDeletes && decision.Warm {
		// The deletes the catch-up applies before fresh stay off the file
		// until then: a process killed meanwhile resumes from the same
		// saved resourceVersion and finds them again (releaseHold).
		idx.Hold()
	}
	sink.attach(inf)
	db.register(name, inf)
	registered = true
	if decision.Warm {
		logger.Info("Warm start from cache file", "reason", decision.Reason, "resourceVersion", saved.ResourceVersion, "objects", idx.Len(), "detail", decision.Detail)
	} else {
		logger.Info("Cold start", "reason", decision.Reason, "detail", decision.Detail)
	}
	return inf, nil
}

// closeIndexer closes the indexer once (Run's return, or DB.Close).
func (s *Informer) closeIndexer() error {
	s.closeOnce.Do(func() { s.closeErr = s.indexer.Close() })
	return s.closeErr
}

// Name returns the informer's name in the file.
func (s *Informer) Name() string { return s.name }

// Decision returns the warm-or-cold decision taken when it was built.
func (s *Informer) Decision() Decision { return Decision(s.decision) }

// Indexer returns the persistent indexer, GetIndexer as its concrete type
// of package indexer: a layer below the root package, for tools and tests
// (its saved state, its integrity check). Programs need GetIndexer (what
// listers take) and Health.
func (s *Informer) Indexer() *indexer.Indexer { return s.indexer }

// Flush commits the informer's pending mutations now. Its error wraps
// ErrNotPersisted while the informer holds objects it cannot write, and
// ErrCommitsHeld while a warm start with ReplayDownDeletes is not yet
// fresh; either way nothing of this informer was committed.
func (s *Informer) Flush(ctx context.Context) error { return s.indexer.Flush(ctx) }

// WatchStats are what an informer's list and watch calls have seen
// (Informer.WatchStats).
type WatchStats struct {
	// Lists and Watches count calls that reached the ListerWatcher.
	Lists, Watches int64
	// DiskAnswers counts first lists answered from the file (0 or 1).
	DiskAnswers int64
	// Events counts watch events received (bookmarks included).
	Events int64
	// Errors counts failed calls and watch ERROR events.
	Errors int64
	// Expired counts 410 Expired/Gone answers (the resourceVersion was too
	// old): each is followed by a relist.
	Expired int64
	// LastEvent is when the last watch event arrived.
	LastEvent time.Time
	// LastError is the last error seen, or nil.
	LastError error
	// Resumed is true once the server accepted a warm start's resume: a
	// watch event other than an error arrived, or a list from the server
	// succeeded (a relist after a 410). A cold start resumes nothing: it
	// stays false (Health.Live says when its watch was accepted).
	Resumed bool
	// RelistsRequested counts relists the informer forced (an object of
	// the file found undecodable).
	RelistsRequested int64
	// PartialRelists counts relists answered with only what changed, read
	// one by one (InformerOptions.Getter), not by a full list.
	PartialRelists int64
	// TooLarge counts "Too large resource version" answers: the server is
	// behind the resourceVersion asked for (a restored or replaced
	// cluster, or a server that has not caught up yet).
	TooLarge int64
}

// WatchStats returns what the informer's ListerWatcher has seen (zero
// before Run).
func (s *Informer) WatchStats() WatchStats {
	s.startedMu.Lock()
	r := s.resume
	s.startedMu.Unlock()
	if r == nil {
		return WatchStats{}
	}
	return WatchStats(r.Stats())
}

// Run runs the informer until stopCh is closed.
func (s *Informer) Run(stopCh <-chan struct{}) {
	s.RunWithContext(wait.ContextForChannel(stopCh))
}

// RunWithContext runs the informer until ctx is done, then stops in order:
// the reflector, then the handlers, then a flush of what was applied.
func (s *Informer) RunWithContext(ctx context.Context) {
	defer utilruntime.HandleCrashWithContext(ctx)
	initial, err := s.start(ctx)
	if err == nil {
		s.runStarted.Store(s.db.clock.Now().UnixNano())
	}
	if err != nil {
		klog.FromContext(ctx).Info("Warning: the sharedIndexInformer has started, run more than once is not allowed")
		return
	}
	processorCtx, stopProcessor := context.WithCancel(context.WithoutCancel(ctx))
	var wg wait.Group
	defer func() {
		s.startedMu.Lock()
		s.stopped = true
		s.startedMu.Unlock()
		s.lateWG.Wait()
		stopProcessor()
		wg.Wait()
		if err := s.indexer.Flush(context.Background()); errors.Is(err, indexer.ErrHeld) {
			s.logger.Info("Stopped before fresh: nothing of this start committed; the next start resumes from the saved resourceVersion", "reason", err)
		} else if err != nil {
			s.logger.Error(err, "Final flush failed; the next start resumes from the last commit")
		}
		s.db.unregister(s)
	}()
	wg.StartWithContext(processorCtx, s.processor.Run)
	wg.Start(func() { s.distributeInitial(initial) })
	wg.Start(func() { s.watchSynced(ctx) })
	wg.Start(func() { s.waitLive(ctx) })
	wg.StartWithContext(ctx, func(ctx context.Context) { s.fr.Run(ctx, s.loaded.ch) })
	s.controller.RunWithContext(ctx)
}

// start builds the controller. For a warm start with handlers it returns
// true: the disk objects are to be queued to them (distributeInitial).
func (s *Informer) start(ctx context.Context) (bool, error) {
	s.startedMu.Lock()
	defer s.startedMu.Unlock()
	if s.started {
		return false, errRunTwice
	}
	s.runCtx = ctx
	logger := klog.FromContext(ctx).WithValues("informer", s.name)
	ropts := &reflector.Options{Clock: s.db.clock, Relist: s.partialRelist}
	if s.decision.Warm {
		ropts.ResourceVersion = s.indexer.ResourceVersion()
		// The disk answer carries no objects: the informer intercepts it
		// (they are in the indexer already), and a transform must never
		// see, and possibly mutate, objects that listers share.
		ropts.Snapshot = func() []runtime.Object { return nil }
		ropts.OnDiskAnswer = func() { s.diskAnswer.Store(true) }
	}
	s.resume = reflector.New(s.fr.Watches(s.lw), ropts)
	s.resumePtr.Store(s.resume)
	if s.relistWanted.Load() {
		s.resume.RequestRelist()
	}
	fifo := cache.NewRealFIFOWithOptions(cache.RealFIFOOptions{
		Logger:                &logger,
		Name:                  fmt.Sprintf("boltinformer %s", s.name),
		KeyFunction:           cache.MetaNamespaceKeyFunc,
		Transformer:           s.transform,
		AtomicEvents:          true,
		UnlockWhileProcessing: true,
		EmitDeltaTypeBookmark: true,
	})
	s.controller = newController(fmt.Sprintf("boltinformer %s", s.name), &cache.Config{
		Queue:                        fifo,
		ListerWatcher:                s.resume,
		ObjectType:                   s.objectType,
		ObjectDescription:            fmt.Sprintf("%T", s.objectType),
		FullResyncPeriod:             s.resyncCheckPeriod,
		ShouldResync:                 s.processor.ShouldResync,
		Process:                      s.handleDeltas,
		ProcessBatch:                 s.handleBatchDeltas,
		WatchErrorHandlerWithContext: s.watchErrorHandler,
	}, s.db.clock)
	s.started = true
	return s.decision.Warm && len(s.listeners) > 0, nil
}

// distributeInitial is the warm-start trap: the disk objects are the
// handlers' initial list, since the server's answer will be a diff. It
// runs beside the informer loop, which meanwhile applies the disk answer
// (so HasSynced does not wait for payloads to decode) and then holds back
// the watch events until the initial adds are queued (awaitInitial).
// Handlers added after Run get the current state themselves.
func (s *Informer) distributeInitial(warm bool) {
	if !warm {
		close(s.initialDone)
		return
	}
	// The objects come in batches as they are decoded (in parallel), and
	// each is queued at once: the handlers start on the first while the
	// rest decode. Holding blockDeltas per batch only, the loop may apply
	// the disk answer meanwhile (every other delta waits in
	// awaitInitial).
	s.indexer.InitialList(func(objs []any) {
		s.blockDeltas.Lock()
		defer s.blockDeltas.Unlock()
		for _, obj := range objs {
			s.processor.Distribute(processor.AddNotification{Obj: obj, InInitialList: true}, false)
		}
	})
	s.blockDeltas.Lock()
	defer s.blockDeltas.Unlock()
	// initialDone first: progressLocked sends nothing before it, so no
	// handler's position passes an initial add still queued (review).
	close(s.initialDone)
	s.progressLocked()
}

// undecodableSink forwards the indexer's OnUndecodable to the informer,
// holding what the background fill reports before the informer exists.
type undecodableSink struct {
	mu    sync.Mutex
	inf   *Informer
	early int
}

func (k *undecodableSink) report(n int) {
	k.mu.Lock()
	inf := k.inf
	if inf == nil {
		k.early += n
	}
	k.mu.Unlock()
	if inf != nil {
		inf.onUndecodable(n)
	}
}

func (k *undecodableSink) attach(inf *Informer) {
	k.mu.Lock()
	k.inf = inf
	n := k.early
	k.early = 0
	k.mu.Unlock()
	if n > 0 {
		inf.onUndecodable(n)
	}
}

// onUndecodable handles records of the file found not to decode (by the
// load, or later when their payloads are decoded): the indexer leaves
// them out; a copy of the file is kept, for a post-mortem, once per run
// and once per damage across runs (keepCopy), and the reflector relists
// so that the server's objects replace them. It may run on any
// goroutine, under the informer's locks but never under the indexer's
// (it reads the indexer's undecodable keys).
func (s *Informer) onUndecodable(n int) {
	s.counters.undecodable.Add(int64(n))
	if s.copyKept.CompareAndSwap(false, true) {
		cp, err := s.db.keepCopy(s.name, s.indexer.UndecodableKeys(), "undecodable records")
		logCopy(s.logger, "Objects in the cache file do not decode: relisting", nil, cp, err, "count", n)
		if cp.Path != "" {
			s.damageCopy.Store(&cp.Path)
		}
	}
	s.fr.RelistRequested()
	s.relistWanted.Store(true)
	if r := s.resumePtr.Load(); r != nil {
		r.RequestRelist()
	}
}

// copyDetail says what keepCopy did, for a Decision's Detail.
func copyDetail(cp recovery.Copy) string {
	switch {
	case cp.Written:
		return "; a copy of the file is kept at " + cp.Path
	case cp.Path != "":
		return "; the copy kept at " + cp.Path + " holds this damage"
	}
	return "; no copy of the file kept: " + cp.Skipped
}

// awaitInitial holds back every delta but the disk answer until the
// initial adds are queued, so that no handler sees an event for an object
// before its initial add.
func (s *Informer) awaitInitial(deltas cache.Deltas) {
	select {
	case <-s.initialDone:
		return
	default:
	}
	if s.diskAnswer.Load() && len(deltas) == 1 && deltas[0].Type == cache.ReplacedAll {
		return
	}
	<-s.initialDone
}

func (s *Informer) watchSynced(ctx context.Context) {
	select {
	case <-ctx.Done():
		return
	case <-s.controller.HasSyncedChecker().Done():
	}
	s.loaded.reach(s.db.clock.Now())
	// FreshTimeout counts from Loaded, in every policy: it bounds how long
	// the cache serves what it loaded before it syncs (SyncAfterFresh) and
	// how long a warm start holds its commits (ReplayDownDeletes).
	var timeout <-chan time.Time
	if s.freshTimeout > 0 {
		timeout = s.db.clock.After(s.freshTimeout)
	}
	if s.policy == SyncAfterFresh {
		select {
		case <-ctx.Done():
			return
		case <-s.fr.Done():
		case <-timeout:
			timeout = nil
			s.stale.Store(true)
			s.logger.Info("Warning: not fresh within FreshTimeout (server unreachable?): synced, serving the cache as loaded", "freshTimeout", s.freshTimeout)
			s.releaseHold("not fresh within FreshTimeout")
		}
	}
	close(s.synced)
	select {
	case <-ctx.Done():
		return
	case <-s.initialDone:
	}
	close(s.handlersSynced)
	if s.policy != SyncAfterFresh && timeout != nil && s.indexer.Held() {
		// SyncAfterDiskLoad: FreshTimeout bounds the hold only.
		select {
		case <-ctx.Done():
		case <-s.fr.Done():
		case <-timeout:
			s.releaseHold("not fresh within FreshTimeout")
		}
	}
}

// releaseHold ends a warm start's hold on its commits (ReplayDownDeletes):
// at Fresh, or after FreshTimeout without it (why), when a kill before
// fresh can no longer replay the deletes applied so far at the next start.
func (s *Informer) releaseHold(why string) {
	if s.indexer.Release() && !s.fr.Fresh() {
		s.logger.Info("Warning: committing before fresh; the deletes applied so far are replayed to late handlers in this process only", "reason", why)
	}
}

// HasSynced reports whether the informer's cache is synced (per its
// SyncPolicy).
func (s *Informer) HasSynced() bool {
	select {
	case <-s.synced:
		return true
	default:
		return false
	}
}

type syncedChecker struct{ s *Informer }

func (c syncedChecker) Name() string          { return "boltinformer " + c.s.name }
func (c syncedChecker) Done() <-chan struct{} { return c.s.synced }

// handlersSyncedChecker is done once the informer has synced and the
// initial adds of a warm start are queued: what a handler's HasSynced
// builds on.
type handlersSyncedChecker struct{ s *Informer }

func (c handlersSyncedChecker) Name() string          { return "boltinformer " + c.s.name + " handlers" }
func (c handlersSyncedChecker) Done() <-chan struct{} { return c.s.handlersSynced }

// HasSyncedChecker returns a cache.DoneChecker for HasSynced.
func (s *Informer) HasSyncedChecker() cache.DoneChecker { return syncedChecker{s} }

// LastSyncResourceVersion is the reflector's (which may run ahead of what
// is on disk; see Indexer().SavedState()).
func (s *Informer) LastSyncResourceVersion() string {
	s.startedMu.Lock()
	defer s.startedMu.Unlock()
	if s.controller == nil {
		return ""
	}
	return s.controller.LastSyncResourceVersion()
}

// GetStore returns the indexer.
func (s *Informer) GetStore() cache.Store { return s.indexer }

// GetIndexer returns the indexer.
func (s *Informer) GetIndexer() cache.Indexer { return s.indexer }

// AddIndexers adds indexes, backfilled from the cached objects.
func (s *Informer) AddIndexers(indexers cache.Indexers) error {
	s.startedMu.Lock()
	defer s.startedMu.Unlock()
	if s.stopped {
		return errIndexerNotAdded
	}
	return s.indexer.AddIndexers(indexers)
}

type dummyController struct{ s *Informer }

func (c dummyController) RunWithContext(context.Context)      {}
func (c dummyController) Run(<-chan struct{})                 {}
func (c dummyController) HasSynced() bool                     { return c.s.HasSynced() }
func (c dummyController) HasSyncedChecker() cache.DoneChecker { return c.s.HasSyncedChecker() }
func (c dummyController) LastSyncResourceVersion() string     { return c.s.LastSyncResourceVersion() }

// GetController returns a Controller whose Run does nothing (as
// client-go's shared informers do).
func (s *Informer) GetController() cache.Controller { return dummyController{s} }

// SetWatchErrorHandler sets the handler called when a list or watch fails.
func (s *Informer) SetWatchErrorHandler(handler cache.WatchErrorHandler) error {
	return s.SetWatchErrorHandlerWithContext(func(_ context.Context, r *cache.Reflector, err error) { handler(r, err) })
}

// SetWatchErrorHandlerWithContext sets the handler called when a list or
// watch fails. Only before Run.
func (s *Informer) SetWatchErrorHandlerWithContext(handler cache.WatchErrorHandlerWithContext) error {
	s.startedMu.Lock()
	defer s.startedMu.Unlock()
	if s.started {
		return errAlreadyStarted
	}
	s.watchErrorHandler = handler
	return nil
}

// SetTransform sets the function applied to every object before it is
// stored (and so before it is written to disk). Only before Run. Give its
// fingerprint as InformerOptions.TransformID.
func (s *Informer) SetTransform(handler cache.TransformFunc) error {
	s.startedMu.Lock()
	defer s.startedMu.Unlock()
	if s.started {
		return errAlreadyStarted
	}
	if handler != nil && s.transformID == "" {
		// Objects are stored after the transform, and the file's identity
		// cannot tell one transform from another without its fingerprint.
		s.logger.Info("Warning: SetTransform without InformerOptions.TransformID: a file saved with another transform (or none) is resumed as if it held transformed objects")
	}
	s.transform = handler
	return nil
}

// IsStopped reports whether the informer has stopped.
func (s *Informer) IsStopped() bool {
	s.startedMu.Lock()
	defer s.startedMu.Unlock()
	return s.stopped
}

// AddEventHandler adds a handler with the default resync period.
func (s *Informer) AddEventHandler(handler cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	return s.AddEventHandlerWithOptions(handler, cache.HandlerOptions{})
}

// AddEventHandlerWithResyncPeriod adds a handler with its own resync period.
func (s *Informer) AddEventHandlerWithResyncPeriod(handler cache.ResourceEventHandler, resyncPeriod time.Duration) (cache.ResourceEventHandlerRegistration, error) {
	return s.AddEventHandlerWithOptions(handler, cache.HandlerOptions{ResyncPeriod: &resyncPeriod})
}

const minimumResyncPeriod = time.Second

// AddEventHandlerWithOptions adds a handler. A handler added while the
// informer runs first receives the current objects as Adds with
// isInInitialList true, as in client-go (with InformerOptions.ChangedFirst,
// those changed while a warm start was down come first, with
// isInInitialList false).
func (s *Informer) AddEventHandlerWithOptions(handler cache.ResourceEventHandler, options cache.HandlerOptions) (cache.ResourceEventHandlerRegistration, error) {
	return s.addHandler(handler, options, nil)
}

// addHandler adds a handler; since, when not nil, is the position it
// resumes from (AddEventHandlerSince).
func (s *Informer) addHandler(handler cache.ResourceEventHandler, options cache.HandlerOptions, since *string) (cache.ResourceEventHandlerRegistration, error) {
	s.startedMu.Lock()
	defer s.startedMu.Unlock()
	if s.stopped {
		return nil, errHandlerNotAdded(handler)
	}
	logger := ptr.Deref(options.Logger, s.logger)
	resyncPeriod := ptr.Deref(options.ResyncPeriod, s.defaultEventHandlerResyncPeriod)
	if resyncPeriod > 0 {
		if resyncPeriod < minimumResyncPeriod {
			logger.Info("Warning: resync period is too small. Changing it to the minimum allowed value", "resyncPeriod", resyncPeriod, "minimumResyncPeriod", minimumResyncPeriod)
			resyncPeriod = minimumResyncPeriod
		}
		if resyncPeriod < s.resyncCheckPeriod {
			if s.started {
				logger.Info("Warning: resync period is smaller than resync check period and the informer has already started. Changing it to the resync check period", "resyncPeriod", resyncPeriod, "resyncCheckPeriod", s.resyncCheckPeriod)
				resyncPeriod = s.resyncCheckPeriod
			} else {
				s.resyncCheckPeriod = resyncPeriod
				s.processor.ResyncCheckPeriodChanged(resyncPeriod)
			}
		}
	}
	lopts := processor.ListenerOptions{
		Logger:                options.Logger,
		RequestedResyncPeriod: resyncPeriod,
		ResyncPeriod:          processor.DetermineResyncPeriod(logger, resyncPeriod, s.resyncCheckPeriod),
		Synced:                handlersSyncedChecker{s},
	}
	var l *processor.Listener
	if !s.started {
		if since != nil {
			s.resumeBeforeRun(&lopts, *since)
		}
		l = s.processor.AddListener(handler, lopts)
	} else {
		s.lockAfterInitial()
		var rest func(*processor.Listener)
		if since != nil {
			s.resumeLocked(&lopts, *since)
		} else {
			rest = s.lateLocked(&lopts, s.changedFirst)
		}
		l = s.processor.AddListener(handler, lopts)
		if rest == nil {
			s.blockDeltas.Unlock()
		} else {
			// The rest of the initial list is queued holding blockDeltas
			// (no event overtakes it), on a goroutine that inherits the
			// lock: the handler is registered, and works, meanwhile.
			s.lateWG.Go(func() {
				defer s.blockDeltas.Unlock()
				rest(l)
			})
		}
	}
	s.listeners[l] = struct{}{}
	if since != nil {
		s.resuming[l] = true
		s.resumers.Add(1)
	}
	return l, nil
}

// listenerDepths returns each handler's buffered notifications.
func (s *Informer) listenerDepths() map[string]int {
	s.startedMu.Lock()
	defer s.startedMu.Unlock()
	out := make(map[string]int, len(s.listeners))
	for l := range s.listeners {
		out[l.Name()] += l.Pending()
	}
	return out
}

// RemoveEventHandler removes a handler: after it returns the handler gets
// at most the one notification already taken for delivery (wait on the
// registration with cache.ShutDownEventHandler to be sure).
func (s *Informer) RemoveEventHandler(handle cache.ResourceEventHandlerRegistration) error {
	s.startedMu.Lock()
	defer s.startedMu.Unlock()
	s.blockDeltas.Lock()
	defer s.blockDeltas.Unlock()
	if l, ok := handle.(*processor.Listener); ok {
		if _, mine := s.listeners[l]; mine && s.resuming[l] {
			s.resumers.Add(-1)
			delete(s.resuming, l)
		}
		delete(s.listeners, l)
	}
	return s.processor.RemoveListener(handle)
}
