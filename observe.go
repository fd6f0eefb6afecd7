package boltinformer

import (
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
}

// observer is one Observe registration.
type observer struct{ fn func(Change) }

// Observe registers fn to be called with every change the informer applies
// to its indexer from now on, in the order applied, and returns the content
// just before the first of them (objects and resourceVersion that belong
// together) and a function that unregisters fn.
//
// fn runs on the informer loop, holding the lock that serializes the
// informer's changes: it must return quickly and never block (copy what it
// needs, drop or bound the rest; a slow fn delays every handler and the
// cache), and it must not call Observe, the stop function or the informer's
// handler registration methods. After stop returns, fn is not called again.
// A resync is not a change. Observe may be called before or after Run; before
// a warm start's payloads are decoded it waits for them (outside the lock).
func (s *Informer) Observe(fn func(Change)) (ObservedState, func()) {
	// Decode a warm start's lazily loaded objects first, so that the
	// List under the lock below only copies.
	s.indexer.List()
	o := &observer{fn: fn}
	s.blockDeltas.Lock()
	st := ObservedState{
		Objects:         s.indexer.List(),
		ResourceVersion: s.indexer.ResourceVersion(),
		Synced:          s.indexer.Synced(),
	}
	s.observers = append(s.observers, o)
	s.blockDeltas.Unlock()
	stop := func() {
		s.blockDeltas.Lock()
		defer s.blockDeltas.Unlock()
		for i, x := range s.observers {
			if x == o {
				s.observers = append(s.observers[:i:i], s.observers[i+1:]...)
				return
			}
		}
	}
	return st, stop
}

// observeLocked tells the observers that obj was upserted or deleted.
// Caller holds blockDeltas.
func (s *Informer) notifyObjectLocked(t ChangeType, obj any) {
	if len(s.observers) == 0 {
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

// notifyLocked calls every observer with c. Caller holds blockDeltas.
func (s *Informer) notifyLocked(c Change) {
	for _, o := range s.observers {
		o.fn(c)
	}
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
