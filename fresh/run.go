package fresh

import (
	"context"
	"errors"
	"iter"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
)

// Run makes a warm start fresh, once loaded is closed (the file's objects
// serve): it reads the server (the consistent read of one object once a
// watch has started, waiting for a bookmark up to BookmarkWait; the
// metadata list of every object at once when the cache is small, or when
// no bookmark came) and leaves the rest to the loop methods. It returns
// when it has nothing left to do or ctx is done, and owns no goroutine past
// its return.
func (t *Tracker) Run(ctx context.Context, loaded <-chan struct{}) {
	if !t.o.Warm {
		return
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	var early chan readResult
	if t.o.BookmarkWait > 0 && t.o.Metadata != nil {
		// The server's resourceVersion, read at once: beside the load and
		// the watch's start, not after them (the read opens the
		// connection the watch then shares, too).
		early = make(chan readResult, 1)
		wg.Go(func() {
			list, err := t.o.Metadata.ListMetadata(ctx, metav1.ListOptions{Limit: 1})
			early <- readResult{list, err}
		})
	}
	select {
	case <-ctx.Done():
		return
	case <-loaded:
	case <-t.done:
	}
	if t.Fresh() {
		return
	}
	listing := t.o.List && t.o.Metadata != nil && t.o.ListMax > 0 && t.cacheLen() <= t.o.ListMax
	if listing {
		// A small list tells sooner than kube-apiserver's bookmark, which
		// comes 0 to 2.3 s after the watch starts.
		wg.Go(func() { t.listAndPlan(ctx) })
	}
	if t.o.BookmarkWait > 0 && t.awaitBookmark(ctx, early) {
		return
	}
	switch {
	case listing:
		// The list decides (its plan, or its fallback).
	case t.o.List && t.o.Metadata != nil && !t.NotComparable():
		t.listAndPlan(ctx)
	case t.o.Metadata == nil:
		t.startFallback("no MetadataLister: fresh at the first watch event")
	default:
		// Nothing waits for Fresh (SyncAfterDiskLoad): spare the server
		// the metadata list.
		t.startFallback("SyncAfterDiskLoad: fresh at the first watch event (SyncAfterFresh lists metadata to know)")
	}
}

// cacheLen returns the cache's size, holding Lock.
func (t *Tracker) cacheLen() int {
	t.o.Lock.Lock()
	defer t.o.Lock.Unlock()
	return t.o.Cache.Len()
}

// freshBackoff paces metadata lists while the server is unreachable.
func freshBackoff() wait.Backoff {
	return wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: 1 << 30, Cap: 30 * time.Second}
}

// listAndPlan lists every object's metadata (retrying with backoff while
// the server is unreachable), diffs it against the cache and installs the
// catch-up the loop completes (or the verdict).
func (t *Tracker) listAndPlan(ctx context.Context) {
	backoff := freshBackoff()
	var list *metav1.PartialObjectMetadataList
	for {
		var err error
		if list, err = t.ListMetadata(ctx); err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		t.listErrors.Add(1)
		t.o.Logger.V(2).Info("Metadata list failed; retrying", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-t.done:
			return
		case <-t.o.Clock.After(backoff.Step()):
		}
	}
	t.lists.keep(list)
	// The diff and the catch-up it plans are installed together, between
	// two deltas of the informer loop: no event slips in between.
	t.o.Lock.Lock()
	if t.fresh || t.listPending.Load() {
		t.o.Lock.Unlock()
		return // a relist came first, or is pending
	}
	var plan *Catchup
	var err error
	t.o.Cache.Versions(func(applied string, objects iter.Seq2[string, string]) {
		plan, err = PlanResume(list, metaKey, t.o.ResumedFrom, applied, objects)
	})
	switch {
	case err == nil:
		t.changed.Store(int64(plan.Changed))
		t.created.Store(int64(plan.Created))
		t.gone.Store(int64(plan.Gone))
		t.o.Logger.V(1).Info("Metadata list diffed against the cache", "resourceVersion", plan.ResourceVersion,
			"changed", plan.Changed, "created", plan.Created, "deleted", plan.Gone, "unchanged", plan.Unchanged)
		if plan.Done() {
			t.mark(plan.ResourceVersion)
		} else {
			t.catchup = plan
			t.pending.Store(int64(plan.Pending()))
		}
	case errors.Is(err, ErrOtherTimeline):
		t.otherHistory("the metadata list", "err", err)
	}
	t.o.Lock.Unlock()
	switch {
	case errors.Is(err, ErrNotComparable):
		t.fallbackWhy.Store(ptrTo(err.Error()))
		t.NoteNotComparable(err)
		t.startFallback("")
	case err != nil && !errors.Is(err, ErrOtherTimeline):
		t.startFallback(err.Error())
	}
}

