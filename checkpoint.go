package boltinformer

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/vmihailenco/msgpack/v5"
	"k8s.io/apimachinery/pkg/util/resourceversion"

	"github.com/boltinformer/boltinformer/store"
)

// Checkpoint is a position kept in the cache file by a consumer of the
// DB's informers (a durable event handler, a controller's queue): up to
// which resourceVersion it has processed each informer's events, and the
// work it has due at a time. At its next start the consumer asks each
// informer for only what changed after its position
// (Informer.AddEventHandlerSince): the file keeps the deletes it would
// otherwise not know of (docs/FORMAT.md sections 7b and 7c).
type Checkpoint struct {
	// Positions maps an informer's name to the resourceVersion up to
	// which every one of its events has been processed.
	Positions map[string]string `msgpack:"positions,omitempty"`
	// Due is work to do at a time, such as a controller-runtime
	// RequeueAfter: a key of the consumer's own, and when.
	Due []Due `msgpack:"due,omitempty"`
	// Updated is when the checkpoint was last set (SetCheckpoint fills
	// it).
	Updated time.Time `msgpack:"updated,omitempty"`
}

// Due is one piece of work a Checkpoint has due at a time.
type Due struct {
	Key string    `msgpack:"key"`
	At  time.Time `msgpack:"at"`
}

// checkpoints are a DB's checkpoints: those read at Open and set since,
// and what the next group commit writes. It is a store.Source.
type checkpoints struct {
	db *DB
	// mu guards the fields below. Lock order: an informer's blockDeltas
	// before mu; the committer calls Pending and Committed without other
	// locks of ours.
	mu    sync.Mutex
	all   map[string]Checkpoint
	dirty map[string]bool // set or dropped since the last batch taken
	// taken are the checkpoints of the batch being committed, with the
	// values it writes (nil: dropped).
	taken map[string]*Checkpoint
	// onDisk are the checkpoints as the file has them: deletes are pruned
	// by these only, so that a prune never reaches the file before the
	// checkpoint that allowed it.
	onDisk map[string]Checkpoint
	// live are the positions of durable handlers, read at each batch:
	// checkpoint name -> informer name -> position.
	live map[string]map[string]func() string
}

// loadCheckpoints reads the file's checkpoints. A checkpoint that does not
// decode is dropped with a log line: its consumer starts over, getting
// every object again (at least once).
func (db *DB) loadCheckpoints() error {
	cps := &checkpoints{db: db, all: map[string]Checkpoint{}, dirty: map[string]bool{}, live: map[string]map[string]func() string{}, onDisk: map[string]Checkpoint{}}
	var raw map[string][]byte
	if err := db.store.View(func(tx *store.Tx) error { raw = tx.Checkpoints(); return nil }); err != nil {
		return fmt.Errorf("boltinformer: read checkpoints: %w", err)
	}
	for name, b := range raw {
		var cp Checkpoint
		if err := msgpack.Unmarshal(b, &cp); err != nil {
			db.logger.Error(err, "A checkpoint in the cache file does not decode: dropped; its consumer gets every object again", "checkpoint", name)
			cps.dirty[name] = true
			continue
		}
		cps.all[name] = cp
		cps.onDisk[name] = cp
	}
	db.checkpoints = cps
	return nil
}

// Checkpoint returns the checkpoint name, as last set or as the file had
// it at Open.
func (db *DB) Checkpoint(name string) (Checkpoint, bool) {
	c := db.checkpoints
	c.mu.Lock()
	defer c.mu.Unlock()
	cp, ok := c.all[name]
	if ok {
		cp.Positions = maps.Clone(cp.Positions)
		cp.Due = slices.Clone(cp.Due)
	}
	return cp, ok
}

// Checkpoints returns the names of the checkpoints, sorted.
func (db *DB) Checkpoints() []string {
	c := db.checkpoints
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Sorted(maps.Keys(c.all))
}

// SetCheckpoint sets the checkpoint name: it is written with the next
// group commit (DB.Flush writes it now). Each informer it names keeps its
// deletes from then on (Informer.AddEventHandlerSince), and drops those
// every checkpoint has passed.
func (db *DB) SetCheckpoint(name string, cp Checkpoint) error {
	if name == "" {
		return fmt.Errorf("boltinformer: SetCheckpoint: empty name")
	}
	cp.Positions = maps.Clone(cp.Positions)
	cp.Due = slices.Clone(cp.Due)
	cp.Updated = db.clock.Now().UTC()
	c := db.checkpoints
	c.mu.Lock()
	c.all[name] = cp
	c.dirty[name] = true
	c.mu.Unlock()
	db.keepDeletesFor(cp)
	db.committer.Notify(1)
	return nil
}

