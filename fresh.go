package boltinformer

import (
	"context"
	"errors"
	"iter"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer/reflector"
)

// The three moments of a start (docs/ARCHITECTURE.md, "Loaded, Fresh,
// Live"):
//   - Loaded: the cache serves what the file holds (a warm start), or the
//     first list (a cold start).
//   - Fresh: the cache equals the server's state at a known
//     resourceVersion R (Health.FreshResourceVersion). A cold start is
//     fresh with its first list. A warm start with SyncAfterFresh and a
//     MetadataLister lists every object's metadata once, diffs it against
//     the cache, and is fresh when the resumed watch has brought every
//     changed, created and deleted key to the list's state (an empty diff
//     is fresh at once); a relist makes it fresh too. Otherwise (another
//     policy, no MetadataLister, or resourceVersions that do not compare)
//     a warm start is fresh at the first watch event the server sends, and
//     Health.FreshFallback says why.
//   - Live: the server has accepted a watch.

// MetadataLister lists, metadata only, what an informer lists (the same
// resource, namespace and selectors): every object's name, namespace, UID
// and resourceVersion, and the list's resourceVersion. A kube-apiserver
// serves it from its watch cache as a PartialObjectMetadataList
// (k8s.io/client-go/metadata). See InformerOptions.Metadata.
type MetadataLister interface {
	ListMetadata(ctx context.Context, opts metav1.ListOptions) (*metav1.PartialObjectMetadataList, error)
}

// MetadataListerFunc adapts a function to MetadataLister.
type MetadataListerFunc func(ctx context.Context, opts metav1.ListOptions) (*metav1.PartialObjectMetadataList, error)

// ListMetadata calls f.
func (f MetadataListerFunc) ListMetadata(ctx context.Context, opts metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
	return f(ctx, opts)
}

// moment is a DoneChecker closed once, stamped with when.
type moment struct {
	name string
	ch   chan struct{}
	once sync.Once
	at   atomic.Int64 // UnixNano when reached
}

func newMoment(name string) *moment { return &moment{name: name, ch: make(chan struct{})} }

func (m *moment) reach(now time.Time) {
	m.once.Do(func() {
		m.at.Store(now.UnixNano())
		close(m.ch)
	})
}

func (m *moment) reached() bool {
	select {
	case <-m.ch:
		return true
	default:
		return false
	}
}

type momentChecker struct {
	informer string
	m        *moment
}

func (c momentChecker) Name() string          { return "boltinformer " + c.informer + " " + c.m.name }
func (c momentChecker) Done() <-chan struct{} { return c.m.ch }

// LoadedChecker is done once the cache serves: the file is loaded (warm)
// or the first list applied (cold).
func (s *Informer) LoadedChecker() cache.DoneChecker { return momentChecker{s.name, s.loaded} }

// FreshChecker is done once the cache equals the server's state at a
// known resourceVersion (see Health.FreshResourceVersion).
func (s *Informer) FreshChecker() cache.DoneChecker { return momentChecker{s.name, s.fresh} }

// LiveChecker is done once the server has accepted a watch.
func (s *Informer) LiveChecker() cache.DoneChecker { return momentChecker{s.name, s.live} }

// freshState is what the informer knows of its catch-up with the server.
// catchup is guarded by the informer's blockDeltas (it is read and changed
// with the deltas the loop applies); the rest are atomics for Health.
type freshState struct {
	catchup *reflector.Catchup // nil: nothing to track
	rv      atomic.Pointer[string]
	// planned counts of the last plan: changed, created, gone.
	changed, created, gone atomic.Int64
	pending                atomic.Int64
	stale                  atomic.Bool // synced by FreshTimeout, not fresh
	listErrors             atomic.Int64
	// list is the warm start's metadata list, kept for a relist that
	// follows (the resumed watch's 410 comes moments later after an
	// apiserver restart): partialRelist takes it instead of listing
	// again, within listReuse and when it is not older than the cache.
	list atomic.Pointer[timedList]
	// flightMu guards flight, the metadata list in progress, which a
	// second caller joins instead of listing again.
	flightMu sync.Mutex
	flight   *metaCall
	fallback atomic.Pointer[string] // why freshness is the first watch event
	// notComparable is set once a metadata list's resourceVersions were
	// found not to compare with the cache's: no metadata list is made
	// again (freshness is the first watch event, relists are full).
	notComparable atomic.Bool
	// resumedFrom is the resourceVersion a warm start resumes from (set
	// by start, before runFresh runs): a metadata list older than it is
	// another timeline.
	resumedFrom string
}

