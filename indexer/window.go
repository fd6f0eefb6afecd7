package indexer

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/boltinformer/boltinformer/store"
)

// The window (format version 5, docs/FORMAT.md section 7d): the last
// changes the informer's observers were given, written with each batch in
// the same transaction as the objects, so that the file's window always
// ends where its objects do. A batch whose changes the window cannot hold
// all of clears it.

// WindowChange is one change of the window.
type WindowChange struct {
	// Delete: the object of Key was deleted; else it was added (Prev nil)
	// or replaced Prev.
	Delete bool
	Key    string
	// Object is the object after the change (a delete: its final state);
	// Prev the one before, nil for an add.
	Object, Prev runtime.Object
	// ResourceVersion is the informer's after the change;
	// PrevResourceVersion the one before it.
	ResourceVersion, PrevResourceVersion string
}

// WindowSource gives the changes of a batch for the window: every change
// numbered up to mark (the batch's durability mark, SetDurable) and after
// the last batch committed, in order. reset asks for the window to be
// cleared first (it misses some of the batch's changes); ok false means
// the changes are not known (nothing observes them): the window is
// cleared. Called from the committer, holding no lock of the indexer.
type WindowSource func(mark uint64) (changes []WindowChange, reset, ok bool)

// SetWindow makes the indexer keep the newest keep changes that src gives
// in the file (keep 0: none; every batch that changes objects clears the
// window then). lock, when not nil, is taken while a batch is taken (and
// its mark), and the function it returns releases it: the caller's
// changes are applied and given their numbers under it, so that a batch
// holds the mutations of exactly the changes up to its mark.
func (x *Indexer) SetWindow(keep int, src WindowSource, lock func() (unlock func())) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.windowKeep, x.windowSrc, x.windowLock = keep, src, lock
}

// lockForWindow takes the window's lock (SetWindow) when the indexer keeps
// a window, and returns what releases it.
func (x *Indexer) lockForWindow() func() {
	x.mu.RLock()
	keep, lock := x.windowKeep, x.windowLock
	x.mu.RUnlock()
	if keep <= 0 || lock == nil {
		return func() {}
	}
	return lock()
}

// windowBatch fills the window fields of b, a batch whose durability mark
// is tok's.
func (x *Indexer) windowBatch(b *store.Batch, tok *token, keep int, src WindowSource) {
	changesObjects := len(b.Ops) > 0 || b.Reset
	if keep <= 0 || src == nil || !tok.hasMark {
		b.WindowReset = changesObjects
		return
	}
	chs, reset, ok := src(tok.mark)
	if !ok {
		b.WindowReset = changesObjects
		return
	}
	evs, err := x.encodeWindow(chs)
	if err != nil {
		x.logger.Error(err, "The window of changes cannot be written: it is cleared (watches of the local API from before the next start relist)")
		b.WindowReset = true
		return
	}
	b.WindowReset = reset
	b.Window, b.WindowKeep = evs, keep
}

// encodeWindow encodes changes as the store keeps them, their objects
// sealed as the informer's records are. An object is encoded once: the
// one before a change is, most often, the one after an earlier change of
// the batch or of the last one (x.windowEnc, kept for the next batch).
// Called from Pending only (the committer's goroutine).
func (x *Indexer) encodeWindow(chs []WindowChange) ([]store.WindowEvent, error) {
	if len(chs) == 0 {
		return nil, nil
	}
	buf := &store.RecordBuffer{}
	defer buf.Release()
	enc := x.codec.NewEncoder(buf)
	done := make(map[runtime.Object][]byte, len(chs))
	encode := func(key string, obj runtime.Object) ([]byte, error) {
		if obj == nil {
			return nil, nil
		}
		if b, ok := done[obj]; ok {
			return b, nil
		}
		if b, ok := x.windowEnc[obj]; ok {
			done[obj] = b
			return b, nil
		}
		var r store.Record
		raw, err := enc.Encode(key, obj, &r)
		if err != nil {
			return nil, err
		}
		b := append([]byte(nil), raw...)
		done[obj] = b
		return b, nil
	}
	out := make([]store.WindowEvent, len(chs))
	at := make(map[runtime.Object]int, len(chs)) // an object after a change of the batch: its event, from 1
	for i, c := range chs {
		e := store.WindowEvent{Type: store.WindowUpsert, Key: c.Key, ResourceVersion: c.ResourceVersion, PrevResourceVersion: c.PrevResourceVersion}
		if c.Delete {
			e.Type = store.WindowDelete
		}
		var err error
		if e.Object, err = encode(c.Key, c.Object); err != nil {
			return nil, fmt.Errorf("window event of %q: %w", c.Key, err)
		}
		if j, ok := at[c.Prev]; ok && c.Prev != nil {
			e.PrevAt = j // stored once, in that event
		} else if e.Prev, err = encode(c.Key, c.Prev); err != nil {
			return nil, fmt.Errorf("window event of %q: %w", c.Key, err)
		}
		if c.Object != nil {
			at[c.Object] = i + 1
		}
		out[i] = e
	}
	// The objects after this batch's changes are the ones before the next
	// batch's.
	next := make(map[runtime.Object][]byte, len(chs))
	for _, c := range chs {
		if c.Object != nil && !c.Delete {
			next[c.Object] = done[c.Object]
		}
	}
	x.windowEnc = next
	return out, nil
}

// Window returns the window the file holds, oldest first, decoded. An
// event that does not decode (damage, a key no longer in the keyring) is
// an error: the window is then not to be used.
func (x *Indexer) Window() ([]WindowChange, error) {
	var evs []*store.WindowEvent
	err := x.db.View(func(tx *store.Tx) error {
		var err error
		evs, err = tx.Window(x.name)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("indexer %q: window: %w", x.name, err)
	}
	out := make([]WindowChange, len(evs))
	for i, e := range evs {
		c := WindowChange{Delete: e.Type == store.WindowDelete, Key: e.Key, ResourceVersion: e.ResourceVersion, PrevResourceVersion: e.PrevResourceVersion}
		if e.Object != nil {
			if c.Object, err = x.decodeRecord(e.Key, e.Object); err != nil {
				return nil, fmt.Errorf("indexer %q: window event %d (%q): %w", x.name, i+1, e.Key, err)
			}
		}
		if e.Prev != nil {
			if c.Prev, err = x.decodeRecord(e.Key, e.Prev); err != nil {
				return nil, fmt.Errorf("indexer %q: window event %d (%q): %w", x.name, i+1, e.Key, err)
			}
		}
		out[i] = c
	}
	return out, nil
}
