package reflector

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/watchlist"
	"k8s.io/utils/clock"
)

// Options configure a ListerWatcher. A nil *Options means a cold start.
type Options struct {
	// ResourceVersion is the saved resourceVersion to resume from; "" means
	// a cold start (every call goes to the server).
	ResourceVersion string
	// Snapshot returns the persisted objects for the disk answer.
	Snapshot func() []runtime.Object
	// OnDiskAnswer is called just before the disk answer is returned.
	OnDiskAnswer func()
	// Clock stamps events. Default: the real clock.
	Clock clock.PassiveClock
	// Relist, when set, may answer a relist (a List after the first, such
	// as the one after a 410) in place of the server: it returns the list
	// to hand the Reflector, or nil to let the server answer. Its error is
	// the List's.
	Relist func(ctx context.Context, options metav1.ListOptions) (runtime.Object, error)
}

// Stats are what a ListerWatcher has seen.
type Stats struct {
	// Lists and Watches count calls that reached the wrapped ListerWatcher.
	Lists, Watches int64
	// DiskAnswers counts Lists answered from disk (0 or 1).
	DiskAnswers int64
	// Events counts watch events received (bookmarks included).
	Events int64
	// Errors counts failed calls and watch ERROR events.
	Errors int64
	// Expired counts 410 Expired/Gone answers (the resourceVersion was too
	// old): each is followed by a relist.
	Expired int64
	// LastEvent is when the last watch event arrived.
	LastEvent time.Time
	// LastError is the last error seen, or nil.
	LastError error
	// Resumed is true once the server accepted a warm start's resume: a
	// watch event other than an error arrived, or a List from the server
	// succeeded (a relist after a 410). A cold start resumes nothing: it
	// stays false.
	Resumed bool
	// RelistsRequested counts relists forced by RequestRelist.
	RelistsRequested int64
	// PartialRelists counts relists answered by Options.Relist (only what
	// changed, fetched), not by a full list from the server.
	PartialRelists int64
	// TooLarge counts "Too large resource version" answers: the server is
	// behind the resourceVersion asked for (a restored or replaced
	// cluster, or a server that has not caught up yet).
	TooLarge int64
}

// ListerWatcher wraps a cache.ListerWatcher to resume from disk. Use New.
type ListerWatcher struct {
	inner cache.ListerWatcher
	opts  Options
	clock clock.PassiveClock

	diskPending atomic.Bool // the first List is still to be answered from disk
	resumed     atomic.Bool
	resumedCh   chan struct{}
	resumedOnce sync.Once
	// watchingCh is closed once a watch has started (the server accepted
	// a WATCH request).
	watchingCh   chan struct{}
	watchingOnce sync.Once
	// listedOnce is set by the first List (from disk or the server):
	// later ones are relists.
	listedOnce atomic.Bool
	// latest makes the next server List a consistent read of the most
	// recent state (resourceVersion ""), whatever the Reflector asks for.
	latest atomic.Bool

	// relist is set by RequestRelist until a watch is ended (or refused)
	// for it; relistSignal wakes the running watch.
	relist       atomic.Bool
	relistSignal chan struct{}

	// lastEventRV is the resourceVersion of the last watch event (a
	// bookmark included) received from the server: the informer loop has
	// applied at most that far.
	lastEventRV atomic.Pointer[string]

	// statsMu guards stats.
	statsMu sync.Mutex
	stats   Stats
}

var (
	_ cache.ListerWatcherWithContext = (*ListerWatcher)(nil)
	_ cache.ListerWatcher            = (*ListerWatcher)(nil)
)

// New wraps inner. With opts.ResourceVersion set, the first List is
// answered from opts.Snapshot.
func New(inner cache.ListerWatcher, opts *Options) *ListerWatcher {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	lw := &ListerWatcher{inner: inner, opts: o, clock: o.Clock, resumedCh: make(chan struct{}), watchingCh: make(chan struct{}), relistSignal: make(chan struct{}, 1)}
	lw.diskPending.Store(o.ResourceVersion != "" && o.Snapshot != nil)
	return lw
}

// Warm reports whether the ListerWatcher resumes from disk.
func (lw *ListerWatcher) Warm() bool { return lw.opts.ResourceVersion != "" && lw.opts.Snapshot != nil }