// startFallback makes freshness the first watch event or bookmark the
// informer applies (at once if it has applied one), logged once: why is
// stored and logged, unless "" (the caller has done both).
func (t *Tracker) startFallback(why string) {
	if why != "" {
		t.fallbackWhy.Store(&why)
		t.o.Logger.Info("Freshness falls back to the first watch event", "reason", why)
	}
	t.o.Lock.Lock()
	defer t.o.Lock.Unlock()
	if t.fresh {
		return
	}
	t.fallback = true
	if t.sawWatch && !t.listPending.Load() {
		t.mark("")
	}
}

// awaitBookmark waits up to BookmarkWait for a bookmark or event to make
// the informer fresh (progress), reading the server's resourceVersion once
// a watch has started. It returns true when there is nothing more to do
// (fresh, or ctx done), false when the metadata list or the fallback is to
// decide.
func (t *Tracker) awaitBookmark(ctx context.Context, early <-chan readResult) bool {
	defer t.waitOver.Store(true)
	if t.off.Load() {
		return t.Fresh()
	}
	timeout := t.o.Clock.After(t.o.BookmarkWait)
	for {
		select {
		case <-ctx.Done():
			return true
		case <-t.done:
			return true
		case res := <-early:
			early = nil
			if res.err != nil {
				t.o.Logger.V(2).Info("Reading the server's resourceVersion failed", "err", res.err)
				continue // the next watch reads it again
			}
			if !t.compareServerVersion(res.list) {
				return t.Fresh()
			}
		case <-t.started:
			if t.rKnown.Load() || early != nil {
				// The first read was before this watch began: read again,
				// so that the watch cache moves past where it began and
				// kube-apiserver sends its bookmark.
				t.nudge(ctx)
				continue
			}
			if t.readServerVersion(ctx) {
				continue
			}
			return t.Fresh()
		case <-timeout:
			if t.Fresh() {
				return true
			}
			t.o.Logger.Info("No bookmark from the server within FreshBookmarkWait: the metadata list or the first watch event decides", "freshBookmarkWait", t.o.BookmarkWait)
			return false
		}
	}
}

// readServerVersion lists one object's metadata (a consistent read) to
// learn the server's current resourceVersion R, which a bookmark or event
// must reach. It returns false when a bookmark cannot tell: R is behind the
// resume point or the listed object is older than the cache's copy of it
// (another history: the metadata list finds out), or resourceVersions do
// not compare. A failed read returns true: the next watch tries again.
func (t *Tracker) readServerVersion(ctx context.Context) bool {
	if t.o.Metadata == nil {
		t.rKnown.Store(true)
		return true // any bookmark of the resumed watch (Bookmark)
	}
	list, err := t.o.Metadata.ListMetadata(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		t.o.Logger.V(2).Info("Reading the server's resourceVersion failed", "err", err)
		return true
	}
	return t.compareServerVersion(list)
}

// readResult is a one-object read of the server's metadata.
type readResult struct {
	list *metav1.PartialObjectMetadataList
	err  error
}

