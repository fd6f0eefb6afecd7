package boltinformer

import (
	"errors"
	"fmt"
	"iter"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer/indexer"
	"github.com/boltinformer/boltinformer/processor"
)

// The informer loop. Client-go's controller pops the queue into
// handleDeltas (one delta) or, with its InOrderInformersBatchProcess
// feature (on by default in v0.37), handleBatchDeltas (up to 1000 deltas
// of distinct keys). Both go through applyLocked, one delta after another
// in order: a relist, a resync of everything or a bookmark on its own; a
// run of object deltas in one indexer transaction, after which each
// stored delta is told to the observers, distributed to the handlers and
// noted by the freshness tracker, in the order popped. A single delta is a
// run of one: nothing differs between the two.

func (s *Informer) handleDeltas(obj any, isInInitialList bool) error {
	deltas, ok := obj.(cache.Deltas)
	if !ok {
		return errors.New("boltinformer: object given as Process argument is not Deltas")
	}
	return s.handle(deltas, isInInitialList)
}

func (s *Informer) handleBatchDeltas(deltas []cache.Delta, isInInitialList bool) error {
	return s.handle(deltas, isInInitialList)
}

// handle applies popped deltas; what the cache could not apply as
// received is reported (apply.go) once the lock is released.
func (s *Informer) handle(deltas []cache.Delta, isInInitialList bool) error {
	s.awaitInitial(deltas)
	var a applyErrors
	err := func() error {
		s.blockDeltas.Lock()
		defer s.blockDeltas.Unlock()
		return s.applyLocked(deltas, isInInitialList, &a)
	}()
	s.reportApply(&a)
	return err
}

// applyLocked applies deltas in order. Caller holds blockDeltas.
func (s *Informer) applyLocked(deltas []cache.Delta, isInInitialList bool, a *applyErrors) error {
	for len(deltas) > 0 {
		d := deltas[0]
		switch d.Type {
		case cache.ReplacedAll:
			info, ok := d.Object.(cache.ReplacedAllInfo)
			if !ok {
				return fmt.Errorf("boltinformer: ReplacedAll did not contain ReplacedAllInfo: %T", d.Object)
			}
			if err := s.replaceAllLocked(info, isInInitialList, a); err != nil {
				return err
			}
			deltas = deltas[1:]
		case cache.SyncAll:
			for _, o := range s.indexer.List() {
				s.onUpdate(o, o)
			}
			deltas = deltas[1:]
		case cache.Bookmark:
			info, ok := d.Object.(cache.BookmarkInfo)
			if !ok {
				return fmt.Errorf("boltinformer: bookmark delta did not contain BookmarkInfo: %T", d.Object)
			}
			if s.fr.Skip(info.ResourceVersion) {
				// Behind the R the cache was made fresh at: applying it
				// would move the resourceVersion back (review 5).
				deltas = deltas[1:]
				continue
			}
			s.indexer.Bookmark(info.ResourceVersion)
			s.notifyLocked(Change{Type: ChangeBookmark, ResourceVersion: info.ResourceVersion})
			s.fr.Bookmark(info.ResourceVersion)
			deltas = deltas[1:]
		case cache.Sync, cache.Replaced, cache.Added, cache.Updated, cache.Deleted:
			n := objectRun(deltas)
			if err := s.applyObjectsLocked(deltas[:n], isInInitialList, a); err != nil {
				return err
			}
			deltas = deltas[n:]
		default:
			return fmt.Errorf("boltinformer: unknown delta type %s", d.Type)
		}
	}
	s.fr.EndBatch()
	s.progressLocked()
	return nil
}

// objectRun returns how many of the leading deltas are object deltas of
// distinct keys (at least one): what one indexer transaction applies.
func objectRun(deltas []cache.Delta) int {
	seen := make(map[string]struct{}, len(deltas))
	for i, d := range deltas {
		switch d.Type {
		case cache.Sync, cache.Replaced, cache.Added, cache.Updated, cache.Deleted:
		default:
			return max(i, 1)
		}
		key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(d.Object)
		if err != nil {
			return max(i, 1) // alone: the transaction reports it
		}
		if _, dup := seen[key]; dup {
			return i
		}
		seen[key] = struct{}{}
	}
	return len(deltas)
}

