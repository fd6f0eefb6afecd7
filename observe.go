package boltinformer

import (
	"context"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
)

// ChangeType says what an observed Change did to the informer's cache.
type ChangeType int

const (
	// ChangeUpsert: Object was added, or replaced the object of its key.
	ChangeUpsert ChangeType = iota + 1
	// ChangeDelete: the object of Key was deleted; Object is its final
	// state as the watch delivered it.
	ChangeDelete
	// ChangeReplace: a list replaced the whole content with Objects (a
	// relist: the events between the previous state and this one are not
	// known, only the difference). A relist that read only what changed
	// (InformerOptions.Getter) is one too: Objects is the whole content.
	ChangeReplace
	// ChangeBookmark: the cache is current as of ResourceVersion; no object
	// changed.
	ChangeBookmark
)

// Change is one change the informer applied to its indexer, as an
// observer (Informer.Observe) sees it.
type Change struct {
	Type ChangeType
	// Key is the object's key (namespace/name) for ChangeUpsert and
	// ChangeDelete.
	Key string
	// Object is the object for ChangeUpsert and ChangeDelete. Like every
	// object of an informer it is shared: never mutate it.
	Object runtime.Object
	// Objects is the new content for ChangeReplace (shared, as Object).
	Objects []any
	// ResourceVersion is the indexer's resourceVersion after the change:
	// the object's for ChangeUpsert and ChangeDelete, the list's for
	// ChangeReplace, the bookmark's for ChangeBookmark.
	ResourceVersion string
}

// ObservedState is an informer's content at the instant an observer was
// added: every later change goes to the observer, no earlier one does.
type ObservedState struct {
	// Objects are the indexer's objects (shared: never mutate them).
	Objects []any
	// ResourceVersion is the indexer's resourceVersion ("" before any
	// list).
	ResourceVersion string
	// Synced is true once a complete list is in the cache (from the server,
	// or loaded from a synced file).
	Synced bool
	// Window, for the first observer of a process, is the window of
	// changes the file holds (KeepWindow), oldest first, ending at
	// ResourceVersion's content: the changes observers of the last
	// process were given. Nil for later observers.
	Window []WindowChange
}

// observer is one Observe registration.
type observer struct{ fn func(Change) }

// Observe registers fn to be called with every change the informer applies
// to its indexer from now on, in the order applied, once the change is on
// disk, and returns the content that is on disk just before the first of
// them (objects and resourceVersion that belong together) and a function
// that unregisters fn.
//
// Only what the file holds is observed: a change reaches fn once the group
// commit that writes it has succeeded, so nothing an observer saw is taken
// back by a crash and a restart (the local API serves nothing the file
// could lose). While the informer's commits are held (a warm start with
// ReplayDownDeletes before it is fresh, an object it cannot write,
// Health.NotPersisted) or failing (a full disk), observers see nothing new.
// When Observe is called while what the informer applied is not on disk
// yet, it commits it first, holding the informer's changes for that
// commit; if the commit cannot be made, the state it returns is empty and
// not synced, and fn first gets a ChangeReplace with the content once it
// is on disk. More than 65,536 changes waiting for the disk are folded
// into such a ChangeReplace too.
//
// fn runs on the committer's goroutine, holding the lock that serializes
// the delivery of changes: it must return quickly and never block (copy
// what it needs, drop or bound the rest; a slow fn delays the commits of
// every informer of the DB), and it must not call Observe, the stop
// function, Flush or the informer's handler registration methods. After
// stop returns, fn is not called again. A resync is not a change. Observe
// may be called before or after Run; before a warm start's payloads are
// decoded it waits for them (outside the lock).
func (s *Informer) Observe(fn func(Change)) (ObservedState, func()) {
	// Decode a warm start's lazily loaded objects first, so that the
	// List under the lock below only copies.
	s.indexer.List()
	o := &observer{fn: fn}
	s.blockDeltas.Lock()
	ob := &s.obs
	ob.mu.Lock()
	tracking := ob.tracking
	ob.mu.Unlock()
	if !tracking && !s.indexer.AllDurable() {
		// Commit what was applied, so that the content below is on disk.
		// No change is applied meanwhile (blockDeltas); the committer
		// takes none of the informer's locks but ob.mu, not held here.
		if err := s.indexer.Flush(context.Background()); err != nil {
			s.logger.V(1).Info("Observe: what the informer applied is not on disk yet: the observer gets it once it is", "err", err)
		}
	}
	var window []WindowChange
	if !tracking {
		// What the file holds: consistent with its objects (a commit
		// that changed them without the window cleared it), and no
		// change is applied meanwhile (blockDeltas).
		window = s.fileWindow()
	}
	ob.mu.Lock()
	started := false
	if !ob.tracking {
		// A cold start's cache before its first list is empty, and so is
		// what a restart would serve: on disk in effect.
		empty := s.indexer.Len() == 0 && !s.indexer.Synced()
		ob.startLocked(s.indexer.List(), s.indexer.ResourceVersion(), s.indexer.Synced(), empty || s.indexer.AllDurable())
		started = true
	}
	st := ob.stateLocked()
	if started && ob.onDisk && !tracking {
		st.Window = window
	}
	ob.observers = append(ob.observers, o)
	ob.mu.Unlock()
	s.blockDeltas.Unlock()
	stop := func() {
		ob.mu.Lock()
		defer ob.mu.Unlock()
		for i, x := range ob.observers {
			if x == o {
				ob.observers = append(ob.observers[:i:i], ob.observers[i+1:]...)
				break
			}
		}
		if len(ob.observers) == 0 {
			ob.stopLocked()
		}
	}
	return st, stop
}

