package boltinformer

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/boltinformer/boltinformer/recovery"
	"github.com/boltinformer/boltinformer/store"
)

// Options configure Open. A nil *Options means the defaults.
type Options struct {
	// LockTimeout is how long to wait for another process's file lock.
	// Default DefaultLockTimeout.
	LockTimeout time.Duration
	// FailOnCorrupt returns the error for a corrupt file instead of
	// quarantining it (renaming it aside) and starting cold.
	FailOnCorrupt bool
	// Verify runs the full integrity check when the file is opened.
	Verify bool
	// CommitMaxOps and CommitMaxDelay bound a group commit: a batch is
	// written when this many mutations are pending or this long after the
	// first. Defaults 1000 and 100ms.
	CommitMaxOps   int
	CommitMaxDelay time.Duration
	// NoSync skips fsync (tests and benchmarks only: it gives up
	// durability).
	NoSync bool
	// InitialMmapSize is passed to bbolt (see store.Options.InitialMmapSize):
	// zero maps at least 1 GiB of address space on 64-bit, so that a growing
	// file is not remapped (which copies every dirty node); negative means
	// bbolt's default.
	InitialMmapSize int
	// Logger; default klog.Background().
	Logger *klog.Logger
	// Clock drives every timer of the DB and its informers: the group
	// commit's delay, the reflector's backoff after a failed list or
	// watch and its resync timer, the handlers' resync periods and the
	// pause after a recovered handler panic, and the times stamped in
	// state records and health. Default the real clock. A fake clock
	// (k8s.io/utils/clock/testing) lets a test step through all of them.
	Clock clock.WithTicker
	// BeforeCommit is a test hook called inside every write transaction;
	// an error aborts the commit (see store.Options.BeforeCommit).
	BeforeCommit func() error
	// OnCommit, when set, is called after every commit attempt, on the
	// commit loop: it must return quickly.
	OnCommit func(CommitInfo)
	// MaxCorruptFiles bounds the disk that damage takes: no copy of the
	// file is kept for a damaged record (see docs/RELIABILITY.md) while
	// this many files named <path>.corrupt-* (such copies and quarantined
	// files) lie beside it. Default DefaultMaxCorruptFiles (3); negative
	// means no copies. One copy is kept per damage, not per start.
	MaxCorruptFiles int
	// Registerer, when set, gets the DB's Prometheus metrics (commits and
	// their latency, objects, saved resourceVersion age, relists, watch
	// restarts, warm/cold starts, file size, handler backlogs).
	Registerer prometheus.Registerer
}

// DB is an open cache file shared by the informers built on it, with one
// group-commit loop for all of them.
type DB struct {
	store     *store.DB
	committer *store.Committer
	// checkpoints are the file's checkpoints (checkpoint.go).
	checkpoints *checkpoints
	report      recovery.Report
	logger      klog.Logger
	clock       clock.WithTicker
	stop        context.CancelFunc
	done        chan struct{}
	metrics     *metrics
	reg         prometheus.Registerer

	failOnCorrupt   bool
	maxCorruptFiles int

	// mu guards informers, reserved, used, closing, dropping, releaseErrs
	// and closed. Lock order: mu is a leaf (no other lock is taken while
	// it is held).
	mu        sync.Mutex
	informers map[string]*Informer
	// reserved are the names of the informers NewInformer is building:
	// a name is reserved before anything is read or joined, so a
	// refused call touches nothing. building counts them: Close waits
	// for them before it stops the commit loop.
	reserved map[string]struct{}
	// used are the names of every informer registered since Open
	// (DropUnused leaves them); closing counts, by name, the stopped
	// informers whose indexer is being closed (its last flush and
	// envelope snapshot still write); dropping are the names a drop is
	// removing from the file, each with a channel closed when it is done
	// (NewInformer of such a name waits for it).
	used     map[string]struct{}
	closing  map[string]int
	dropping map[string]chan struct{}
	// releaseErrs are the errors of closing stopped informers' indexers
	// (unregister), which Close returns.
	releaseErrs []error
	building    sync.WaitGroup
	closed      bool
}