// applyObjectsLocked applies object deltas of distinct keys in one indexer
// transaction, then, for each delta stored, in order: the observers, the
// handlers, the freshness tracker. An object an index function failed on
// is stored and delivered; a refused one is neither (apply.go). Caller
// holds blockDeltas.
func (s *Informer) applyObjectsLocked(deltas []cache.Delta, isInInitialList bool, a *applyErrors) error {
	s.counters.events.Add(int64(len(deltas)))
	if s.fr.Skipping() {
		// History the cache holds already (fresh at a later R): not
		// applied.
		kept := make([]cache.Delta, 0, len(deltas))
		for _, d := range deltas {
			if _, rv, tomb := deltaMeta(d); d.Type != cache.Sync && !tomb && s.fr.Skip(rv) {
				continue
			}
			kept = append(kept, d)
		}
		if len(kept) == 0 {
			return nil
		}
		deltas = kept
	}
	count := s.indexer.Len()
	txns := make([]cache.Transaction, len(deltas))
	notes := make([]processor.Notification, len(deltas))
	syncs := make([]bool, len(deltas))
	existed := make([]bool, len(deltas))
	for i, d := range deltas {
		obj := d.Object
		if d.Type == cache.Deleted {
			txns[i] = cache.Transaction{Type: cache.TransactionTypeDelete, Object: obj}
			notes[i] = processor.DeleteNotification{Old: obj}
			if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
				_, existed[i], _ = s.indexer.GetByKey(key)
			}
			continue
		}
		if old, exists, err := s.indexer.Get(obj); err == nil && exists {
			txns[i] = cache.Transaction{Type: cache.TransactionTypeUpdate, Object: obj}
			notes[i] = processor.UpdateNotification{Old: old, New: obj}
			syncs[i], existed[i] = sameRV(old, obj), true
		} else {
			txns[i] = cache.Transaction{Type: cache.TransactionTypeAdd, Object: obj}
			notes[i] = processor.AddNotification{Obj: obj, InInitialList: isInInitialList}
		}
	}
	stored := make([]bool, len(deltas))
	var failed error
	if terr := s.indexer.Transaction(txns...); terr != nil {
		for _, i := range terr.SuccessfulIndices {
			stored[i] = true
		}
		for _, e := range terr.Errors {
			if indexer.Refused(e) {
				a.addRefused(e)
			} else {
				a.add(e)
			}
		}
		if len(terr.SuccessfulIndices) != len(txns) {
			failed = fmt.Errorf("boltinformer: not all items in the batch successfully processed: %s", terr.Error())
		}
	} else {
		for i := range stored {
			stored[i] = true
		}
	}
	for i, d := range deltas {
		if !stored[i] {
			continue
		}
		key, rv, tomb := deltaMeta(d)
		watchEvent := d.Type != cache.Sync
		if watchEvent && !tomb {
			s.fr.Crossing(rv, count)
		}
		switch {
		case d.Type == cache.Deleted && existed[i]:
			count--
		case d.Type != cache.Deleted && !existed[i]:
			count++
		}
		s.notifyDeltaLocked(d)
		s.distributeLocked(notes[i], syncs[i])
		if watchEvent {
			s.fr.Applied(key, rv, d.Type == cache.Deleted, tomb, count)
		}
	}
	return failed
}

// deltaMeta returns a delta's key, its object's resourceVersion (for a
// delete whose final state is unknown, the last state's), and whether it
// is such a delete.
func deltaMeta(d cache.Delta) (key, rv string, tomb bool) {
	obj := d.Object
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		key, obj, tomb = t.Key, t.Obj, true
	} else {
		key, _ = cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	}
	if m, err := meta.Accessor(obj); err == nil {
		rv = m.GetResourceVersion()
	}
	return key, rv, tomb
}

// storedOnly returns the objects of a list that are not held back (nil:
// all of them).
func storedOnly(objs []any, held []bool) []any {
	if held == nil {
		return objs
	}
	out := make([]any, 0, len(objs))
	for i, o := range objs {
		if !held[i] {
			out = append(out, o)
		}
	}
	return out
}

// lockAfterInitial takes blockDeltas once the initial adds of a warm start
// are queued (distributeInitial closes initialDone holding it), so that a
// late handler gets the current state exactly once.
func (s *Informer) lockAfterInitial() {
	for {
		s.blockDeltas.Lock()
		select {
		case <-s.initialDone:
			return
		default:
		}
		s.blockDeltas.Unlock()
		<-s.initialDone
	}
}