// maxUndurable bounds the changes kept for the observers while they are
// not on disk; more are folded into the durable base.
const maxUndurable = 1 << 16

// observerSet is an informer's observers and what they are fed from: the
// content on disk (base) and the changes applied since, in order, each
// with its number (queue). Changes reach the observers when the group
// commit that took them succeeds (durable); until then they wait in queue.
// Kept only while an observer is registered.
type observerSet struct {
	// seq numbers the changes queued; the indexer's durability mark reads
	// it under its own lock.
	seq atomic.Uint64

	// mu guards the fields below. Lock order: the informer's blockDeltas
	// before mu; the committer's durable notice takes mu alone.
	mu        sync.Mutex
	observers []*observer
	tracking  bool
	base      map[string]runtime.Object
	baseRV    string
	baseSync  bool
	baseAt    uint64 // the changes up to it are in base
	// onDisk: base is the file's content. False when the observers started
	// on content not yet committed, or when changes were folded into base
	// (maxUndurable): then the observers get a ChangeReplace of base once
	// the changes up to baseAt are on disk.
	onDisk bool
	queue  []queuedChange
	// windowReset: the file's window misses changes (released before a
	// batch took them, or the base was not the file's): the next batch
	// clears it; windowResetAt is the mark of the batch that does (0: none
	// taken yet). See window.go.
	windowReset   bool
	windowResetAt uint64
}

// queuedChange is a change applied and not yet on disk.
type queuedChange struct {
	seq uint64
	c   Change
}

// startLocked starts keeping the base, from the informer's content (onDisk
// when it is the file's). Caller holds mu and blockDeltas.
func (ob *observerSet) startLocked(objs []any, rv string, synced, onDisk bool) {
	ob.tracking = true
	ob.base = make(map[string]runtime.Object, len(objs))
	ob.replaceBaseLocked(objs)
	ob.baseRV, ob.baseSync, ob.onDisk = rv, synced, onDisk
	// A number of its own: a batch taken for commit before now (a lower
	// mark) may not hold all of the content; one taken after does.
	ob.baseAt = ob.seq.Add(1)
	ob.queue = nil
	ob.windowReset, ob.windowResetAt = !onDisk, 0
}

// stopLocked drops the base and the queue (no observer is left). Caller
// holds mu.
func (ob *observerSet) stopLocked() {
	ob.tracking, ob.base, ob.queue, ob.onDisk = false, nil, nil, false
}

// stateLocked is what a new observer starts from: base, if it is on disk.
// Caller holds mu.
func (ob *observerSet) stateLocked() ObservedState {
	if !ob.onDisk {
		return ObservedState{}
	}
	return ObservedState{Objects: ob.baseListLocked(), ResourceVersion: ob.baseRV, Synced: ob.baseSync}
}

func (ob *observerSet) baseListLocked() []any {
	out := make([]any, 0, len(ob.base))
	for _, o := range ob.base {
		out = append(out, o)
	}
	return out
}

func (ob *observerSet) replaceBaseLocked(objs []any) {
	clear(ob.base)
	for _, o := range objs {
		ro, ok := o.(runtime.Object)
		if !ok {
			continue
		}
		if key, err := cache.MetaNamespaceKeyFunc(ro); err == nil {
			ob.base[key] = ro
		}
	}
}

// applyLocked applies c to base. Caller holds mu.
func (ob *observerSet) applyLocked(c Change) {
	switch c.Type {
	case ChangeUpsert:
		ob.base[c.Key] = c.Object
	case ChangeDelete:
		delete(ob.base, c.Key)
	case ChangeReplace:
		ob.replaceBaseLocked(c.Objects)
		ob.baseSync = true
	}
	if c.ResourceVersion != "" {
		ob.baseRV = c.ResourceVersion
	}
}

// durable is the indexer's durability notice: the changes numbered up to
// mark are on disk.
func (s *Informer) durable(mark uint64) {
	s.obs.mu.Lock()
	defer s.obs.mu.Unlock()
	s.releaseLocked(mark)
	s.obs.windowCommittedLocked(mark)
}

