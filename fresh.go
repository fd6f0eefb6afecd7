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
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer/fresh"
)

// The three moments of a start (docs/ARCHITECTURE.md, "Loaded, Fresh,
// Live"):
//   - Loaded: the cache serves what the file holds (a warm start), or the
//     first list (a cold start).
//   - Fresh: the cache equals the server's state at a known
//     resourceVersion R (Health.FreshResourceVersion). Package fresh
//     decides it, and nothing else: a cold start is fresh with its first
//     list; a warm start by the server's bookmarks or events at or after
//     R, by a metadata list's diff, or by a relist, and where none of
//     these can tell, at the first watch event it applies
//     (Health.FreshFallback says why).
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
func (s *Informer) FreshChecker() cache.DoneChecker { return freshChecker{s} }

type freshChecker struct{ s *Informer }

func (c freshChecker) Name() string          { return "boltinformer " + c.s.name + " fresh" }
func (c freshChecker) Done() <-chan struct{} { return c.s.fr.Done() }

// LiveChecker is done once the server has accepted a watch.
func (s *Informer) LiveChecker() cache.DoneChecker { return momentChecker{s.name, s.live} }

// newTracker builds the informer's freshness tracker (package fresh) from
// its options.
func (s *Informer) newTracker(o *InformerOptions) *fresh.Tracker {
	var md fresh.MetadataLister
	if o.Metadata != nil {
		md = o.Metadata
	}
	wait := o.FreshBookmarkWait
	if s.policy != SyncAfterFresh && !o.ReplayDownDeletes {
		// Nothing waits for Fresh nor needs to know the deletes made while
		// down: a warm start makes no read beyond its watch (a fleet of
		// edge agents restarting at once makes no LIST at all).
		wait = 0
	}
	listMax := o.FreshListMax
	if listMax == 0 {
		listMax = DefaultFreshListMax
	}
	if s.policy != SyncAfterFresh {
		// Nothing waits for Fresh: no list at once (ReplayDownDeletes
		// waits for a bookmark, the list only after FreshBookmarkWait).
		listMax = 0
	}
	return fresh.New(fresh.Options{
		Cache:          s.indexer,
		Lock:           &s.blockDeltas,
		Reflector:      trackerReflector{s},
		Metadata:       md,
		Warm:           s.decision.Warm,
		ResumedFrom:    s.indexer.ResourceVersion(),
		BookmarkWait:   max(wait, 0),
		List:           s.policy == SyncAfterFresh || o.ReplayDownDeletes,
		ListMax:        listMax,
		Clock:          s.db.clock,
		Logger:         s.logger,
		OnFresh:        s.onFreshLocked,
		OnOtherHistory: func() { s.counters.otherTimeline.Add(1) },
	})
}

// DefaultFreshListMax is InformerOptions.FreshListMax's default: up to
// 10,000 objects, the metadata list of every object (about 2 KiB an object
// for Pods written by two managers, 66% of a protobuf LIST's bytes) makes
// a warm start fresh in a fifth to a third of client-go's cold start, where
// kube-apiserver's bookmark takes 0 to 2.3 s; above it, the list takes
// longer than the bookmark (14 to 27 s at 100k), and the bookmark decides
// (docs/BENCHMARKS.md, issue 24).
const DefaultFreshListMax = 10000

// onFreshLocked is called once the informer is fresh. Caller holds
// blockDeltas.
func (s *Informer) onFreshLocked(rv string) {
	s.logger.V(1).Info("Fresh: the cache equals the server's state", "resourceVersion", rv)
	s.releaseHold("fresh")
}

// trackerReflector is the informer's reflector as its tracker sees it
// (nil before Run: no relist to ask for yet).
type trackerReflector struct{ s *Informer }

func (r trackerReflector) RelistLatest() {
	if lw := r.s.resumePtr.Load(); lw != nil {
		lw.RelistLatest()
	}
}

func (r trackerReflector) Expired() bool {
	lw := r.s.resumePtr.Load()
	if lw == nil {
		return false
	}
	st := lw.Stats()
	return st.Expired > 0 || st.TooLarge > 0
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
	plan *fresh.Catchup
}

// partialRelist answers a relist (after a 410) with only what changed
// since the cache's state, when little did: one metadata list at R, the
// diff against the cache, and an exact read at R of each changed or
// created object. It returns nil (the server lists everything) when the
// diff is larger than PartialRelistRatio of the objects, when
// resourceVersions are not comparable, or when a read fails; it relists
// the latest state when the server's history is not the cache's.
func (s *Informer) partialRelist(ctx context.Context, _ metav1.ListOptions) (runtime.Object, error) {
	// A new relist: an answer of an earlier one that the reflector did
	// not apply is obsolete.
	s.partial.Store(nil)
	if s.metadata == nil || s.getter == nil || s.partialRatio < 0 || s.fr.NotComparable() {
		return nil, nil
	}
	// The warm start's list is taken only if the old watch has delivered
	// nothing after it: its events queued for the informer loop are
	// applied before the patch, which would take the cache back to the
	// list's resourceVersion, and the watch from there would deliver them
	// again. A list whose resourceVersion does not compare is taken too:
	// the diff finds it out, once.
	list := s.fr.TakeList(s.indexer.ResourceVersion(), s.resume.LastEventResourceVersion())
	if list == nil {
		// Joins the warm start's list if it is still in flight (the
		// resumed watch's 410 comes moments after an apiserver restart).
		var err error
		if list, err = s.fr.ListMetadata(ctx); err != nil {
			return nil, err
		}
	}
	var plan *fresh.Catchup
	var err error
	s.blockDeltas.Lock()
	s.indexer.Versions(func(applied string, objects iter.Seq2[string, string]) {
		plan, err = fresh.Plan(list, metaKey, applied, objects)
	})
	if errors.Is(err, fresh.ErrOtherTimeline) {
		s.fr.RelistRequested() // under blockDeltas: nothing decides before the relist
	}
	s.blockDeltas.Unlock()
	switch {
	case errors.Is(err, fresh.ErrOtherTimeline):
		s.logger.Info("Warning: the server's resourceVersion is behind the cache's (restored or replaced cluster): relisting over the cache", "err", err)
		s.counters.otherTimeline.Add(1)
		s.resume.RelistLatest()
		return nil, nil
	case errors.Is(err, fresh.ErrNotComparable):
		s.fr.NoteNotComparable(err)
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

// metaKey is the informer's key of a metadata list item.
func metaKey(m *metav1.PartialObjectMetadata) (string, error) {
	return cache.MetaNamespaceKeyFunc(m)
}