// replaceAllLocked applies a relist: deletions of what is gone (as
// DeletedFinalStateUnknown), then updates and adds in list order, as
// client-go does. The disk answer of a warm start is not a change.
func (s *Informer) replaceAllLocked(info cache.ReplacedAllInfo, isInInitialList bool, a *applyErrors) error {
	if s.diskAnswer.CompareAndSwap(true, false) {
		s.indexer.Bookmark(info.ResourceVersion)
		s.notifyLocked(Change{Type: ChangeBookmark, ResourceVersion: info.ResourceVersion})
		s.listed.Store(true)
		return nil
	}
	// A list from the server: the cache is its state, whatever happens
	// to the notifications below.
	defer s.fr.Listed(info.ResourceVersion)
	if p := s.partial.Swap(nil); p != nil && p.rv == info.ResourceVersion {
		return s.patchLocked(info, p, isInInitialList, a)
	}
	s.counters.events.Add(int64(len(info.Objects)))
	relist := s.listed.Swap(true)
	keyFunc := cache.DeletionHandlingMetaNamespaceKeyFunc
	newKeys := sets.New[string]()
	for _, obj := range info.Objects {
		key, err := keyFunc(obj)
		if err != nil {
			return cache.KeyError{Obj: obj, Err: err}
		}
		newKeys.Insert(key)
	}
	var deletions []cache.DeletedFinalStateUnknown
	for _, key := range s.indexer.ListKeys() {
		if newKeys.Has(key) {
			continue
		}
		old, exists, err := s.indexer.GetByKey(key)
		if err != nil || !exists {
			old = nil
		}
		deletions = append(deletions, cache.DeletedFinalStateUnknown{Key: key, Obj: old})
	}
	if relist {
		s.countRelist(false, info.ResourceVersion, len(info.Objects), len(deletions))
	}
	olds := s.cachedLocked(info.Objects)
	// An index function's error stores the object nonetheless: every
	// notification is delivered. A refusal leaves the object out of the
	// cache: only its notification is held back.
	held, err := s.noteListLocked(a, info.Objects, s.indexer.Replace(info.Objects, info.ResourceVersion))
	if err != nil {
		return err
	}
	s.notifyLocked(Change{Type: ChangeReplace, Objects: storedOnly(info.Objects, held), ResourceVersion: info.ResourceVersion})
	s.deliverListLocked(deletions, info.Objects, olds, held, isInInitialList)
	return nil
}

// noteListLocked classifies the error of storing a list's objects (Replace
// or Patch, which store every object they do not refuse): it returns
// which objects are not in the cache (nil if none). A key error refuses
// the whole list before anything changes: it is returned, and nothing is
// to be delivered. Caller holds blockDeltas.
func (s *Informer) noteListLocked(a *applyErrors, objs []any, err error) (held []bool, whole error) {
	var kerr cache.KeyError
	if errors.As(err, &kerr) {
		a.addRefused(err)
		return nil, err
	}
	a.add(err)
	if !indexer.Refused(err) {
		return nil, nil
	}
	held = make([]bool, len(objs))
	for i, obj := range objs {
		key, kerr := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
		if kerr != nil {
			continue
		}
		cur, exists, gerr := s.indexer.GetByKey(key)
		if gerr == nil && exists && sameRV(cur, obj) {
			continue
		}
		held[i] = true
		a.addRefused(fmt.Errorf("boltinformer: object %q of the list not stored: %w", key, err))
	}
	return held, nil
}

// patchLocked applies a partial relist (partialRelist): the changed
// objects, and the deletions of what the list does not have, carrying the
// last object the cache knew (cache.DeletedFinalStateUnknown, as a relist
// delivers them). The deletions are found now, not when the diff was made:
// the old watch's events queued before the relist were applied since, and
// may have created objects that the list does not have.
func (s *Informer) patchLocked(info cache.ReplacedAllInfo, p *partialAnswer, isInInitialList bool, a *applyErrors) error {
	var gone []string
	s.indexer.Versions(func(_ string, objects iter.Seq2[string, string]) { gone = p.plan.Unlisted(objects) })
	s.counters.events.Add(int64(len(info.Objects) + len(gone)))
	var deletions []cache.DeletedFinalStateUnknown
	for _, key := range gone {
		if old, exists, err := s.indexer.GetByKey(key); err == nil && exists {
			deletions = append(deletions, cache.DeletedFinalStateUnknown{Key: key, Obj: old})
		}
	}
	s.countRelist(true, info.ResourceVersion, len(info.Objects), len(deletions))
	olds := s.cachedLocked(info.Objects)
	held, err := s.noteListLocked(a, info.Objects, s.indexer.Patch(info.Objects, gone, info.ResourceVersion))
	if err != nil {
		return err
	}
	if s.observing() {
		// A relist, though only what changed was read: the observers get
		// the whole content, as from a full one (the events in between
		// are not known).
		s.notifyLocked(Change{Type: ChangeReplace, Objects: s.indexer.List(), ResourceVersion: info.ResourceVersion})
	}
	s.deliverListLocked(deletions, info.Objects, olds, held, isInInitialList)
	return nil
}