// IsWatchListSemanticsUnSupported tells client-go's Reflector not to use
// WatchList: true on a warm start (see the package doc), else whatever the
// wrapped ListerWatcher says.
func (lw *ListerWatcher) IsWatchListSemanticsUnSupported() bool {
	if lw.Warm() {
		return true
	}
	return watchlist.DoesClientNotSupportWatchListSemantics(lw.inner)
}

// Resumed returns a channel closed once the server accepted the resume or
// answered a List.
func (lw *ListerWatcher) Resumed() <-chan struct{} { return lw.resumedCh }

func (lw *ListerWatcher) markResumed() {
	lw.resumedOnce.Do(func() {
		lw.resumed.Store(true)
		lw.statsMu.Lock()
		lw.stats.Resumed = lw.Warm() // a cold start has nothing to resume
		lw.statsMu.Unlock()
		close(lw.resumedCh)
	})
}

// Watching returns a channel closed once the server has accepted a watch.
func (lw *ListerWatcher) Watching() <-chan struct{} { return lw.watchingCh }

// LastEventResourceVersion returns the resourceVersion of the last watch
// event (bookmarks included) received from the server, "" before any: the
// events the Reflector queues go no further. A relist may take a list as
// the server's latest state only if it is not older.
func (lw *ListerWatcher) LastEventResourceVersion() string {
	if p := lw.lastEventRV.Load(); p != nil {
		return *p
	}
	return ""
}

// RelistLatest makes the Reflector list again, and that list a consistent
// read of the server's most recent state (resourceVersion "") rather than
// "not older than" the cache's resourceVersion: for a server whose history
// is not the cache's (restored from a backup, or replaced), which would
// otherwise answer "Too large resource version" until it catches up.
func (lw *ListerWatcher) RelistLatest() {
	lw.latest.Store(true)
	lw.RequestRelist()
}

// RequestRelist makes the Reflector list again from the server: the running
// watch ends with a 410 Expired error event (or the next watch is refused
// with one), which client-go's Reflector answers with a LIST. The informer
// asks for it when objects loaded from the file turn out not to decode:
// the list replaces them. It never blocks.
func (lw *ListerWatcher) RequestRelist() {
	lw.relist.Store(true)
	select {
	case lw.relistSignal <- struct{}{}:
	default:
	}
}

// relistError is the 410 a requested relist ends a watch with.
func relistError() *apierrors.StatusError {
	return apierrors.NewResourceExpired("boltinformer: relist requested (objects of the cache file do not decode, or the server's history is not the cache's)")
}

// takeRelist consumes a pending relist request.
func (lw *ListerWatcher) takeRelist() bool {
	if !lw.relist.Swap(false) {
		return false
	}
	lw.record(func(s *Stats) { s.RelistsRequested++ })
	return true
}

// Stats returns a copy of what the ListerWatcher has seen.
func (lw *ListerWatcher) Stats() Stats {
	lw.statsMu.Lock()
	defer lw.statsMu.Unlock()
	return lw.stats
}

// recordError counts a failed call (or a watch ERROR event's status).
func (lw *ListerWatcher) recordError(err error) {
	lw.record(func(s *Stats) {
		s.Errors++
		s.LastError = err
		if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			s.Expired++
		}
		if isTooLarge(err) {
			s.TooLarge++
		}
	})
}

// isTooLarge reports a "Too large resource version" answer.
func isTooLarge(err error) bool {
	return apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge)
}

func (lw *ListerWatcher) record(f func(*Stats)) {
	lw.statsMu.Lock()
	f(&lw.stats)
	lw.statsMu.Unlock()
}

// List implements cache.Lister.
func (lw *ListerWatcher) List(options metav1.ListOptions) (runtime.Object, error) {
	return lw.ListWithContext(context.Background(), options)
}

