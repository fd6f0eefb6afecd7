package boltinformer

import (
	"fmt"
	"slices"
	"time"

	"github.com/boltinformer/boltinformer/store"
)

// An informer's data stays in the file after the program stops using its
// name: a namespace dropped from a controller-runtime cache, a selector
// changed, a kind no longer watched. SavedInformers lists what the file
// holds, DropInformers removes named informers, and DropUnused those no
// informer of this DB has used and that committed nothing for a while.
// Each drop is one bbolt transaction: after a crash (kill -9, power loss)
// the file holds all of the dropped informers or none of them, never a
// part of one.

// SavedInformer is one informer the cache file holds (DB.SavedInformers).
type SavedInformer struct {
	// Name is the informer's name in the file.
	Name string
	// Resource is what it lists, as its state record says
	// (InformerOptions.Resource).
	Resource string
	// Objects is the number of objects it holds.
	Objects int64
	// Created is when its data was first written, LastCommit when it last
	// committed, LastSync when it last completed a list or a resume
	// (zero when its state record has none, or does not decode).
	Created, LastCommit, LastSync time.Time
	// Open is true while an informer of this DB has the name (built and
	// not yet stopped): it cannot be dropped.
	Open bool
	// Used is true when an informer of this DB has had the name since
	// Open (DropUnused leaves it).
	Used bool
	// StateError says why its state record does not decode ("" when it
	// does).
	StateError string
}

// SavedInformers returns every informer the file holds, by name.
func (db *DB) SavedInformers() ([]SavedInformer, error) {
	var out []SavedInformer
	err := db.store.View(func(tx *store.Tx) error {
		for _, name := range tx.Informers() {
			si := SavedInformer{Name: name}
			st, err := tx.State(name)
			switch {
			case err != nil:
				si.StateError = err.Error()
			case st != nil:
				si.Resource, si.Objects = st.Resource, st.Objects
				si.Created, si.LastCommit, si.LastSync = st.Created, st.LastCommit, st.LastSync
			}
			out = append(out, si)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("boltinformer: saved informers: %w", err)
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	for i := range out {
		out[i].Open = db.inUseLocked(out[i].Name)
		_, out[i].Used = db.used[out[i].Name]
	}
	return out, nil
}

// DropInformers removes the named informers from the file: their objects,
// indexes and state, all in one transaction. Refused, with nothing
// removed, while an informer of this DB has one of the names (an error
// wrapping ErrInformerExists: stop it first, by cancelling its Run or by
// Release) or when the file does not hold one (ErrNoInformer). A
// NewInformer of a name being dropped waits for the drop, then starts
// cold. The file does not shrink: bbolt reuses the freed pages (compact it
// offline, cmd/inspect compact, to give them back).
func (db *DB) DropInformers(names ...string) error {
	if len(names) == 0 {
		return nil
	}
	names, done, err := db.claimDrop(slices.Clone(names), false)
	if err != nil {
		return err
	}
	defer done()
	if err := db.store.DeleteInformers(names...); err != nil {
		return fmt.Errorf("boltinformer: drop informers: %w", err)
	}
	db.logger.Info("Dropped informers from the cache file", "informers", names)
	return nil
}

// DropUnused removes, in one transaction, every informer of the file that
// match accepts (nil: every one), that no informer of this DB has used
// since Open (SavedInformer.Used) and whose last commit is older than
// unusedFor by the DB's clock. An informer whose state record does not
// decode, or has no last commit, is left. It returns the names it
// dropped.
//
// Call it once the program has built the informers it uses (at its stop,
// for a program that builds them lazily, as controller-runtime does): an
// informer not yet built when it runs, and unused for longer, is dropped,
// and its next start is cold.
func (db *DB) DropUnused(unusedFor time.Duration, match func(name string) bool) ([]string, error) {
	saved, err := db.SavedInformers()
	if err != nil {
		return nil, err
	}
	now := db.clock.Now()
	var names []string
	for _, si := range saved {
		if si.Open || si.Used || si.StateError != "" || si.LastCommit.IsZero() || now.Sub(si.LastCommit) <= unusedFor {
			continue
		}
		if match == nil || match(si.Name) {
			names = append(names, si.Name)
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	names, done, err := db.claimDrop(names, true)
	if err != nil {
		return nil, err
	}
	defer done()
	if len(names) == 0 {
		return nil, nil
	}
	if err := db.store.DeleteInformers(names...); err != nil {
		return nil, fmt.Errorf("boltinformer: drop unused informers: %w", err)
	}
	db.logger.Info("Dropped informers unused in the cache file", "informers", names, "unusedFor", unusedFor)
	return names, nil
}

// claimDrop marks names as being dropped, so that no informer of these
// names is built until done is called, and returns the names to drop. A
// name in use (an informer built or being built, or a stopped one whose
// indexer is closing) refuses the whole drop; with skipUsed, the names
// used since Open or in use are left out instead (an informer built since
// the caller looked).
func (db *DB) claimDrop(names []string, skipUsed bool) (_ []string, done func(), err error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.closed {
		return nil, nil, ErrClosed
	}
	for _, name := range names {
		if _, dropping := db.dropping[name]; dropping {
			return nil, nil, fmt.Errorf("%w: %q is being dropped", ErrInformerExists, name)
		}
		if db.inUseLocked(name) && !skipUsed {
			return nil, nil, fmt.Errorf("%w: %q is open in this DB: stop it (cancel its Run, or Release it) before dropping it", ErrInformerExists, name)
		}
	}
	if skipUsed {
		names = slices.DeleteFunc(names, func(name string) bool {
			_, used := db.used[name]
			return used || db.inUseLocked(name)
		})
		if len(names) == 0 {
			return nil, func() {}, nil
		}
	}
	ch := make(chan struct{})
	for _, name := range names {
		db.dropping[name] = ch
	}
	db.building.Add(1) // Close waits for the drop
	return names, func() {
		db.mu.Lock()
		for _, name := range names {
			delete(db.dropping, name)
		}
		db.mu.Unlock()
		close(ch)
		db.building.Done()
	}, nil
}

// inUseLocked reports whether an informer of db has name: built, being
// built, or stopped with its indexer still closing. Caller holds mu.
func (db *DB) inUseLocked(name string) bool {
	_, open := db.informers[name]
	_, building := db.reserved[name]
	return open || building || db.closing[name] > 0
}