// DropCheckpoint removes the checkpoint name (a consumer gone for good),
// with the next group commit.
func (db *DB) DropCheckpoint(name string) {
	c := db.checkpoints
	c.mu.Lock()
	delete(c.all, name)
	c.dirty[name] = true
	c.mu.Unlock()
	db.committer.Notify(1)
}

// minPosition returns the oldest position any checkpoint on disk has for
// the informer name, and whether one has.
func (c *checkpoints) minPosition(name string) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	min, found := "", false
	for _, cp := range c.onDisk {
		rv, ok := cp.Positions[name]
		if !ok {
			continue
		}
		if !found || olderRV(rv, min) {
			min = rv
		}
		found = true
	}
	return min, found
}

// names reports whether a checkpoint, on disk or set since, has a position
// for the informer name.
func (c *checkpoints) names(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cps := range []map[string]Checkpoint{c.all, c.onDisk} {
		for _, cp := range cps {
			if _, ok := cp.Positions[name]; ok {
				return true
			}
		}
	}
	return false
}

// olderRV reports whether resourceVersion a is before b; when they do not
// compare, a non-empty a is taken as not older (nothing is pruned for it).
func olderRV(a, b string) bool {
	if a == "" {
		return true
	}
	c, err := resourceversion.CompareResourceVersion(a, b)
	return err == nil && c < 0
}

// keepDeletesFor makes the informers cp names keep their deletes from now
// on (a consumer resumes from a position in them).
func (db *DB) keepDeletesFor(cp Checkpoint) {
	for _, inf := range db.snapshotInformers() {
		if _, ok := cp.Positions[inf.name]; ok {
			inf.indexer.KeepDeletes()
		}
	}
}

// prunePositions tells each informer the oldest position of the
// checkpoints on disk that name it: its kept deletes at or before it are
// dropped with the next commit, after the one that wrote those
// checkpoints.
func (db *DB) prunePositions() {
	for _, inf := range db.snapshotInformers() {
		if rv, ok := db.checkpoints.minPosition(inf.name); ok && rv != "" {
			inf.indexer.KeepDeletes()
			inf.indexer.PruneDeletes(rv)
		}
	}
}

// follow keeps checkpoint name's position of informer at what pos
// returns, from now on (a durable handler's). Caller holds no lock of c.
func (c *checkpoints) follow(name, informer string, pos func() string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.live[name]
	if m == nil {
		m = map[string]func() string{}
		c.live[name] = m
	}
	m[informer] = pos
}

// readLiveLocked brings the followed positions into the checkpoints.
// Caller holds mu.
func (c *checkpoints) readLiveLocked() {
	for name, m := range c.live {
		cp := c.all[name]
		for inf, pos := range m {
			rv := pos()
			if rv == "" || rv == cp.Positions[inf] {
				continue
			}
			if cp.Positions == nil {
				cp.Positions = map[string]string{}
			} else if !c.dirty[name] {
				cp.Positions = maps.Clone(cp.Positions)
			}
			cp.Positions[inf] = rv
			cp.Updated = c.db.clock.Now().UTC()
			c.dirty[name] = true
		}
		c.all[name] = cp
	}
}

// Pending implements store.Source.
func (c *checkpoints) Pending() (*store.Batch, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.readLiveLocked()
	if len(c.dirty) == 0 {
		return nil, nil
	}
	out := make(map[string][]byte, len(c.dirty))
	taken := make(map[string]*Checkpoint, len(c.dirty))
	for name := range c.dirty {
		cp, ok := c.all[name]
		if !ok {
			out[name], taken[name] = nil, nil
			continue
		}
		b, err := msgpack.Marshal(&cp)
		if err != nil {
			return nil, fmt.Errorf("boltinformer: encode checkpoint %q: %w", name, err)
		}
		out[name], taken[name] = b, &cp
	}
	c.taken, c.dirty = taken, map[string]bool{}
	return &store.Batch{Checkpoints: out}, nil
}

// Committed implements store.Source: a failed batch's checkpoints are
// written again with the next; a written one lets the informers drop the
// deletes every checkpoint has passed.
func (c *checkpoints) Committed(_ *store.Batch, err error) {
	c.mu.Lock()
	if err != nil {
		for name := range c.taken {
			c.dirty[name] = true
		}
	} else {
		for name, cp := range c.taken {
			if cp == nil {
				delete(c.onDisk, name)
			} else {
				c.onDisk[name] = *cp
			}
		}
	}
	c.taken = nil
	c.mu.Unlock()
	if err == nil {
		// The positions moved: the informers may drop the deletes every
		// checkpoint has passed (with their next commit).
		c.db.prunePositions()
	}
}
