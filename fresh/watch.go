package fresh

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// BookmarkWatchTimeout is the timeout, in seconds, of a warm start's
// watches while it waits for a bookmark: the shortest for which
// kube-apiserver schedules a bookmark before the deadline (2 s before it,
// on its next bookmark tick, every 1 to 1.25 s).
const BookmarkWatchTimeout = 3

// Watches wraps lw for a Tracker with BookmarkWait: until the informer is
// fresh or the wait is over, every watch gets a timeout of at most
// BookmarkWatchTimeout seconds (the Reflector watches again from where it
// was when one ends), and each watch started signals the Tracker, which
// reads R after the first and nudges kube-apiserver's watch cache after
// the others. Other trackers' lw is returned as it is.
func (t *Tracker) Watches(lw cache.ListerWatcher) cache.ListerWatcher {
	if !t.o.Warm || t.o.BookmarkWait <= 0 {
		return lw
	}
	return &shortWatches{ListerWatcher: lw, t: t}
}

// shortWatches is Tracker.Watches' ListerWatcher.
type shortWatches struct {
	cache.ListerWatcher
	t *Tracker
}

var _ cache.ListerWatcherWithContext = (*shortWatches)(nil)

// waiting reports whether the Tracker still waits for a bookmark.
func (w *shortWatches) waiting() bool {
	return !w.t.Fresh() && !w.t.off.Load() && !w.t.waitOver.Load()
}

func (w *shortWatches) shorten(o metav1.ListOptions) metav1.ListOptions {
	if w.waiting() && (o.TimeoutSeconds == nil || *o.TimeoutSeconds > BookmarkWatchTimeout) {
		t := int64(BookmarkWatchTimeout)
		o.TimeoutSeconds = &t
	}
	return o
}

func (w *shortWatches) signal(err error) {
	if err == nil && w.waiting() {
		select {
		case w.t.started <- struct{}{}:
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