// Open opens (or creates) the cache file at path and starts its commit
// loop. A corrupt file is quarantined (renamed to
// <path>.corrupt-<timestamp>, kept) and a new one started, unless
// FailOnCorrupt; a locked file returns an error wrapping ErrLocked after
// LockTimeout; a symbolic link at path (dangling or not) returns an error
// wrapping ErrForeign, and nothing is created.
func Open(path string, opts *Options) (*DB, error) {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	logger := klog.Background()
	if o.Logger != nil {
		logger = *o.Logger
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	policy := recovery.Quarantine
	if o.FailOnCorrupt {
		policy = recovery.Fail
	}
	sdb, report, err := recovery.OpenStore(path, &recovery.Options{
		Policy: policy,
		Verify: o.Verify,
		Store: &store.Options{
			Timeout:         o.LockTimeout,
			NoSync:          o.NoSync,
			InitialMmapSize: o.InitialMmapSize,
			Clock:           o.Clock,
			BeforeCommit:    o.BeforeCommit,
		},
		Clock:  o.Clock,
		Logger: &logger,
	})
	if err != nil {
		return nil, fmt.Errorf("boltinformer: open %s: %w", path, err)
	}
	db := &DB{
		failOnCorrupt:   o.FailOnCorrupt,
		maxCorruptFiles: o.MaxCorruptFiles,
		store:           sdb,
		report:          report,
		logger:          logger,
		clock:           o.Clock,
		informers:       map[string]*Informer{},
		reserved:        map[string]struct{}{},
		used:            map[string]struct{}{},
		closing:         map[string]int{},
		dropping:        map[string]chan struct{}{},
		done:            make(chan struct{}),
	}
	db.metrics = newMetrics(db)
	userOnCommit := o.OnCommit
	db.committer = store.NewCommitter(sdb, &store.CommitterOptions{
		MaxOps:   o.CommitMaxOps,
		MaxDelay: o.CommitMaxDelay,
		Clock:    o.Clock,
		OnCommit: func(info store.CommitInfo) {
			db.metrics.onCommit(info)
			if userOnCommit != nil {
				userOnCommit(CommitInfo(info))
			}
		},
	})
	if o.Registerer != nil {
		for _, c := range db.metrics.collectors() {
			if err := o.Registerer.Register(c); err != nil {
				_ = sdb.Close()
				return nil, fmt.Errorf("boltinformer: register metrics: %w", err)
			}
		}
		db.reg = o.Registerer
	}
	if err := db.loadCheckpoints(); err != nil {
		_ = sdb.Close()
		return nil, err
	}
	db.committer.Add(db.checkpoints)
	ctx, cancel := context.WithCancel(context.Background())
	db.stop = cancel
	go func() {
		defer close(db.done)
		db.committer.Run(ctx)
	}()
	return db, nil
}

// keepCopy keeps one copy of the file per damage (recovery.KeepCopy):
// the damage is informer's records at keys ("" is its state record), as
// they are in the file now, or, when none of them is there any more, what
// (an error's text). It is what is kept when damage is found after Open,
// which cannot rename a file its other informers use.
func (db *DB) keepCopy(informer string, keys []string, what string) (recovery.Copy, error) {
	var ids []string
	err := db.store.View(func(tx *store.Tx) error {
		for _, k := range keys {
			raw := tx.GetRaw(informer, k)
			if k == "" {
				raw = tx.StateRaw(informer)
			}
			if raw != nil {
				ids = append(ids, recovery.DamageID(informer, k, raw))
			}
		}
		return nil
	})
	if err != nil || len(ids) == 0 {
		ids = []string{recovery.DamageID(informer, what, nil)}
	}
	cp, err := recovery.KeepCopy(db.store, ids, &recovery.CopyOptions{Clock: db.clock, MaxFiles: db.maxCorruptFiles})
	if err != nil {
		return cp, fmt.Errorf("boltinformer: keep a copy of %s: %w", db.store.Path(), err)
	}
	return cp, nil
}

// logCopy logs what keepCopy did about damage found (cause).
func logCopy(logger klog.Logger, msg string, cause error, cp recovery.Copy, err error, kv ...any) {
	switch {
	case err != nil:
		logger.Error(errors.Join(cause, err), msg+"; could not keep a copy of the cache file", kv...)
	case cp.Written:
		logger.Error(cause, msg+"; kept a copy of the cache file", append(kv, "copy", cp.Path)...)
	case cp.Path != "":
		logger.Error(cause, msg+"; a copy of the cache file with this damage was kept already", append(kv, "copy", cp.Path)...)
	default:
		logger.Error(cause, msg+"; no copy of the cache file kept", append(kv, "why", cp.Skipped)...)
	}
}

// Defaults of Options.
const (
	// DefaultLockTimeout is Options.LockTimeout's default.
	DefaultLockTimeout = store.DefaultLockTimeout
	// DefaultMaxCorruptFiles is Options.MaxCorruptFiles' default.
	DefaultMaxCorruptFiles = recovery.DefaultMaxFiles
)

// CommitInfo describes one group commit attempt (Options.OnCommit).
type CommitInfo struct {
	// Informers are the names of the informers in the transaction.
	Informers []string
	// Ops is the number of object mutations written.
	Ops int
	// Bytes is the size of the encoded records written.
	Bytes int
	// Duration is the time the transaction took, fsync included.
	Duration time.Duration
	// Err is the error, or nil.
	Err error
}

// RecoveryReport says what Open did about a damaged file (DB.Recovery).
type RecoveryReport struct {
	// Quarantined is the path the corrupt file was renamed to (kept), or
	// "" when the file was sound.
	Quarantined string
	// Cause is why it was quarantined (an error wrapping ErrCorrupt), or
	// nil.
	Cause error
}

// Store returns the underlying store of package store: a layer below the
// root package, for tools and tests (integrity checks, repair, raw
// records). Programs need none of it.
func (db *DB) Store() *store.DB { return db.store }

// Recovery returns what Open did about a damaged file.
func (db *DB) Recovery() RecoveryReport { return RecoveryReport(db.report) }

// Flush commits every informer's pending mutations now.
func (db *DB) Flush(ctx context.Context) error { return db.committer.Flush(ctx) }

// LastCommitError returns the error of the last group commit, or nil.
func (db *DB) LastCommitError() error { return db.committer.LastError() }

// Close flushes, stops the commit loop and closes the file. Stop the
// informers first (cancel their Run context and wait): Close does not stop
// them. Closing twice is not an error.
func (db *DB) Close() error {
	db.mu.Lock()
	if db.closed {
		db.mu.Unlock()
		return nil
	}
	db.closed = true
	db.mu.Unlock()
	// An informer being built joins the commit loop and the informers
	// Close closes, or gives its name back, before the loop stops; a
	// stopped informer's indexer being closed (unregister) finishes.
	db.building.Wait()
	db.stop()
	<-db.done // Run's exit includes a final flush
	if db.reg != nil {
		for _, c := range db.metrics.collectors() {
			db.reg.Unregister(c)
		}
	}
	// Closing an indexer flushes the shared committer (the first one
	// writes whatever is left for all) and stops its background decoding,
	// which reads the file.
	db.mu.Lock()
	flushErr := errors.Join(db.releaseErrs...)
	db.mu.Unlock()
	for _, inf := range db.snapshotInformers() {
		if err := inf.closeIndexer(); err != nil && flushErr == nil {
			flushErr = err
		}
	}
	if err := db.store.Close(); err != nil {
		return err
	}
	if flushErr != nil {
		return fmt.Errorf("boltinformer: final flush: %w", flushErr)
	}
	return nil
}

func (db *DB) snapshotInformers() []*Informer {
	db.mu.Lock()
	defer db.mu.Unlock()
	out := make([]*Informer, 0, len(db.informers))
	for _, inf := range db.informers {
		out = append(out, inf)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// reserve claims name for an informer NewInformer is about to build: it
// is refused (ErrClosed, ErrInformerExists) before anything is read from
// the file or joins the commit loop. Each reserve that succeeds is ended
// by exactly one register or release.
func (db *DB) reserve(name string) error {
	db.mu.Lock()
	defer db.mu.Unlock()
	for {
		ch, ok := db.dropping[name]
		if !ok {
			break
		}
		// A drop is removing the name's data: the informer starts after
		// it, cold.
		db.mu.Unlock()
		<-ch
		db.mu.Lock()
	}
	if db.closed {
		return ErrClosed
	}
	if _, ok := db.informers[name]; ok {
		return fmt.Errorf("%w: %q", ErrInformerExists, name)
	}
	if _, ok := db.reserved[name]; ok {
		return fmt.Errorf("%w: %q (being built)", ErrInformerExists, name)
	}
	db.reserved[name] = struct{}{}
	db.building.Add(1)
	return nil
}

// unregister releases inf's name once its Run has returned: its indexer is
// closed (flushed, its envelope snapshot written, out of the commit loop;
// it still serves reads) and a new informer of the same name may be built,
// which resumes from what inf wrote (controller-runtime's RemoveInformer
// and re-creation).
func (db *DB) unregister(inf *Informer) {
	db.mu.Lock()
	if db.closed {
		db.mu.Unlock()
		return // Close closes (or has closed) the indexer with the file
	}
	if db.informers[inf.name] == inf {
		delete(db.informers, inf.name)
	}
	db.building.Add(1) // Close waits for the indexer's close
	db.closing[inf.name]++
	db.mu.Unlock()
	defer func() {
		db.mu.Lock()
		if db.closing[inf.name]--; db.closing[inf.name] == 0 {
			delete(db.closing, inf.name)
		}
		db.mu.Unlock()
		db.building.Done()
	}()
	if err := inf.closeIndexer(); err != nil {
		// Its last flush failed: the file holds its last commit. Close
		// reports it too, as it would have had the informer still run.
		inf.logger.Error(err, "Closing the stopped informer's indexer")
		db.mu.Lock()
		db.releaseErrs = append(db.releaseErrs, err)
		db.mu.Unlock()
	}
}

// Release gives back the name of an informer that will never run: one
// built and then dropped before Run (controller-runtime's RemoveInformer
// before the cache started). Its indexer is closed, which commits what it
// holds (so the saved resourceVersion and objects stay as they were), and
// an informer of the same name may be built again on db, resuming from
// the file. A Run after Release returns at once (logging client-go's
// warning for a second Run), and AddEventHandler fails as on a stopped
// informer. An informer that has run is released when its Run returns:
// Release does nothing for it. One whose Run is in progress is an error
// wrapping ErrStarted: cancel its Run's context instead. The error of the
// indexer's last flush is returned (and by Close).
func (db *DB) Release(inf *Informer) error {
	if inf == nil || inf.db != db {
		return fmt.Errorf("boltinformer: release: the informer is not one of this DB's")
	}
	inf.startedMu.Lock()
	switch {
	case inf.stopped:
		inf.startedMu.Unlock()
		return nil
	case inf.started:
		inf.startedMu.Unlock()
		return fmt.Errorf("%w: informer %q is running: cancel its Run instead of releasing it", ErrStarted, inf.name)
	}
	inf.started, inf.stopped = true, true
	inf.startedMu.Unlock()
	db.unregister(inf)
	return inf.closeIndexer()
}

// release gives back a reserved name whose informer was not built.
func (db *DB) release(name string) {
	db.mu.Lock()
	defer db.mu.Unlock()
	delete(db.reserved, name)
	db.building.Done()
}

// register turns name's reservation into the informer inf. A Close that
// began meanwhile waits for it, and closes inf's indexer with the others.
func (db *DB) register(name string, inf *Informer) {
	db.mu.Lock()
	defer db.mu.Unlock()
	delete(db.reserved, name)
	db.informers[name] = inf
	db.used[name] = struct{}{}
	db.building.Done()
}