// markFreshLocked records that the cache equals the server's state at rv
// ("" when only "a server list" is known). Caller holds blockDeltas.
func (s *Informer) markFreshLocked(rv string) {
	if s.freshSt.catchup != nil {
		s.freshSt.catchup.Complete()
		s.freshSt.catchup = nil
	}
	s.freshSt.pending.Store(0)
	if rv != "" && s.freshSt.rv.Load() == nil {
		s.freshSt.rv.Store(&rv)
	}
	if !s.fresh.reached() {
		s.fresh.reach(s.db.clock.Now())
		s.logger.V(1).Info("Fresh: the cache equals the server's state", "resourceVersion", rv)
	}
	s.releaseHold("fresh")
}

// observeLocked notes an applied change for the catch-up. Caller holds
// blockDeltas.
func (s *Informer) observeLocked(key, rv string, deleted bool) {
	c := s.freshSt.catchup
	if c == nil {
		return
	}
	if c.Observe(key, rv, deleted) {
		s.caughtUpLocked(c)
		return
	}
	s.freshSt.pending.Store(int64(c.Pending()))
}

// observeProgressLocked notes a bookmark for the catch-up. Caller holds
// blockDeltas.
func (s *Informer) observeProgressLocked(rv string) {
	if c := s.freshSt.catchup; c != nil && c.ObserveProgress(rv) {
		s.caughtUpLocked(c)
	}
}

// caughtUpLocked ends the catch-up c, whose watch has passed the list's
// resourceVersion: Fresh, unless the watch never brought keys the list
// named (Catchup.Missed), which only a server of another history does (a
// cluster restored from a backup and written past the cache's
// resourceVersion): then the latest state is listed over the cache, and
// that list makes it fresh. Caller holds blockDeltas.
func (s *Informer) caughtUpLocked(c *reflector.Catchup) {
	missed := c.Missed()
	if len(missed) == 0 {
		s.markFreshLocked(c.ResourceVersion)
		return
	}
	s.freshSt.catchup = nil
	s.freshSt.pending.Store(0)
	s.logger.Info("Warning: the watch passed the metadata list's resourceVersion without bringing what the list named (the server's history is not the cache's: restored or replaced cluster): relisting over the cache",
		"resourceVersion", c.ResourceVersion, "missed", len(missed), "key", missed[0])
	s.counters.otherTimeline.Add(1)
	s.resume.RelistLatest()
}

// freshBackoff paces metadata lists while the server is unreachable.
func freshBackoff() wait.Backoff {
	return wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: 1 << 30, Cap: 30 * time.Second}
}

