package boltinformer

import (
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer/indexer"
)

// The window kept in the file (format version 5, docs/FORMAT.md section
// 7d): the last changes the informer's observers were given, written with
// each group commit in the same transaction as the objects they change.
// The next process's first observer gets them (ObservedState.Window): the
// local API's watches then resume after a restart, kill -9 included, from
// any resourceVersion its window held.

// WindowChange is one change of the window kept in the file.
type WindowChange struct {
	// Change is the change as Observe delivered it: Type ChangeUpsert or
	// ChangeDelete, Key, Object (after the change; a delete's final
	// state) and ResourceVersion (the informer's after it).
	Change
	// Prev is the object before the change (nil for an add).
	Prev runtime.Object
	// PrevResourceVersion is the informer's resourceVersion before the
	// change (of the change or bookmark before it).
	PrevResourceVersion string
}

// KeepWindow makes the informer keep, in its file, the newest n changes
// its observers are given (Observe), so that the first observer of the
// next process gets them with the content (ObservedState.Window); n <= 0
// keeps none. The window is written in the same transaction as the objects
// it changes: after any stop it ends where they do. It holds only what was
// observed: changes committed while no observer was registered, or a
// relist, clear it. Its cost: each change's object and the one before it,
// encoded (and sealed) as records, written once more, and at most n
// changes in the file.
func (s *Informer) KeepWindow(n int) {
	s.indexer.SetWindow(n, s.windowChanges, s.windowLock)
}

// windowLock holds the informer's changes (blockDeltas) while the indexer
// takes a batch, so that the batch holds the mutations of exactly the
// changes numbered up to its mark: the loop applies a change to the
// indexer, then numbers it, both under blockDeltas. It takes nothing when
// no observer is registered (no change is numbered then), and so never
// waits for Observe, which holds blockDeltas while it flushes before it
// registers the first observer.
func (s *Informer) windowLock() func() {
	for {
		if !s.observing() {
			s.windowLocked = false
			return func() {}
		}
		if s.blockDeltas.TryLock() {
			s.windowLocked = true
			return s.blockDeltas.Unlock
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// windowChanges is the indexer's WindowSource: the changes queued for the
// observers up to mark, each with the object and resourceVersion before
// it, as the observers' view applies them (an upsert of the same object is
// no change; a delete of an unknown key moves only the resourceVersion).
func (s *Informer) windowChanges(mark uint64) ([]indexer.WindowChange, bool, bool) {
	if !s.windowLocked {
		// The batch was taken while no observer was registered: changes
		// may have been applied without their numbers.
		return nil, false, false
	}
	ob := &s.obs
	ob.mu.Lock()
	defer ob.mu.Unlock()
	if !ob.tracking {
		return nil, false, false
	}
	reset := ob.windowReset || !ob.onDisk
	prevRV := ob.baseRV
	over := map[string]runtime.Object{} // the state after the changes so far, where it differs from base
	replaced := false                   // over is the whole state (a relist)
	lookup := func(key string) runtime.Object {
		if o, ok := over[key]; ok || replaced {
			return o
		}
		return ob.base[key]
	}
	var out []indexer.WindowChange
	for _, q := range ob.queue {
		if q.seq > mark {
			break
		}
		c := q.c
		switch c.Type {
		case ChangeUpsert:
			prev := lookup(c.Key)
			if prev == c.Object {
				continue // a resync: no change
			}
			out = append(out, indexer.WindowChange{Key: c.Key, Object: c.Object, Prev: prev, ResourceVersion: c.ResourceVersion, PrevResourceVersion: prevRV})
			over[c.Key] = c.Object
		case ChangeDelete:
			prev := lookup(c.Key)
			if prev != nil {
				final := c.Object
				if final == nil {
					final = prev
				}
				out = append(out, indexer.WindowChange{Delete: true, Key: c.Key, Object: final, Prev: prev, ResourceVersion: c.ResourceVersion, PrevResourceVersion: prevRV})
				over[c.Key] = nil
			}
		case ChangeReplace:
			// The events between are not known: the window starts over.
			out, reset, replaced = nil, true, true
			over = map[string]runtime.Object{}
			for _, o := range c.Objects {
				if ro, ok := o.(runtime.Object); ok {
					if key, err := cache.MetaNamespaceKeyFunc(ro); err == nil {
						over[key] = ro
					}
				}
			}
		}
		if c.ResourceVersion != "" {
			prevRV = c.ResourceVersion
		}
	}
	if reset {
		ob.windowResetAt = mark
	}
	return out, reset, true
}

// windowCommittedLocked notes that the batch of mark is on disk: a reset it
// carried is done. Caller holds obs.mu.
func (ob *observerSet) windowCommittedLocked(mark uint64) {
	if ob.windowReset && ob.windowResetAt != 0 && mark >= ob.windowResetAt {
		ob.windowReset, ob.windowResetAt = false, 0
	}
}

// fileWindow reads the window the file holds, for a first observer; nil
// when the informer keeps none, or it cannot be read (logged: the
// observer's watches from before this start relist).
func (s *Informer) fileWindow() []WindowChange {
	chs, err := s.indexer.Window()
	if err != nil {
		s.logger.Error(err, "The window of changes in the cache file cannot be read: watches from before this start relist")
		return nil
	}
	out := make([]WindowChange, 0, len(chs))
	for _, c := range chs {
		w := WindowChange{Change: Change{Type: ChangeUpsert, Key: c.Key, Object: c.Object, ResourceVersion: c.ResourceVersion},
			Prev: c.Prev, PrevResourceVersion: c.PrevResourceVersion}
		if c.Delete {
			w.Type = ChangeDelete
		}
		out = append(out, w)
	}
	return out
}
