package indexer

import (
	"fmt"
	"maps"
	"slices"

	"github.com/boltinformer/boltinformer/store"
)

// Whatever the indexer accepts, it persists, or it says so and holds the
// file back.
//
// Every key and index value is storable (the store escapes those bbolt
// cannot hold), and so is every object of the example's type, an
// unstructured object, or an object of a kind the codec's scheme knows
// (what a transform returns): its record names its type (Record.Type),
// which the state record lists (State.Types), so that a record of a type
// this informer never wrote is not taken for one of its objects.
//
// An object that cannot be stored (a transform returned a type no scheme
// knows, or an object without metadata; or, rarer, its encoding failed)
// is kept in memory, as client-go would, and named in unpersisted. While
// any is, Pending hands over nothing of this informer: its state record
// stays at the last resourceVersion whose objects the file holds (so the
// file is still exactly a past state), Flush and Close return an error
// wrapping ErrNotPersisted, and the informer reports it (Health,
// DB.Healthy, a metric). Its pending mutations stay queued, one per key.
// Commits resume when the object is deleted or replaced by a storable one.

// checkStorableLocked notes whether obj, just put under key, can be
// written, and the type its record will name.
func (x *Indexer) checkStorableLocked(key string, obj any) {
	typ, err := x.codec.TypeOf(obj)
	if err != nil {
		x.markUnpersistedLocked(key, err)
		return
	}
	delete(x.unpersisted, key)
	if typ == "" {
		return
	}
	if cur := *x.types.Load(); !cur[typ] {
		next := maps.Clone(cur)
		next[typ] = true
		x.types.Store(&next)
		x.stateDirty = true
	}
}

// markUnpersistedLocked records that key's object in memory cannot be
// written, logging the first of a run.
func (x *Indexer) markUnpersistedLocked(key string, err error) {
	if len(x.unpersisted) == 0 {
		x.logger.Error(err, "Object cannot be persisted: the cache file stays at its last resourceVersion until it is deleted or replaced", "key", key, "savedResourceVersion", x.saved.ResourceVersion)
	}
	x.unpersisted[key] = err
}

// typesLocked are the state record's Types.
func (x *Indexer) typesLocked() []string {
	cur := *x.types.Load()
	if len(cur) == 0 {
		return nil
	}
	return slices.Sorted(maps.Keys(cur))
}

// loadTypes sets the types the file's state record names.
func (x *Indexer) loadTypes(types []string) {
	m := make(map[string]bool, len(types))
	for _, t := range types {
		m[t] = true
	}
	x.types.Store(&m)
}

// checkType returns an error wrapping store.ErrCorrupt when a record names
// a type the informer never wrote.
func (x *Indexer) checkType(key string, r *store.Record) error {
	if r.Type == "" || (*x.types.Load())[r.Type] {
		return nil
	}
	return fmt.Errorf("%w: record %q is of type %q, which this informer's state does not name", store.ErrCorrupt, key, r.Type)
}

// Hold makes the indexer commit nothing (Pending hands over nothing) until
// Release: what it applies is kept in memory and queued, one op per key,
// and the file stays at its saved state. An informer holds a warm start's
// commits until it is fresh, so that a process killed before then resumes
// from the same saved resourceVersion and applies the same catch-up again
// (ReplayDownDeletes). While held, Flush returns an error wrapping ErrHeld
// and Close commits nothing.
func (x *Indexer) Hold() {
	x.mu.Lock()
	x.held = true
	x.mu.Unlock()
}

// Release ends Hold: the next group commit writes everything applied
// since. It reports whether the commits were held.
func (x *Indexer) Release() bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	was := x.held
	x.held = false
	return was
}

// Held reports whether the commits are held (Hold).
func (x *Indexer) Held() bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.held
}

// heldErrLocked is the error Flush returns while the commits are held.
func (x *Indexer) heldErrLocked() error {
	if !x.held {
		return nil
	}
	return fmt.Errorf("%w: informer %q: the file stays at resourceVersion %q until Release", ErrHeld, x.name, x.saved.ResourceVersion)
}

// Unpersisted returns how many objects in memory cannot be written to the
// file, and why for one of them (nil when none): while there are any, the
// file stays at the resourceVersion of SavedState.
func (x *Indexer) Unpersisted() (int, error) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.unpersisted), x.unpersistedErrLocked()
}

// unpersistedErrLocked is the error Flush and Close return while objects
// cannot be written, naming the first key.
func (x *Indexer) unpersistedErrLocked() error {
	if len(x.unpersisted) == 0 {
		return nil
	}
	keys := slices.Sorted(maps.Keys(x.unpersisted))
	return fmt.Errorf("%w: informer %q: %d object(s), the first %q: %w; the file stays at resourceVersion %q",
		ErrNotPersisted, x.name, len(keys), keys[0], x.unpersisted[keys[0]], x.saved.ResourceVersion)
}
