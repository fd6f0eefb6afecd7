package fresh

import (
	"iter"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Cache is what a Tracker reads of the informer's cache. The Tracker calls
// it holding Options.Lock only, so it sees the cache between two applied
// deltas.
type Cache interface {
	// Len is the number of objects the cache holds.
	Len() int
	// ResourceVersion is the resourceVersion the cache has applied.
	ResourceVersion() string
	// Versions calls f with the cache's resourceVersion and every object's
	// key and resourceVersion, without decoding payloads.
	Versions(f func(applied string, objects iter.Seq2[string, string]))
	// VersionOf returns the resourceVersion of the cached object of key.
	VersionOf(key string) (rv string, ok bool)
}

// Reflector is what a Tracker asks of the informer's reflector.
type Reflector interface {
	// RelistLatest makes the reflector list the server's latest state
	// over the cache (a consistent read, not "not older than" the cache).
	RelistLatest()
	// Expired reports whether the server has answered a watch with 410
	// Gone or "Too large resource version": a relist is, or was, under
	// way, and its list makes the informer fresh.
	Expired() bool
}

// Options configure a Tracker.
type Options struct {
	// Cache is the informer's cache; Lock the lock under which the
	// informer applies deltas and calls the Tracker's loop methods.
	Cache Cache
	Lock  sync.Locker
	// Reflector is asked for relists.
	Reflector Reflector
	// Metadata reads the server's metadata (nil: no reads; a warm start
	// is then fresh at a bookmark when BookmarkWait is set, else at the
	// first watch event).
	Metadata MetadataLister
	// Warm says the cache was loaded from a file and resumes its watch
	// from ResumedFrom. A cold start is fresh at its first list.
	Warm        bool
	ResumedFrom string
	// BookmarkWait > 0: a warm start reads R once its watch has started
	// and is fresh at the first bookmark or watch event at or after R, if
	// one comes within BookmarkWait (else List decides, or the fallback).
	BookmarkWait time.Duration
	// List says a metadata list of every object may decide freshness (the
	// informer waits for Fresh: SyncAfterFresh).
	List bool
	// ListMax > 0, with List: a warm start whose cache holds at most
	// ListMax objects lists every object's metadata at once, beside the
	// wait for a bookmark, and is fresh by whichever tells first.
	ListMax int
	// Clock; default the real clock.
	Clock clock.Clock
	// Logger logs the verdicts.
	Logger klog.Logger
	// OnFresh is called, holding Lock, once the informer is fresh at rv
	// ("" when it is not known: the fallback); when rv is after what the
	// cache has applied (its content equal to the server's at rv), the
	// informer moves its resourceVersion to rv.
	OnFresh func(rv string)
	// OnOtherHistory is called, holding Lock, when the Tracker finds that
	// the server's history is not the cache's (it asks for a relist of the
	// latest state).
	OnOtherHistory func()
}

// Tracker decides when a warm start is fresh (see the package doc). Build
// it with New; run Run beside the informer loop.
type Tracker struct {
	o    Options
	done chan struct{} // closed at Fresh
	at   atomic.Int64  // UnixNano of Fresh
	rv   atomic.Pointer[string]

	// Guarded by o.Lock.
	fresh bool
	// r is the server's resourceVersion R read at the start ("": not
	// known); n the scope's size at R (-1: not known, e.g. selectors).
	r string
	n int64
	// crossed is set, and atR counted, when the first watch event past R
	// is applied: the cache then held the scope's state at R.
	crossed bool
	atR     int
	// catchup is the metadata list's plan, nil when there is none; one
	// the loop's deltas complete is judged at the end of their batch
	// (EndBatch).
	catchup *Catchup
	// skipTo is R when the informer was made fresh at R ahead of what the
	// watch had applied (its content equal to the server's at R): the
	// watch's events up to R are history the content already holds (a
	// create and delete made while down among them), and are skipped
	// (Skip).
	skipTo string
	// fallback: fresh at the first watch event or bookmark applied;
	// sawWatch: one was applied already.
	fallback, sawWatch bool

	// listPending: a relist was asked for (another history, records that
	// do not decode): only the list it brings makes the informer fresh.
	listPending atomic.Bool
	// off is set once no bookmark or event at or after R decides any more
	// (a relist is pending or was, the server sent what is not of the
	// cache's history); waitOver once the wait for a bookmark is over. The
	// short watches end with either.
	off, waitOver atomic.Bool
	// started is signalled after each watch the short watches start.
	started chan struct{}
	// rKnown is set once R is read (awaitBookmark reads it unlocked);
	// target is R, for Status.
	rKnown atomic.Bool
	target atomic.Pointer[string]

	// For Health and metrics.
	changed, created, gone, pending, listErrors atomic.Int64
	fallbackWhy                                 atomic.Pointer[string]
	notComparable                               atomic.Bool

	lists metaLists
}

// New returns a Tracker. A cold one is fresh at its first Listed.
func New(o Options) *Tracker {
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	t := &Tracker{o: o, done: make(chan struct{}), n: -1, started: make(chan struct{}, 1)}
	t.lists.clock = o.Clock
	return t
}

// Done is closed once the informer is fresh.
func (t *Tracker) Done() <-chan struct{} { return t.done }

// Fresh reports whether the informer is fresh.
func (t *Tracker) Fresh() bool {
	select {
	case <-t.done:
		return true
	default:
		return false
	}
}

// Status is what a Tracker reports for Health and metrics.
type Status struct {
	// Fresh, and when (zero before).
	Fresh bool
	At    time.Time
	// ResourceVersion is the server's resourceVersion the cache was found
	// equal to ("" when not known: the fallback).
	ResourceVersion string
	// Pending counts the keys the catch-up still waits for; Changed,
	// Created and Gone what the metadata list's plan named.
	Pending, Changed, Created, Gone int
	// ListErrors counts failed metadata lists.
	ListErrors int64
	// Fallback says why freshness is the first watch event ("" if not).
	Fallback string
	// Target is the server's resourceVersion R the resumed watch must
	// reach ("" when not known).
	Target string
}

// Status returns the Tracker's status.
func (t *Tracker) Status() Status {
	st := Status{
		Fresh:      t.Fresh(),
		Pending:    int(t.pending.Load()),
		Changed:    int(t.changed.Load()),
		Created:    int(t.created.Load()),
		Gone:       int(t.gone.Load()),
		ListErrors: t.listErrors.Load(),
	}
	if st.Fresh {
		st.At = time.Unix(0, t.at.Load())
		st.Pending = 0
		if rv := t.rv.Load(); rv != nil {
			st.ResourceVersion = *rv
		}
	}
	if why := t.fallbackWhy.Load(); why != nil {
		st.Fallback = *why
	}
	if r := t.target.Load(); r != nil {
		st.Target = *r
	}
	return st
}

// NotComparable reports whether the server's resourceVersions were found
// not to compare with the cache's: no metadata list is made any more.
func (t *Tracker) NotComparable() bool { return t.notComparable.Load() }

// NoteNotComparable records that resourceVersions do not compare (an
// aggregated API may number them otherwise), logged once: from then on
// freshness is the first watch event and relists are full.
func (t *Tracker) NoteNotComparable(err error) {
	if t.notComparable.CompareAndSwap(false, true) {
		t.o.Logger.Info("Resource versions are not comparable: freshness is the first watch event, and relists are full", "err", err)
	}
}

// The loop methods: the informer calls them for every delta it applies,
// in order, holding Options.Lock.

// Crossing notes, before a watch event of resourceVersion rv is applied,
// how many objects the cache holds then: the first event past R finds the
// cache at the scope's state at R, whose size the server said.
func (t *Tracker) Crossing(rv string, count int) {
	if t.fresh || t.crossed || t.r == "" {
		return
	}
	if c, err := resourceversion.CompareResourceVersion(rv, t.r); err == nil && c > 0 {
		t.crossed, t.atR = true, count
	}
}

// Applied notes a watch delta the cache applied: the object of key at
// resourceVersion rv (for a delete, the last state known), deleted for a
// delete; tombstone for a delete whose final state is unknown (not a watch
// event of the server's). count is how many objects the cache holds right
// after it, as if it had been applied alone (a batch's later deltas are
// in the cache already).
func (t *Tracker) Applied(key, rv string, deleted, tombstone bool, count int) {
	if t.fresh || t.listPending.Load() {
		return
	}
	if c := t.catchup; c != nil {
		// Fresh once the batch is applied, if its last delta leaves the
		// plan done (EndBatch): a later delta of the batch may bring what
		// the plan must wait for again (an object created before R).
		if c.Observe(key, rv, deleted) {
			return
		}
		t.pending.Store(int64(c.Pending()))
	}
	if tombstone {
		return
	}
	t.sawWatch = true
	if t.fallback {
		t.mark("")
		return
	}
	if t.r != "" {
		t.progress(rv, count)
	}
}

// EndBatch notes the end of a batch of deltas (one delta alone too): the
// catch-up the batch completed makes the informer fresh now.
func (t *Tracker) EndBatch() {
	if t.catchup != nil && t.catchup.Done() && !t.fresh && !t.listPending.Load() {
		t.caughtUp(t.catchup)
	}
}

// Skipping reports whether the informer skips the watch's history (Skip).
// Caller holds Lock.
func (t *Tracker) Skipping() bool { return t.skipTo != "" }

// Skip reports whether the watch event of resourceVersion rv is history
// the cache holds already (it was made fresh at a later R, see skipTo):
// the informer does not apply it. The first event past R ends that.
// Caller holds Lock.
func (t *Tracker) Skip(rv string) bool {
	if t.skipTo == "" {
		return false
	}
	if c, err := resourceversion.CompareResourceVersion(rv, t.skipTo); err == nil && c <= 0 {
		return true
	}
	t.skipTo = ""
	return false
}

// Bookmark notes a bookmark the cache applied.
func (t *Tracker) Bookmark(rv string) {
	if t.fresh || t.listPending.Load() {
		return
	}
	if c := t.catchup; c != nil && c.ObserveProgress(rv) {
		t.caughtUp(c)
		return
	}
	t.sawWatch = true
	if t.fallback {
		t.mark("")
		return
	}
	if t.o.BookmarkWait > 0 && (t.r != "" || t.o.Metadata == nil) {
		t.progress(rv, t.o.Cache.Len())
	}
}

// Listed notes a list from the server applied over the cache (a cold
// start's first, or a relist): the cache is the server's state at rv.
func (t *Tracker) Listed(rv string) {
	t.listPending.Store(false)
	// The list is the server's state now: nothing after it is history
	// the cache holds (review 5: a list behind R, then the new watch's
	// events up to R).
	t.skipTo = ""
	t.mark(rv)
}

// RelistRequested notes that the informer asked for a relist (records of
// the file do not decode, another history): until its list is applied
// (Listed), the cache is the server's state at no resourceVersion, and
// nothing else makes it fresh. It needs no lock.
func (t *Tracker) RelistRequested() {
	t.off.Store(true)
	t.listPending.Store(true)
	t.pending.Store(0)
}

// progress makes the informer fresh at a bookmark or watch event at rv,
// after which the cache holds count objects, when rv is at or after R
// (without a MetadataLister, any bookmark): the watch has then delivered
// every event before rv, and the cache holds the server's state at R, if
// its size at R was the scope's. Caller holds Lock.
func (t *Tracker) progress(rv string, count int) {
	if t.off.Load() {
		return
	}
	if t.o.Reflector.Expired() {
		// A relist is under way, or was: its list makes the informer
		// fresh. The watch that said 410 may not be of the cache's
		// history; no bookmark decides any more.
		t.off.Store(true)
		return
	}
	if c, err := resourceversion.CompareResourceVersion(rv, t.o.ResumedFrom); err != nil || c < 0 {
		// A server sends a watch only what follows where it began: this
		// is not of the cache's history (or does not compare).
		t.off.Store(true)
		if err == nil {
			t.otherHistory("a bookmark or event behind the cache's resourceVersion", "resourceVersion", rv, "cache", t.o.ResumedFrom)
		}
		return
	}
	if t.r != "" && !atLeast(rv, t.r) {
		return
	}
	if t.r != "" && t.n >= 0 {
		atR := count
		if t.crossed {
			atR = t.atR
		}
		if int64(atR) != t.n {
			t.otherHistory("the cache held another number of objects than the server at its resourceVersion",
				"resourceVersion", t.r, "cached", atR, "server", t.n)
			return
		}
	}
	t.o.Logger.V(1).Info("Fresh at a bookmark or event of the resumed watch", "resourceVersion", rv)
	t.mark(rv)
}

// caughtUp ends the catch-up c, whose watch has passed the list's
// resourceVersion: fresh, unless the watch never brought keys the list
// named, which only a server of another history does. Caller holds Lock.
func (t *Tracker) caughtUp(c *Catchup) {
	missed := c.Missed()
	if len(missed) == 0 {
		t.mark(c.ResourceVersion)
		return
	}
	t.otherHistory("the watch passed the metadata list's resourceVersion without bringing what the list named",
		"resourceVersion", c.ResourceVersion, "missed", len(missed), "key", missed[0])
}

// otherHistory relists the server's latest state over the cache: what the
// server said cannot be of the cache's history (a restored or replaced
// cluster). Once only: until the list is applied, nothing else decides.
// Caller holds Lock.
func (t *Tracker) otherHistory(why string, kv ...any) {
	if t.fresh || t.listPending.Load() {
		return
	}
	t.RelistRequested()
	t.o.Logger.Info("Warning: the server's history is not the cache's (restored or replaced cluster): relisting over the cache",
		append([]any{"reason", why}, kv...)...)
	if t.o.OnOtherHistory != nil {
		t.o.OnOtherHistory()
	}
	t.o.Reflector.RelistLatest()
}

// mark makes the informer fresh at rv. Caller holds Lock.
func (t *Tracker) mark(rv string) {
	if t.fresh {
		return
	}
	t.fresh = true
	t.catchup = nil
	t.pending.Store(0)
	t.off.Store(true)
	if rv != "" && before(t.o.Cache.ResourceVersion(), rv) {
		t.skipTo = rv
	}
	if rv != "" {
		t.rv.Store(&rv)
	}
	t.at.Store(t.o.Clock.Now().UnixNano())
	close(t.done)
	if t.o.OnFresh != nil {
		t.o.OnFresh(rv)
	}
}

// atLeast reports whether resourceVersion a is at or after b; when they do
// not compare, whether they are equal.
func atLeast(a, b string) bool {
	c, err := resourceversion.CompareResourceVersion(a, b)
	if err != nil {
		return a == b
	}
	return c >= 0
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
