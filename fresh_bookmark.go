package boltinformer

import (
	"context"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// Fresh by a bookmark (InformerOptions.FreshBookmarkWait). A resumed watch
// has no end-of-backlog marker, but a bookmark is one: the server sends it
// after every event before its resourceVersion. kube-apiserver's watch
// cache tries a watch's bookmark once 2 s before its deadline (on its next
// bookmark tick, every 1 to 1.25 s; then only every minute), and sends it
// only when its resourceVersion has moved past what the watch has been
// sent (every event in the cache when the watch began, in scope or not).
// On a quiet resource it moves when etcd reports progress, which a
// consistent read (a LIST with resourceVersion "") asks for when etcd's
// revision is ahead: anything written anywhere in the cluster (leases
// renew every few seconds in a live cluster). So until the informer is
// fresh, its watches get a 3 s timeout (the Reflector watches again from
// where it was when one ends), and after each one starts the informer
// lists one object's metadata: the first read gives the server's current
// resourceVersion R. The first bookmark or watch event at or after R makes
// it fresh. Without one in FreshBookmarkWait (a cluster where nothing at
// all is written), the metadata list's diff decides, as without the
// option.

// bookmarkWatchTimeout is the timeout, in seconds, of the watches of a
// warm start waiting for a bookmark: the shortest for which kube-apiserver
// schedules a bookmark before the deadline.
const bookmarkWatchTimeout = 3

// bookmarkState is a warm start's wait for a bookmark.
type bookmarkState struct {
	started chan struct{}          // a watch started (shortWatches); buffered, 1
	r       atomic.Pointer[string] // R of the consistent read, once known
	// off is set once a bookmark may no longer make the informer fresh:
	// the wait gave up (the metadata list decides), or the informer asked
	// for a relist (another history, undecodable objects), after which the
	// cache is not the server's state at any resourceVersion until the
	// relist's list replaces it.
	off atomic.Bool
	// n is how many objects the scope held at R (the read's items and
	// remainingItemCount), -1 when the server did not say (selectors).
	n atomic.Int64
	// crossed is set, and atR counted, when the first watch event past R
	// is about to be applied: the cache then holds the scope's state at
	// R, whose size must be n. Both guarded by the informer's blockDeltas.
	crossed bool
	atR     int
}

// bookmarkFresh reports whether a warm start waits for a bookmark to be
// fresh.
func (s *Informer) bookmarkFresh() bool {
	return s.policy == SyncAfterFresh && s.bookmarkWait > 0
}

// awaitBookmark waits up to FreshBookmarkWait for a bookmark to make the
// informer fresh (bookmarkFreshLocked), reading the server's
// resourceVersion once a watch has started. It returns true when there is
// nothing more to do (fresh, or ctx done), false when the metadata list is
// to decide; then no bookmark makes the informer fresh any more.
func (s *Informer) awaitBookmark(ctx context.Context) bool {
	if !s.bookmarkFresh() || s.bookmark.off.Load() {
		return false
	}
	timeout := s.db.clock.After(s.bookmarkWait)
	for {
		select {
		case <-ctx.Done():
			return true
		case <-s.fresh.ch:
			return true
		case <-s.bookmark.started:
			if s.bookmark.r.Load() != nil {
				s.nudge(ctx)
				continue
			}
			if s.readServerVersion(ctx) {
				continue
			}
			s.bookmark.off.Store(true)
			return s.fresh.reached()
		case <-timeout:
			s.bookmark.off.Store(true)
			if s.fresh.reached() {
				return true
			}
			s.logger.Info("No bookmark from the server within FreshBookmarkWait: listing metadata to know when the cache is fresh", "freshBookmarkWait", s.bookmarkWait)
			return false
		}
	}
}

// readServerVersion lists one object's metadata (a consistent read) to
// learn the server's current resourceVersion R, which a bookmark must
// reach; the informer is fresh at once when it has applied exactly R
// (nothing changed since). It returns false when a bookmark cannot tell:
// R is behind the cache (the server's history is not the cache's: a
// cluster restored from a backup), the listed object is older than the
// cache's copy of it (the same), or the resourceVersions do not compare;
// the metadata list decides then, and finds out which. A failed read
// returns true: the next watch tries again.
func (s *Informer) readServerVersion(ctx context.Context) bool {
	if s.metadata == nil {
		return true // any bookmark of the resumed watch (bookmarkFreshLocked)
	}
	list, err := s.metadata.ListMetadata(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		s.logger.V(2).Info("Reading the server's resourceVersion failed", "err", err)
		return true
	}
	r := list.ResourceVersion
	n := int64(-1)
	switch {
	case list.Continue == "":
		n = int64(len(list.Items))
	case list.RemainingItemCount != nil:
		n = int64(len(list.Items)) + *list.RemainingItemCount
	}
	s.blockDeltas.Lock()
	defer s.blockDeltas.Unlock()
	if s.fresh.reached() {
		return true
	}
	applied := s.indexer.ResourceVersion()
	c, err := resourceversion.CompareResourceVersion(r, applied)
	switch {
	case err != nil:
		s.logger.V(1).Info("Resource versions do not compare: the metadata list decides freshness", "server", r, "cache", applied, "err", err)
		return false
	case c < 0 || (c > 0 && s.olderThanCacheLocked(list)):
		s.logger.Info("The server's state is older than the cache's (restored or replaced cluster?): the metadata list decides", "server", r, "cache", applied)
		return false
	case c == 0 && n >= 0 && int64(s.indexer.Len()) != n:
		s.otherHistoryLocked("the cache holds another number of objects than the server at the same resourceVersion", applied, s.indexer.Len(), n)
		return true
	case c == 0:
		s.logger.V(1).Info("Fresh: the cache has applied the server's resourceVersion", "resourceVersion", applied)
		s.markFreshLocked(applied)
		return true
	}
	s.bookmark.n.Store(n)
	s.bookmark.r.Store(&r)
	return true
}

// nudge makes a consistent read of one object's metadata again, for the
// new watch: kube-apiserver tries a watch's bookmark once, about a second
// in, and sends it only if its watch cache has moved past where the watch
// began; a consistent read makes it ask etcd for progress, which moves it
// to etcd's revision when anything in the cluster was written since.
func (s *Informer) nudge(ctx context.Context) {
	if s.metadata == nil {
		return
	}
	if _, err := s.metadata.ListMetadata(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		s.logger.V(2).Info("Reading the server's resourceVersion failed", "err", err)
	}
}

// olderThanCacheLocked reports whether the list holds an object at an
// older resourceVersion than the cache's copy of it: in one history, a
// list at or after the cache's resourceVersion has every object at its
// cached version or later. Caller holds blockDeltas.
func (s *Informer) olderThanCacheLocked(list *metav1.PartialObjectMetadataList) bool {
	for i := range list.Items {
		key, err := metaKey(&list.Items[i])
		if err != nil {
			continue
		}
		obj, ok, err := s.indexer.GetByKey(key)
		if err != nil || !ok {
			continue
		}
		m, err := meta.Accessor(obj)
		if err != nil {
			continue
		}
		if c, err := resourceversion.CompareResourceVersion(list.Items[i].ResourceVersion, m.GetResourceVersion()); err == nil && c < 0 {
			return true
		}
	}
	return false
}

// otherHistoryLocked stops the wait for a bookmark and relists the
// server's latest state over the cache: what the server said cannot be of
// the cache's history. Caller holds blockDeltas.
func (s *Informer) otherHistoryLocked(why, rv string, cached int, server int64) {
	s.logger.Info("Warning: the server's history is not the cache's (restored or replaced cluster): relisting over the cache",
		"reason", why, "resourceVersion", rv, "cached", cached, "server", server)
	s.stopBookmarkFresh()
	s.counters.otherTimeline.Add(1)
	s.resume.RelistLatest()
}

// crossLocked notes the cache's size at R before the first watch event
// past R is applied (bookmarkState.atR). Caller holds blockDeltas.
func (s *Informer) crossLocked(obj any) {
	if s.bookmark.crossed || s.fresh.reached() {
		return
	}
	r := s.bookmark.r.Load()
	if r == nil {
		return
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return
	}
	if c, err := resourceversion.CompareResourceVersion(m.GetResourceVersion(), *r); err == nil && c > 0 {
		s.bookmark.crossed, s.bookmark.atR = true, s.indexer.Len()
	}
}

// eventFreshLocked makes a warm start waiting for a bookmark fresh at a
// watch event at or after the server's R: the watch has delivered every
// event before it, as a bookmark says. Caller holds blockDeltas.
func (s *Informer) eventFreshLocked(obj any) {
	if s.bookmark.r.Load() == nil || s.fresh.reached() {
		return
	}
	if m, err := meta.Accessor(obj); err == nil {
		s.bookmarkFreshLocked(m.GetResourceVersion())
	}
}

// bookmarkFreshLocked makes a warm start waiting for a bookmark fresh at
// the bookmark's resourceVersion, when it is at or after the server's R
// (without a MetadataLister, any bookmark of the resumed watch). Caller
// holds blockDeltas.
func (s *Informer) bookmarkFreshLocked(rv string) {
	if !s.decision.Warm || !s.bookmarkFresh() || s.bookmark.off.Load() || s.fresh.reached() {
		return
	}
	if st := s.resume.Stats(); st.Expired > 0 || st.TooLarge > 0 {
		// A relist is under way, or was: it makes the informer fresh with
		// its list. The watch that said 410 may not be the cache's
		// history; no bookmark decides any more.
		s.stopBookmarkFresh()
		return
	}
	if c, err := resourceversion.CompareResourceVersion(rv, s.freshSt.resumedFrom); err != nil || c < 0 {
		// A server sends a watch only bookmarks past where it began: this
		// one is not of the cache's history (or does not compare).
		s.stopBookmarkFresh()
		if err == nil {
			s.logger.Info("Warning: a bookmark behind the cache's resourceVersion (restored or replaced cluster): relisting over the cache", "bookmark", rv, "cache", s.freshSt.resumedFrom)
			s.counters.otherTimeline.Add(1)
			s.resume.RelistLatest()
		}
		return
	}
	r := s.bookmark.r.Load()
	switch {
	case r == nil && s.metadata != nil:
		return // R not known yet
	case r != nil && !atLeast(rv, *r):
		return
	}
	if n := s.bookmark.n.Load(); r != nil && n >= 0 {
		// Every event up to R is applied: the cache held the scope's
		// state at R, of n objects, when the first event past R came (or
		// holds it now).
		atR := s.indexer.Len()
		if s.bookmark.crossed {
			atR = s.bookmark.atR
		}
		if int64(atR) != n {
			s.otherHistoryLocked("the cache held another number of objects than the server at its resourceVersion", *r, atR, n)
			return
		}
	}
	s.logger.V(1).Info("Fresh at a bookmark of the resumed watch", "resourceVersion", rv)
	s.markFreshLocked(rv)
}

// stopBookmarkFresh makes sure that no bookmark makes the informer fresh:
// it asked for a relist.
func (s *Informer) stopBookmarkFresh() { s.bookmark.off.Store(true) }

// atLeast reports whether resourceVersion a is at or after b; when they do
// not compare, whether they are equal.
func atLeast(a, b string) bool {
	c, err := resourceversion.CompareResourceVersion(a, b)
	if err != nil {
		return a == b
	}
	return c >= 0
}

// shortWatches gives every watch a timeout of at most
// bookmarkWatchTimeout seconds until until is closed or the wait for a
// bookmark is off, and signals st.started after each watch it starts
// meanwhile.
type shortWatches struct {
	cache.ListerWatcher
	until <-chan struct{}
	st    *bookmarkState
}

var _ cache.ListerWatcherWithContext = (*shortWatches)(nil)

// waiting reports whether the informer still waits to be fresh.
func (w *shortWatches) waiting() bool {
	select {
	case <-w.until:
		return false
	default:
		return !w.st.off.Load()
	}
}

func (w *shortWatches) shorten(o metav1.ListOptions) metav1.ListOptions {
	if w.waiting() && (o.TimeoutSeconds == nil || *o.TimeoutSeconds > bookmarkWatchTimeout) {
		t := int64(bookmarkWatchTimeout)
		o.TimeoutSeconds = &t
	}
	return o
}

func (w *shortWatches) signal(err error) {
	if err == nil && w.waiting() {
		select {
		case w.st.started <- struct{}{}:
		default:
		}
	}
}

// ListWithContext lists through the wrapped ListerWatcher.
func (w *shortWatches) ListWithContext(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
	return cache.ToListerWatcherWithContext(w.ListerWatcher).ListWithContext(ctx, o)
}

// Watch watches through the wrapped ListerWatcher, with a short timeout
// until the informer is fresh.
func (w *shortWatches) Watch(o metav1.ListOptions) (watch.Interface, error) {
	return w.WatchWithContext(context.Background(), o)
}

// WatchWithContext is Watch with a context.
func (w *shortWatches) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	wi, err := cache.ToListerWatcherWithContext(w.ListerWatcher).WatchWithContext(ctx, w.shorten(o))
	w.signal(err)
	return wi, err
}
