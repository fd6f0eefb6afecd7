package boltinformer

import (
	"errors"
	"iter"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer/indexer"
	"github.com/boltinformer/boltinformer/processor"
)

// Handlers that know what changed. A warm start knows which objects
// changed, appeared or vanished while the process was down: their
// resourceVersion is after the file's (ChangedSince), and the deletes are
// the catch-up's. Two uses: a late handler gets those first
// (InformerOptions.ChangedFirst), and a handler resuming from a position
// gets nothing else (AddEventHandlerSince): no reconcile storm.

// AddEventHandlerSince adds handler for a consumer that has processed the
// informer's events up to resourceVersion since (the position its
// Checkpoint kept; "" for none). What it is handed first is only what
// changed after since: OnDelete with the last state of each object deleted
// after it, then OnAdd(obj, false) for each object whose resourceVersion
// is after it; nothing for the others. Then the events, as to any handler.
// Added before Run, it gets the same from a warm start's initial list.
//
// HandlerPosition(reg) says up to which resourceVersion the handler has
// returned from every notification: what the consumer may record in its
// checkpoint once the work those notifications started is done.
//
// The informer keeps its deletes in the file from the first such handler
// (docs/FORMAT.md section 7b). When it cannot tell what changed after
// since (its deletes are not kept that far back: the first start with a
// checkpoint, or a cold start), the handler gets every object as
// AddEventHandler gives them, and the reason is logged: at least once,
// never less.
func (s *Informer) AddEventHandlerSince(handler cache.ResourceEventHandler, since string, options cache.HandlerOptions) (cache.ResourceEventHandlerRegistration, error) {
	s.indexer.KeepDeletes()
	return s.addHandler(handler, options, &since)
}

// AddDurableEventHandler adds handler under name, for a handler that does
// its work before it returns: the cache file keeps its position (the
// checkpoint "handler/<informer>/<name>", moved as the handler returns
// from its notifications and written with the group commits), and at the
// next start it resumes from there (AddEventHandlerSince): it gets only
// what changed, appeared or vanished since, not every object. At least
// once: a kill may hand it again what it handled just before. A name is
// one handler's: two handlers under one name share (and race on) one
// position.
func (s *Informer) AddDurableEventHandler(name string, handler cache.ResourceEventHandler, options cache.HandlerOptions) (cache.ResourceEventHandlerRegistration, error) {
	if name == "" {
		return nil, errors.New("boltinformer: AddDurableEventHandler: empty name")
	}
	cp := DurableHandlerCheckpoint(s.name, name)
	saved, _ := s.db.Checkpoint(cp)
	reg, err := s.AddEventHandlerSince(handler, saved.Positions[s.name], options)
	if err != nil {
		return nil, err
	}
	s.db.checkpoints.follow(cp, s.name, func() string { return HandlerPosition(reg) })
	return reg, nil
}

// DurableHandlerCheckpoint is the name of the checkpoint that keeps the
// position of informer's durable handler name (AddDurableEventHandler).
func DurableHandlerCheckpoint(informer, name string) string {
	return "handler/" + informer + "/" + name
}

// HandlerPosition returns the resourceVersion up to which the handler of
// reg, added by AddEventHandlerSince, has returned from every
// notification ("" before the first, or for another registration).
func HandlerPosition(reg cache.ResourceEventHandlerRegistration) string {
	if l, ok := reg.(*processor.Listener); ok {
		return l.Delivered()
	}
	return ""
}

// ChangedSince reports whether obj changed after resourceVersion rv: its
// resourceVersion is later (true when they do not compare, or rv is "").
// With rv the warm start's (Health.SavedResourceVersion at the start),
// what a client-go handler can use to tell the objects changed while the
// process was down from the others in its initial adds.
func ChangedSince(obj any, rv string) bool {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil || rv == "" {
		return true
	}
	c, err := resourceversion.CompareResourceVersion(m.GetResourceVersion(), rv)
	return err != nil || c > 0
}

// ResumedFrom returns the resourceVersion a warm start resumed from (the
// file's at the start), "" for a cold start: ChangedSince of an object and
// it tells whether the object changed while the process was down.
func (s *Informer) ResumedFrom() string {
	if !s.decision.Warm {
		return ""
	}
	return s.resumedFrom
}

// replayFrom returns the position a handler resuming from since is served
// from, or false when the informer cannot tell what changed after it (the
// handler then gets every object). Caller holds startedMu.
func (s *Informer) replayFrom(since string) (string, bool) {
	if since == "" || !s.decision.Warm {
		return "", false
	}
	if _, err := s.indexer.Deletes(since); errors.Is(err, indexer.ErrNotKept) {
		s.logger.Info("A handler resumes from a position the cache file cannot serve (its deletes are not kept that far back): it gets every object", "since", since, "deletesFrom", s.indexer.DeletesFrom())
		return "", false
	}
	return since, true
}