// runFresh makes a warm start fresh: once the file is loaded, it lists the
// server's metadata (retrying with backoff while the server is
// unreachable), diffs it against the cache, and leaves the rest to the
// watch (observeLocked). It owns no state past its return; RunWithContext
// waits for it.
func (s *Informer) runFresh(ctx context.Context) {
	select {
	case <-ctx.Done():
		return
	case <-s.loaded.ch:
	case <-s.fresh.ch:
	}
	if s.fresh.reached() || s.awaitBookmark(ctx) {
		return // fresh, possibly at the first bookmark (fresh_bookmark.go)
	}
	switch {
	case s.metadata == nil:
		s.freshFallback(ctx, "no MetadataLister: fresh at the first watch event")
		return
	case s.policy != SyncAfterFresh:
		// Nothing waits for it: spare the server the metadata list (a
		// fleet of edge agents restarting at once makes no LIST at all).
		s.freshFallback(ctx, "SyncAfterDiskLoad: fresh at the first watch event (SyncAfterFresh lists metadata to know)")
		return
	}
	backoff := freshBackoff()
	var list *metav1.PartialObjectMetadataList
	for {
		var err error
		list, err = s.listMetadata(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		s.freshSt.listErrors.Add(1)
		s.logger.V(2).Info("Metadata list failed; retrying", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-s.fresh.ch:
			return
		case <-s.db.clock.After(backoff.Step()):
		}
	}
	s.freshSt.list.Store(&timedList{list: list, at: s.db.clock.Now()})
	// The diff and the catch-up it plans are installed together, between
	// two batches of the informer loop: no event slips in between.
	s.blockDeltas.Lock()
	if s.fresh.reached() {
		s.blockDeltas.Unlock()
		return // a relist came first
	}
	var plan *reflector.Catchup
	var err error
	s.indexer.Versions(func(applied string, objects iter.Seq2[string, string]) {
		plan, err = reflector.PlanResume(list, metaKey, s.freshSt.resumedFrom, applied, objects)
	})
	if err == nil {
		s.freshSt.changed.Store(int64(plan.Changed))
		s.freshSt.created.Store(int64(plan.Created))
		s.freshSt.gone.Store(int64(plan.Gone))
		if plan.Done() {
			s.markFreshLocked(plan.ResourceVersion)
		} else {
			s.freshSt.catchup = plan
			s.freshSt.pending.Store(int64(plan.Pending()))
		}
	}
	if errors.Is(err, reflector.ErrOtherTimeline) {
		s.stopBookmarkFresh() // under blockDeltas: no bookmark after the verdict
	}
	s.blockDeltas.Unlock()
	switch {
	case errors.Is(err, reflector.ErrOtherTimeline):
		// A restored or replaced cluster: its history is not the
		// cache's. Replace the cache by a list of the server's latest
		// state (a cold start over the file).
		s.logger.Info("Warning: the server's history is not the cache's (restored or replaced cluster): relisting over the cache", "err", err)
		s.counters.otherTimeline.Add(1)
		s.resume.RelistLatest()
	case errors.Is(err, reflector.ErrNotComparable):
		s.freshSt.fallback.Store(ptrTo(err.Error()))
		s.noteNotComparable(err)
		s.freshFallback(ctx, "")
	case err != nil:
		s.freshFallback(ctx, err.Error())
	default:
		s.logger.V(1).Info("Metadata list diffed against the cache", "resourceVersion", plan.ResourceVersion,
			"changed", plan.Changed, "created", plan.Created, "deleted", plan.Gone, "unchanged", plan.Unchanged)
	}
}

// freshFallback makes freshness the first watch event the server sends
// (resourceVersions are not comparable, or there is nothing to list
// metadata with), logged once: why is stored and logged, unless "" (the
// caller has done both).
func (s *Informer) freshFallback(ctx context.Context, why string) {
	if why != "" {
		s.freshSt.fallback.Store(&why)
		s.logger.Info("Freshness falls back to the first watch event", "reason", why)
	}
	select {
	case <-ctx.Done():
	case <-s.fresh.ch:
	case <-s.resume.Resumed():
		s.blockDeltas.Lock()
		other := s.counters.otherTimeline.Load() > 0
		if !other {
			s.markFreshLocked("")
		}
		s.blockDeltas.Unlock()
		if other {
			// The server's history is not the cache's (a bookmark behind
			// the resume point): the relist of its latest state makes the
			// informer fresh.
			select {
			case <-ctx.Done():
			case <-s.fresh.ch:
			}
		}
	}
}

// noteNotComparable records that the server's resourceVersions do not
// compare with the cache's (an aggregated API may number them otherwise),
// logged once: from then on the informer lists no metadata, freshness is
// the first watch event and a relist lists everything (today's behaviour).
func (s *Informer) noteNotComparable(err error) {
	if s.freshSt.notComparable.CompareAndSwap(false, true) {
		s.logger.Info("Resource versions are not comparable: freshness is the first watch event, and relists are full", "err", err)
	}
}

func ptrTo[T any](v T) *T { return &v }

// metaKey is the informer's key of a metadata list item.
func metaKey(m *metav1.PartialObjectMetadata) (string, error) {
	return cache.MetaNamespaceKeyFunc(m)
}

// waitLive closes live once the server has accepted a watch.
func (s *Informer) waitLive(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-s.resume.Watching():
		s.live.reach(s.db.clock.Now())
	}
}