// ListWithContext answers the first call of a warm start from disk, and
// every other call from the wrapped ListerWatcher.
func (lw *ListerWatcher) ListWithContext(ctx context.Context, options metav1.ListOptions) (runtime.Object, error) {
	if lw.diskPending.CompareAndSwap(true, false) {
		lw.listedOnce.Store(true)
		objs := lw.opts.Snapshot()
		list := &metav1.List{ListMeta: metav1.ListMeta{ResourceVersion: lw.opts.ResourceVersion}}
		list.Items = make([]runtime.RawExtension, len(objs))
		for i, o := range objs {
			list.Items[i].Object = o
		}
		lw.record(func(s *Stats) { s.DiskAnswers++ })
		if lw.opts.OnDiskAnswer != nil {
			lw.opts.OnDiskAnswer()
		}
		return list, nil
	}
	relist := lw.listedOnce.Load()
	if options.Continue == "" && lw.latest.Swap(false) {
		options.ResourceVersion, options.ResourceVersionMatch = "", ""
	} else if relist && options.Continue == "" && lw.opts.Relist != nil {
		obj, err := lw.opts.Relist(ctx, options)
		if err != nil {
			lw.recordError(err)
			return nil, err
		}
		if obj != nil {
			lw.record(func(s *Stats) { s.PartialRelists++ })
			lw.markResumed()
			return obj, nil
		}
	}
	lw.record(func(s *Stats) { s.Lists++ })
	obj, err := cache.ToListerWatcherWithContext(lw.inner).ListWithContext(ctx, options)
	if err != nil {
		lw.recordError(err)
		return nil, err
	}
	lw.listedOnce.Store(true)
	lw.markResumed()
	return obj, nil
}

// Watch implements cache.Watcher.
func (lw *ListerWatcher) Watch(options metav1.ListOptions) (watch.Interface, error) {
	return lw.WatchWithContext(context.Background(), options)
}

// WatchWithContext starts a watch on the wrapped ListerWatcher and observes
// its events.
func (lw *ListerWatcher) WatchWithContext(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
	if lw.takeRelist() {
		return nil, relistError()
	}
	lw.record(func(s *Stats) { s.Watches++ })
	w, err := cache.ToListerWatcherWithContext(lw.inner).WatchWithContext(ctx, options)
	if err != nil {
		lw.recordError(err)
		return nil, err
	}
	lw.watchingOnce.Do(func() { close(lw.watchingCh) })
	return newObserved(ctx, w, lw), nil
}

// observed forwards a watch's events, counting them. It owns one goroutine,
// stopped by Stop, by the wrapped watch ending, or by ctx.
type observed struct {
	inner  watch.Interface
	lw     *ListerWatcher
	out    chan watch.Event
	stopCh chan struct{}
	once   sync.Once
}

func newObserved(ctx context.Context, w watch.Interface, lw *ListerWatcher) *observed {
	o := &observed{inner: w, lw: lw, out: make(chan watch.Event), stopCh: make(chan struct{})}
	go o.run(ctx)
	return o
}

func (o *observed) run(ctx context.Context) {
	defer close(o.out)
	defer o.inner.Stop()
	in := o.inner.ResultChan()
	for {
		select {
		case ev, ok := <-in:
			if !ok {
				return
			}
			now := o.lw.clock.Now()
			if ev.Type == watch.Error {
				err := apierrors.FromObject(ev.Object)
				expired := apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
				o.lw.record(func(s *Stats) {
					s.Events++
					s.Errors++
					s.LastEvent = now
					s.LastError = err
					if expired {
						s.Expired++
					}
				})
			} else {
				o.lw.record(func(s *Stats) { s.Events++; s.LastEvent = now })
				o.lw.markResumed()
				if m, err := meta.Accessor(ev.Object); err == nil {
					rv := m.GetResourceVersion()
					o.lw.lastEventRV.Store(&rv)
				}
			}
			select {
			case o.out <- ev:
			case <-o.stopCh:
				return
			case <-ctx.Done():
				return
			}
		case <-o.lw.relistSignal:
			if !o.lw.takeRelist() {
				continue
			}
			status := relistError().Status()
			select {
			case o.out <- watch.Event{Type: watch.Error, Object: &status}:
			case <-o.stopCh:
			case <-ctx.Done():
			}
			return
		case <-o.stopCh:
			return
		case <-ctx.Done():
			return
		}
	}
}

// Stop implements watch.Interface.
func (o *observed) Stop() { o.once.Do(func() { close(o.stopCh) }) }

// ResultChan implements watch.Interface.
func (o *observed) ResultChan() <-chan watch.Event { return o.out }