// resumeBeforeRun sets a handler added before Run that resumes from since:
// the deletes after since first; of the warm start's initial adds, only
// the objects changed after since, as adds not in the initial list (a
// controller-runtime priority queue takes them at once). Caller holds
// startedMu.
func (s *Informer) resumeBeforeRun(lopts *processor.ListenerOptions, since string) {
	from, ok := s.replayFrom(since)
	if !ok {
		return
	}
	lopts.Before = s.deletesAfter(from)
	lopts.Filter = func(n processor.Notification) (processor.Notification, bool) {
		a, ok := n.(processor.AddNotification)
		if !ok || !a.InInitialList {
			return n, true
		}
		if !ChangedSince(a.Obj, from) {
			return nil, false
		}
		a.InInitialList = false
		return a, true
	}
}

// resumeLocked sets a handler added while the informer runs that resumes
// from since: the deletes after since, then the objects changed after it,
// as adds not in the initial list, then its position. Caller holds
// startedMu and blockDeltas.
func (s *Informer) resumeLocked(lopts *processor.ListenerOptions, since string) {
	from, ok := s.replayFrom(since)
	if !ok {
		s.lateLocked(lopts, false) // every object: nothing queued after
		return
	}
	lopts.Before = s.deletesAfter(from)
	objs := s.changedSinceLocked(from)
	lopts.InitialList = func(yield func(processor.AddNotification) bool) {
		for _, it := range objs {
			if !yield(processor.AddNotification{Obj: it}) {
				return
			}
		}
	}
	lopts.Progress = s.indexer.ResourceVersion()
}

// changedSinceLocked returns the cached objects changed after
// resourceVersion rv: the keys from the resourceVersions alone, only those
// objects decoded. Caller holds blockDeltas.
func (s *Informer) changedSinceLocked(rv string) []any {
	var keys []string
	s.indexer.Versions(func(_ string, objects iter.Seq2[string, string]) {
		for key, orv := range objects {
			if c, err := resourceversion.CompareResourceVersion(orv, rv); err != nil || c > 0 {
				keys = append(keys, key)
			}
		}
	})
	out := make([]any, 0, len(keys))
	for _, key := range keys {
		if obj, ok, err := s.indexer.GetByKey(key); err == nil && ok {
			out = append(out, obj)
		}
	}
	return out
}

// deletesAfter returns, as notifications, the deletes after since that the
// informer kept, and those of this start's catch-up. Caller holds
// startedMu.
func (s *Informer) deletesAfter(since string) []processor.Notification {
	objs, err := s.indexer.Deletes(since)
	if err != nil {
		s.logger.Error(err, "Reading the kept deletes failed: a handler resuming from a position may miss some", "since", since)
	}
	out := make([]processor.Notification, 0, len(objs))
	for _, o := range objs {
		// A key deleted and created again gets the delete, then the add.
		out = append(out, processor.DeleteNotification{Old: o})
	}
	return out
}

// lateLocked sets a handler added while the informer runs: the deletes of
// a warm start's catch-up (ReplayDownDeletes), then every object as an
// initial add, as in client-go. With ChangedFirst, those changed after the
// warm start's resourceVersion come first and not as initial adds (a
// controller-runtime priority queue takes them before the unchanged), and
// the handler starts on them at once: only they are decoded before it is
// published, and its HasSynced waits for them only; the unchanged ones,
// initial adds, are queued after it, by the function lateLocked returns
// (nil when there is none), still under the lock, while the handler works.
// Caller holds startedMu and blockDeltas.
func (s *Informer) lateLocked(lopts *processor.ListenerOptions, changedFirst bool) func(*processor.Listener) {
	lopts.Before = s.downDeletes
	rv := s.indexer.ResourceVersion()
	if !changedFirst || !s.decision.Warm {
		items := s.indexer.List()
		lopts.InitialList = func(yield func(processor.AddNotification) bool) {
			for _, it := range items {
				if !yield(processor.AddNotification{Obj: it, InInitialList: true}) {
					return
				}
			}
		}
		lopts.Progress = rv
		return nil
	}
	// Only the changed objects are decoded now.
	objs := s.changedSinceLocked(s.resumedFrom)
	changed := make(map[string]bool, len(objs))
	for _, o := range objs {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(o); err == nil {
			changed[key] = true
		}
	}
	lopts.InitialList = func(yield func(processor.AddNotification) bool) {
		for _, it := range objs {
			if !yield(processor.AddNotification{Obj: it}) {
				return
			}
		}
	}
	return func(l *processor.Listener) {
		for _, it := range s.indexer.List() {
			key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(it)
			if err == nil && !changed[key] {
				l.AddLate(it)
			}
		}
		l.QueueProgress(rv)
	}
}

// progressLocked tells the handlers resuming from a position how far the
// informer's notifications go (processor.ProgressNotification). Caller
// holds blockDeltas.
func (s *Informer) progressLocked() {
	if s.resumers.Load() == 0 {
		return
	}
	select {
	case <-s.initialDone:
	default:
		return // the disk answer: distributeInitial's own comes after the initial adds
	}
	if rv := s.indexer.ResourceVersion(); rv != "" {
		s.processor.Distribute(processor.ProgressNotification{At: rv}, false)
	}
}