// compareServerVersion compares the server's resourceVersion R, read with
// one object's metadata, with the cache (see readServerVersion).
func (t *Tracker) compareServerVersion(list *metav1.PartialObjectMetadataList) bool {
	r := list.ResourceVersion
	n := int64(-1)
	switch {
	case list.Continue == "":
		n = int64(len(list.Items))
	case list.RemainingItemCount != nil:
		n = int64(len(list.Items)) + *list.RemainingItemCount
	}
	t.o.Lock.Lock()
	defer t.o.Lock.Unlock()
	if t.fresh || t.listPending.Load() {
		return true
	}
	// The timeline is checked against the resume point, as PlanResume
	// does: the watch may have applied events past R since the read.
	c, err := resourceversion.CompareResourceVersion(r, t.o.ResumedFrom)
	if err != nil {
		t.o.Logger.V(1).Info("Resource versions do not compare: the metadata list decides freshness", "server", r, "cache", t.o.ResumedFrom, "err", err)
		return false
	}
	if c < 0 {
		t.o.Logger.Info("The server's state is older than the cache's (restored or replaced cluster?): the metadata list decides", "server", r, "cache", t.o.ResumedFrom)
		return false
	}
	applied := t.o.Cache.ResourceVersion()
	c, err = resourceversion.CompareResourceVersion(applied, r)
	switch {
	case err != nil:
		t.o.Logger.V(1).Info("Resource versions do not compare: the metadata list decides freshness", "server", r, "cache", applied, "err", err)
		return false
	case c > 0:
		// The watch is in order and has applied an event past R: every
		// event up to R is in the cache.
		t.o.Logger.V(1).Info("Fresh: the cache has applied past the server's resourceVersion", "resourceVersion", applied, "server", r)
		t.mark(applied)
		return true
	case c == 0 && n >= 0 && int64(t.o.Cache.Len()) != n:
		t.otherHistory("the cache holds another number of objects than the server at the same resourceVersion",
			"resourceVersion", applied, "cached", t.o.Cache.Len(), "server", n)
		return true
	case c == 0:
		t.o.Logger.V(1).Info("Fresh: the cache has applied the server's resourceVersion", "resourceVersion", applied)
		t.mark(applied)
		return true
	}
	if t.olderThanCache(list) {
		t.o.Logger.Info("The server's state is older than the cache's (restored or replaced cluster?): the metadata list decides", "server", r, "cache", applied)
		return false
	}
	if list.Continue == "" {
		// The read holds the whole scope at R (empty, or one object: many
		// of a controller manager's informers): it is the metadata list
		// of every object, for free.
		var plan *Catchup
		var err error
		t.o.Cache.Versions(func(applied string, objects iter.Seq2[string, string]) {
			plan, err = PlanResume(list, metaKey, t.o.ResumedFrom, applied, objects)
		})
		switch {
		case err == nil && plan.Done():
			t.o.Logger.V(1).Info("Fresh: the cache holds the whole scope as the server has it", "resourceVersion", plan.ResourceVersion)
			t.mark(plan.ResourceVersion)
			return true
		case err == nil:
			t.catchup = plan
			t.pending.Store(int64(plan.Pending()))
		case errors.Is(err, ErrOtherTimeline):
			t.otherHistory("the read of the whole scope", "err", err)
			return true
		}
	}
	t.r, t.n = r, n
	t.target.Store(&r)
	t.rKnown.Store(true)
	return true
}

// olderThanCache reports whether the list holds an object at an older
// resourceVersion than the cache's copy of it: in one history, a list at
// or after the cache's resourceVersion has every object at its cached
// version or later. Caller holds Lock.
func (t *Tracker) olderThanCache(list *metav1.PartialObjectMetadataList) bool {
	for i := range list.Items {
		key, err := cache.MetaNamespaceKeyFunc(&list.Items[i])
		if err != nil {
			continue
		}
		cached, ok := t.o.Cache.VersionOf(key)
		if !ok {
			continue
		}
		if c, err := resourceversion.CompareResourceVersion(list.Items[i].ResourceVersion, cached); err == nil && c < 0 {
			return true
		}
	}
	return false
}

// nudge makes a consistent read of one object's metadata again, for the
// new watch: kube-apiserver tries a watch's bookmark once, about a second
// in, and sends it only if its watch cache has moved past where the watch
// began; a consistent read makes it ask etcd for progress, which moves it
// to etcd's revision when anything in the cluster was written since.
func (t *Tracker) nudge(ctx context.Context) {
	if t.o.Metadata == nil {
		return
	}
	if _, err := t.o.Metadata.ListMetadata(ctx, metav1.ListOptions{Limit: 1}); err != nil {
		t.o.Logger.V(2).Info("Reading the server's resourceVersion failed", "err", err)
	}
}

func ptrTo[T any](v T) *T { return &v }

// metaKey is the informer's key of a metadata list item.
func metaKey(m *metav1.PartialObjectMetadata) (string, error) { return cache.MetaNamespaceKeyFunc(m) }
