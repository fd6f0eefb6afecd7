package crashtest

import (
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
)

// fakeWatcher is one watch of a Source, with an unbounded buffer so the
// Source never blocks on a slow client. It owns one goroutine, ended by
// Stop or by the Source closing it.
type fakeWatcher struct {
	src       *Source
	bookmarks bool
	out       chan watch.Event

	// mu guards queue, closing and stopped.
	mu      sync.Mutex
	cond    *sync.Cond
	queue   []watch.Event
	closing bool // close after the queue drains
	stopped bool // close now
}

func newFakeWatcher(s *Source, bookmarks bool) *fakeWatcher {
	w := &fakeWatcher{src: s, bookmarks: bookmarks, out: make(chan watch.Event)}
	w.cond = sync.NewCond(&w.mu)
	go w.pump()
	return w
}

func (w *fakeWatcher) send(e watch.Event) {
	w.mu.Lock()
	if !w.stopped && !w.closing {
		w.queue = append(w.queue, e)
		w.cond.Broadcast()
	}
	w.mu.Unlock()
}

func (w *fakeWatcher) closeAfterDrain() {
	w.mu.Lock()
	w.closing = true
	w.cond.Broadcast()
	w.mu.Unlock()
}

func (w *fakeWatcher) stopLocked() {
	w.mu.Lock()
	w.stopped = true
	w.cond.Broadcast()
	w.mu.Unlock()
}

// pump delivers the queue. A blocked send is released by Stop through
// the done channel.
func (w *fakeWatcher) pump() {
	defer close(w.out)
	done := make(chan struct{})
	go func() {
		w.mu.Lock()
		for !w.stopped {
			w.cond.Wait()
		}
		w.mu.Unlock()
		close(done)
	}()
	defer func() {
		w.mu.Lock()
		w.stopped = true
		w.cond.Broadcast()
		w.mu.Unlock()
		<-done
	}()
	for {
		w.mu.Lock()
		for len(w.queue) == 0 && !w.closing && !w.stopped {
			w.cond.Wait()
		}
		if w.stopped || (len(w.queue) == 0 && w.closing) {
			w.mu.Unlock()
			return
		}
		e := w.queue[0]
		w.queue = w.queue[1:]
		w.mu.Unlock()
		select {
		case w.out <- e:
		case <-done:
			return
		}
	}
}

// Stop implements watch.Interface.
func (w *fakeWatcher) Stop() {
	w.src.forget(w)
	w.stopLocked()
}

// ResultChan implements watch.Interface.
func (w *fakeWatcher) ResultChan() <-chan watch.Event { return w.out }

func typesUID(key string, rv int64) types.UID {
	return types.UID(fmt.Sprintf("uid-%s-%d", key, rv))
}