// cachedLocked returns the cached object of each of objs (nil for those
// the cache does not hold). Caller holds blockDeltas.
func (s *Informer) cachedLocked(objs []any) []any {
	olds := make([]any, len(objs))
	for i, obj := range objs {
		if old, exists, err := s.indexer.Get(obj); err == nil && exists {
			olds[i] = old
		}
	}
	return olds
}

// deliverListLocked hands the handlers a list applied over the cache, as
// client-go does: the deletions, then an update of each object the cache
// held (olds[i]) and an add of each new one, but for those held back.
// Caller holds blockDeltas.
func (s *Informer) deliverListLocked(deletions []cache.DeletedFinalStateUnknown, objs, olds []any, held []bool, isInInitialList bool) {
	for _, d := range deletions {
		s.distributeDeleteLocked(processor.DeleteNotification{Old: d})
	}
	for i, obj := range objs {
		if held != nil && held[i] {
			continue
		}
		if olds[i] != nil {
			s.onUpdate(olds[i], obj)
		} else {
			s.processor.Distribute(processor.AddNotification{Obj: obj, InInitialList: isInInitialList}, false)
		}
	}
}

// countRelist counts a relist from the server by its cause, and logs it
// in one line at the default level: a relist is rare (a 410, or one the
// informer asked for, whose reason is logged already) and costs the
// apiserver, so an operator must see it without raising the verbosity.
// received is what the server sent (every object, or only what changed
// for a partial relist), deleted what the relist removed from the cache.
func (s *Informer) countRelist(partial bool, rv string, received, deleted int) {
	expired := s.resume.Stats().Expired
	cause, msg := "expired", "Relisted from the server: the watch's resourceVersion had expired (410)"
	if expired > s.expiredSeen.Swap(expired) {
		s.counters.relistsExpired.Add(1)
	} else {
		s.counters.relistsOther.Add(1)
		cause, msg = "requested", "Relisted from the server, as the informer asked"
	}
	kv := []any{"cause", cause, "partial", partial, "resourceVersion", rv, "received", received, "deleted", deleted}
	if !partial && s.metadata != nil && s.getter != nil && s.partialRatio >= 0 {
		// Why not partial is at V(2): more than this share changed, or the
		// metadata list or an exact read failed.
		kv = append(kv, "partialRelistRatio", s.partialRatio)
	}
	s.logger.Info(msg, kv...)
}

// onUpdate distributes an update; one that did not change the
// resourceVersion is a resync, for the listeners due for one only.
func (s *Informer) onUpdate(old, new any) {
	s.processor.Distribute(processor.UpdateNotification{Old: old, New: new}, sameRV(old, new))
}

// distributeLocked distributes n (a delete through
// distributeDeleteLocked). Caller holds blockDeltas.
func (s *Informer) distributeLocked(n processor.Notification, sync bool) {
	if d, ok := n.(processor.DeleteNotification); ok {
		s.distributeDeleteLocked(d)
		return
	}
	s.processor.Distribute(n, sync)
}

// distributeDeleteLocked distributes a delete, and keeps it for handlers
// added later when it happened before a warm start was fresh
// (ReplayDownDeletes). Caller holds blockDeltas.
func (s *Informer) distributeDeleteLocked(n processor.DeleteNotification) {
	s.processor.Distribute(n, false)
	if s.replayDeletes && s.decision.Warm && !s.fr.Fresh() {
		s.downDeletes = append(s.downDeletes, n)
	}
}

func sameRV(old, new any) bool {
	a, err := meta.Accessor(new)
	if err != nil {
		return false
	}
	o, err := meta.Accessor(old)
	if err != nil {
		return false
	}
	return a.GetResourceVersion() == o.GetResourceVersion()
}
