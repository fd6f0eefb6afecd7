package fresh

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
)

// listReuse bounds how old a warm start's metadata list may be for a
// relist to take it.
const listReuse = 30 * time.Second

// metaLists are a Tracker's metadata lists of every object: the one in
// flight, which a second caller joins, and the warm start's last, kept for
// a relist that follows (the resumed watch's 410 comes moments after an
// apiserver restart).
type metaLists struct {
	clock clock.PassiveClock
	kept  atomic.Pointer[timedList]
	// flightMu guards flight, the list in progress.
	flightMu sync.Mutex
	flight   *metaCall
}

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

func (l *metaLists) keep(list *metav1.PartialObjectMetadataList) {
	l.kept.Store(&timedList{list: list, at: l.clock.Now()})
}

// ListMetadata lists every object's metadata from the server (every page
// of a consistent read), or waits for the list already in progress and
// shares its answer.
func (t *Tracker) ListMetadata(ctx context.Context) (*metav1.PartialObjectMetadataList, error) {
	l := &t.lists
	l.flightMu.Lock()
	if c := l.flight; c != nil {
		l.flightMu.Unlock()
		select {
		case <-c.done:
			return c.list, c.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	c := &metaCall{done: make(chan struct{})}
	l.flight = c
	l.flightMu.Unlock()
	c.list, c.err = ListAllMetadata(ctx, t.o.Metadata)
	l.flightMu.Lock()
	l.flight = nil
	l.flightMu.Unlock()
	close(c.done)
	return c.list, c.err
}

// TakeList returns the warm start's metadata list, once, if it was taken
// within the last 30 s and is not older than any of notBefore (what the
// cache has applied, what the watch has delivered): else nil.
func (t *Tracker) TakeList(notBefore ...string) *metav1.PartialObjectMetadataList {
	tl := t.lists.kept.Swap(nil)
	if tl == nil || t.lists.clock.Since(tl.at) >= listReuse {
		return nil
	}
	for _, rv := range notBefore {
		if before(tl.list.ResourceVersion, rv) {
			return nil
		}
	}
	return tl.list
}