// releaseLocked delivers to the observers, in order, the changes numbered
// up to mark, or every change queued when the indexer has everything it
// applied on disk (their changes were applied before they were queued);
// if the base was not the file's, first a ChangeReplace of the base, once
// it is. Caller holds obs.mu.
func (s *Informer) releaseLocked(mark uint64) {
	ob := &s.obs
	if !ob.tracking {
		return
	}
	batched := mark // the changes up to it were in a committed batch
	if s.indexer.AllDurable() {
		mark = max(mark, ob.seq.Load())
	}
	if !ob.onDisk && mark >= ob.baseAt {
		// The base is the file's now: the observers start over from it
		// (every queued change is after it).
		ob.onDisk = true
		c := Change{Type: ChangeReplace, Objects: ob.baseListLocked(), ResourceVersion: ob.baseRV}
		for _, o := range ob.observers {
			o.fn(c)
		}
	}
	n := 0
	for n < len(ob.queue) && ob.queue[n].seq <= mark {
		n++
	}
	for _, q := range ob.queue[:n] {
		if q.seq > batched && q.c.Type != ChangeBookmark {
			// Released with nothing to write: no batch carried it to
			// the file's window (window.go).
			ob.windowReset, ob.windowResetAt = true, 0
		}
		ob.applyLocked(q.c)
		if ob.onDisk {
			for _, o := range ob.observers {
				o.fn(q.c)
			}
		}
	}
	ob.queue = append(ob.queue[:0:0], ob.queue[n:]...)
	ob.baseAt = max(ob.baseAt, mark)
}

// durableMark is the indexer's durability mark: the number of the last
// change queued.
func (s *Informer) durableMark() uint64 { return s.obs.seq.Load() }

// observeLocked tells the observers that obj was upserted or deleted.
// Caller holds blockDeltas.
func (s *Informer) notifyObjectLocked(t ChangeType, obj any) {
	if !s.observing() {
		return
	}
	c := Change{Type: t}
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		c.Key = d.Key
		obj = d.Obj
	} else if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		c.Key = key
	}
	if ro, ok := obj.(runtime.Object); ok {
		c.Object = ro
		if m, err := meta.Accessor(ro); err == nil {
			c.ResourceVersion = m.GetResourceVersion()
		}
	}
	if c.Key == "" {
		return // the indexer refused it too (no key)
	}
	s.notifyLocked(c)
}

// notifyLocked queues c for the observers: they get it once it is on disk
// (durable). Caller holds blockDeltas.
func (s *Informer) notifyLocked(c Change) {
	ob := &s.obs
	ob.mu.Lock()
	defer ob.mu.Unlock()
	if !ob.tracking {
		return
	}
	ob.queue = append(ob.queue, queuedChange{seq: ob.seq.Add(1), c: c})
	if len(ob.queue) == 1 {
		// Nothing waits for the disk before it: delivered at once if
		// the indexer holds nothing off it (a bookmark at the same
		// resourceVersion changes nothing to write).
		s.releaseLocked(0)
		return
	}
	if len(ob.queue) > maxUndurable {
		// Fold the older half into the base: the observers get a
		// ChangeReplace of it once it is on disk.
		half := len(ob.queue) / 2
		for _, q := range ob.queue[:half] {
			ob.applyLocked(q.c)
		}
		ob.windowReset, ob.windowResetAt = true, 0 // folded: not in the window
		ob.baseAt = ob.queue[half-1].seq
		ob.queue = append(ob.queue[:0:0], ob.queue[half:]...)
		ob.onDisk = false
	}
}

// observing reports whether an observer is registered (changes are kept
// for them).
func (s *Informer) observing() bool {
	s.obs.mu.Lock()
	defer s.obs.mu.Unlock()
	return s.obs.tracking
}

// ObjectType returns the example object the informer was built with.
func (s *Informer) ObjectType() runtime.Object { return s.objectType }

// Resource returns what the informer lists, as given in
// InformerOptions.Resource (a Factory gives the GroupVersionResource, e.g.
// "/v1, Resource=pods").
func (s *Informer) Resource() string { return s.resource }

// Informers returns the DB's informers, sorted by name.
func (db *DB) Informers() []*Informer { return db.snapshotInformers() }

// observeTxnLocked tells the observers about one applied delta of a
// batch. Caller holds blockDeltas.
func (s *Informer) notifyDeltaLocked(d cache.Delta) {
	switch d.Type {
	case cache.Deleted:
		s.notifyObjectLocked(ChangeDelete, d.Object)
	case cache.Replaced, cache.Added, cache.Updated:
		s.notifyObjectLocked(ChangeUpsert, d.Object)
	}
}