// ObjectGetter reads one object of an informer's resource (with its
// namespace and selectors) as it was at an exact resourceVersion: a
// kube-apiserver serves a LIST with a metadata.name field selector and
// resourceVersionMatch=Exact. An object that did not exist then is a
// NotFound error. See InformerOptions.Getter.
type ObjectGetter interface {
	GetAt(ctx context.Context, namespace, name, resourceVersion string) (runtime.Object, error)
}

// ObjectGetterFunc adapts a function to ObjectGetter.
type ObjectGetterFunc func(ctx context.Context, namespace, name, resourceVersion string) (runtime.Object, error)

// GetAt calls f.
func (f ObjectGetterFunc) GetAt(ctx context.Context, namespace, name, resourceVersion string) (runtime.Object, error) {
	return f(ctx, namespace, name, resourceVersion)
}

// DefaultPartialRelistRatio is InformerOptions.PartialRelistRatio's
// default: 5% of the objects. Measured against kube-apiserver at 10k
// Pods (docs/BENCHMARKS.md, "Fresh resume"), an exact read costs the
// apiserver about 0.75 ms of CPU, so the partial relist costs it about as
// much CPU as a full one at 5% changed (it reads fewer bytes at any share,
// and is faster up to about 12%).
const DefaultPartialRelistRatio = 0.05

// fetchWorkers bounds the exact reads of a partial relist in flight.
const fetchWorkers = 8

// partialAnswer is a relist answered with only what changed: the informer
// applies it as a patch (replaceAllLocked), not as a whole list. plan is
// handed over with it (through Informer.partial) and read by the informer
// loop only.
type partialAnswer struct {
	rv   string
	plan *reflector.Catchup
}

// partialRelist answers a relist (after a 410) with only what changed
// since the cache's state, when little did: one metadata list at R, the
// diff against the cache, and an exact read at R of each changed or
// created object. It returns nil (the server lists everything) when the
// diff is larger than PartialRelistRatio of the objects, when
// resourceVersions are not comparable, or when a read fails; it relists
// the latest state when the server's history is not the cache's.
func (s *Informer) partialRelist(ctx context.Context, _ metav1.ListOptions) (runtime.Object, error) {
	if s.metadata == nil || s.getter == nil || s.partialRatio < 0 || s.freshSt.notComparable.Load() {
		return nil, nil
	}
	var list *metav1.PartialObjectMetadataList
	// The warm start's list is taken only if the old watch has delivered
	// nothing after it: its events queued for the informer loop are
	// applied before the patch, which would take the cache back to the
	// list's resourceVersion, and the watch from there would deliver them
	// again. A list whose resourceVersion does not compare is taken too:
	// the diff finds it out, once.
	if t := s.freshSt.list.Swap(nil); t != nil && s.db.clock.Since(t.at) < listReuse && !before(t.list.ResourceVersion, s.indexer.ResourceVersion()) &&
		!before(t.list.ResourceVersion, s.resume.LastEventResourceVersion()) {
		list = t.list
	} else {
		// Joins the warm start's list if it is still in flight (the
		// resumed watch's 410 comes moments after an apiserver restart).
		var err error
		if list, err = s.listMetadata(ctx); err != nil {
			return nil, err
		}
	}
	var plan *reflector.Catchup
	var err error
	s.blockDeltas.Lock()
	s.indexer.Versions(func(applied string, objects iter.Seq2[string, string]) {
		plan, err = reflector.Plan(list, metaKey, applied, objects)
	})
	if errors.Is(err, reflector.ErrOtherTimeline) {
		s.stopBookmarkFresh() // under blockDeltas: no bookmark after the verdict
	}
	s.blockDeltas.Unlock()
	switch {
	case errors.Is(err, reflector.ErrOtherTimeline):
		s.logger.Info("Warning: the server's resourceVersion is behind the cache's (restored or replaced cluster): relisting over the cache", "err", err)
		s.counters.otherTimeline.Add(1)
		s.resume.RelistLatest()
		return nil, nil
	case errors.Is(err, reflector.ErrNotComparable):
		s.noteNotComparable(err)
		return nil, nil
	case err != nil:
		s.logger.V(2).Info("Full relist: the metadata list does not diff", "err", err)
		return nil, nil
	}
	fetch := plan.ChangedKeys()
	// Records of the file that do not decode are what a relist was asked
	// for (onUndecodable): their resourceVersions match the server's, so
	// the diff cannot see them. Read those the list has; the patch deletes
	// the others.
	for _, key := range s.indexer.UndecodableKeys() {
		if plan.Listed(key) && !slices.Contains(fetch, key) {
			fetch = append(fetch, key)
		}
	}
	if float64(len(fetch)) > s.partialRatio*float64(max(len(list.Items), 1)) {
		s.logger.V(2).Info("Full relist: too much changed for a partial one", "changed", len(fetch), "objects", len(list.Items))
		return nil, nil
	}
	objs, err := s.fetchAt(ctx, fetch, plan.ResourceVersion)
	if err != nil {
		s.logger.V(2).Info("Full relist: an exact read failed", "err", err)
		return nil, nil
	}
	out := &metav1.List{ListMeta: metav1.ListMeta{ResourceVersion: plan.ResourceVersion}}
	out.Items = make([]runtime.RawExtension, len(objs))
	for i, o := range objs {
		out.Items[i].Object = o
	}
	s.partial.Store(&partialAnswer{rv: plan.ResourceVersion, plan: plan})
	s.counters.partialRelists.Add(1)
	s.logger.V(1).Info("Relist with only what changed", "resourceVersion", plan.ResourceVersion,
		"fetched", len(objs), "deleted", len(plan.GoneKeys()), "objects", len(list.Items))
	return out, nil
}

// listReuse bounds how old a warm start's metadata list may be for a
// relist to take it.
const listReuse = 30 * time.Second

// timedList is a metadata list and when it was taken.
type timedList struct {
	list *metav1.PartialObjectMetadataList
	at   time.Time
}

// metaCall is a metadata list in progress; done is closed when list and
// err are set.
type metaCall struct {
	done chan struct{}
	list *metav1.PartialObjectMetadataList
	err  error
}

// listMetadata lists the server's metadata, or waits for the list already
// in progress and shares its answer.
func (s *Informer) listMetadata(ctx context.Context) (*metav1.PartialObjectMetadataList, error) {
	st := &s.freshSt
	st.flightMu.Lock()
	if c := st.flight; c != nil {
		st.flightMu.Unlock()
		select {
		case <-c.done:
			return c.list, c.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	c := &metaCall{done: make(chan struct{})}
	st.flight = c
	st.flightMu.Unlock()
	c.list, c.err = reflector.ListAllMetadata(ctx, s.metadata)
	st.flightMu.Lock()
	st.flight = nil
	st.flightMu.Unlock()
	close(c.done)
	return c.list, c.err
}

// before reports whether resourceVersion a is before b (false when b is
// "" or they do not compare).
func before(a, b string) bool {
	if b == "" {
		return false
	}
	c, err := resourceversion.CompareResourceVersion(a, b)
	return err == nil && c < 0
}

// fetchAt reads the objects of keys at resourceVersion rv, in parallel.
func (s *Informer) fetchAt(ctx context.Context, keys []string, rv string) ([]runtime.Object, error) {
	out := make([]runtime.Object, len(keys))
	errs := make([]error, len(keys))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(fetchWorkers, len(keys)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(keys) {
					return
				}
				ns, name, err := cache.SplitMetaNamespaceKey(keys[i])
				if err == nil {
					out[i], err = s.getter.GetAt(ctx, ns, name, rv)
				}
				errs[i] = err
			}
		})
	}
	wg.Wait()
	return out, errors.Join(errs...)
}
