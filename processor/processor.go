package processor

import (
	"context"
	"fmt"
	"iter"
	"sync"
	"time"

	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// DefaultInitialBufferSize is the number of notifications a listener's buffer
// holds before it grows, and the backlog above which slow handler calls are
// logged; the same value as client-go's.
const DefaultInitialBufferSize = 1024

// Options configures a Processor. A nil *Options means all defaults.
type Options struct {
	// Clock drives resync bookkeeping and the pause after a recovered handler
	// panic. Default clock.RealClock{}.
	Clock clock.WithTicker
	// Logger is the default logger of listeners. The zero Logger (which is
	// also what logr.Discard returns) means klog.Background(). A handler
	// panic is logged with it as it is ("Observed a panic" with its own
	// values and client-go's keys only: panic, panicGoValue, stacktrace);
	// the listeners' other logs add the key "handler".
	Logger klog.Logger
	// InitialBufferSize is the initial capacity of each listener's buffer;
	// the buffer grows without bound and shrinks back to this size once
	// drained (a listener keeps up to two of this size: one being filled,
	// one being handled). Default DefaultInitialBufferSize.
	InitialBufferSize int
}

// ListenerOptions configures one listener.
type ListenerOptions struct {
	// Name identifies the handler in logs and metrics. Default: derived from
	// the handler's type or functions, like client-go.
	Name string
	// Logger overrides the processor's logger for this listener
	// (client-go's HandlerOptions.Logger).
	Logger *klog.Logger
	// RequestedResyncPeriod is the period the handler asked for, after the
	// informer's lower bounds; it is kept to recompute ResyncPeriod when
	// ResyncCheckPeriodChanged is called.
	RequestedResyncPeriod time.Duration
	// ResyncPeriod is the effective period, usually
	// DetermineResyncPeriod(RequestedResyncPeriod, resyncCheckPeriod).
	// Zero means the listener is never due for resync.
	ResyncPeriod time.Duration
	// Synced is the informer's own sync checker. The listener's HasSynced is
	// true once Synced is done and every initial-list add queued to the
	// listener has been handled. Nil means the informer counts as synced.
	Synced cache.DoneChecker
	// InitialList, if not nil, is iterated by AddListener before it
	// returns; each add is queued ahead of any later notification, and
	// before the listener starts watching Synced, so the listener can never
	// look synced before those with InInitialList are handled. The
	// informer passes its current objects here when a handler is added
	// while it runs (client-go lists its indexer for this), holding the
	// lock that serializes it with Distribute; those changed while it was
	// down first, without InInitialList, when it asks so.
	InitialList iter.Seq[AddNotification]
	// Before, if not empty, are queued ahead of InitialList: the informer
	// replays there the deletes a late handler would otherwise never hear
	// of (the objects deleted while a warm-started informer was down).
	Before []Notification
	// Progress, if not "", is queued after InitialList as a
	// ProgressNotification.
	Progress string
	// Filter, if not nil, sees each notification distributed to the
	// listener (not Before, InitialList or Progress) and returns what to
	// queue instead, or false to drop it: the informer holds back there the
	// objects of its initial list that a handler resuming from a position
	// has seen.
	Filter func(Notification) (Notification, bool)
}

// runState is the lifecycle of a Processor; it only moves forward.
type runState int

const (
	stateNew     runState = iota // Run not called yet: listeners buffer
	stateRunning                 // listener goroutines run
	stateStopped                 // Run's context is done: no listener runs again
)

// Processor fans notifications out to listeners. Create it with New; it is
// safe for concurrent use.
type Processor struct {
	clock             clock.WithTicker
	logger            klog.Logger
	initialBufferSize int

	// listenersLock guards listeners, state and, for every listener in
	// listeners, its resyncPeriod, nextResync and started fields.
	// Lock order: listenersLock, then Listener.pendingLock. Never held while
	// a handler runs, nor while InitialList is iterated.
	listenersLock sync.RWMutex
	// listeners maps each registered listener to whether it receives sync
	// distributions (is due for resync); a new listener starts as due.
	listeners map[*Listener]bool
	state     runState

	// goroutines counts the listener goroutines started by Run and by
	// AddListener while running; Run waits for them after stopping.
	// Add is only called with listenersLock held and state == stateRunning,
	// so every Add happens before Run's Wait.
	goroutines sync.WaitGroup
}

// New returns a Processor that is not running yet; see Run.
func New(opts *Options) *Processor {
	if opts == nil {
		opts = &Options{}
	}
	p := &Processor{
		clock:             opts.Clock,
		logger:            opts.Logger,
		initialBufferSize: opts.InitialBufferSize,
		listeners:         make(map[*Listener]bool),
	}
	if p.clock == nil {
		p.clock = clock.RealClock{}
	}
	if p.logger.GetSink() == nil {
		p.logger = klog.Background()
	}
	if p.initialBufferSize <= 0 {
		p.initialBufferSize = DefaultInitialBufferSize
	}
	return p
}

// Run starts the goroutines of every listener, and of listeners added later,
// and blocks until ctx is done. Then it stops all listeners, dropping the
// notifications they have not taken for delivery, and returns once every
// listener goroutine has returned, which includes waiting for handler calls
// in progress. A Processor runs once: a second call returns at once.
func (p *Processor) Run(ctx context.Context) {
	p.listenersLock.Lock()
	if p.state != stateNew {
		p.listenersLock.Unlock()
		p.logger.Info("Warning: processor.Run called more than once, ignoring")
		return
	}
	p.state = stateRunning
	for l := range p.listeners {
		p.startLocked(l)
	}
	p.listenersLock.Unlock()

	<-ctx.Done()

	p.listenersLock.Lock()
	p.state = stateStopped
	for l := range p.listeners {
		p.stopLocked(l)
	}
	// Like client-go, a stopped processor forgets its listeners: they cannot
	// be restarted, and removing them later is a no-op.
	p.listeners = nil
	p.listenersLock.Unlock()

	p.goroutines.Wait()
}

// AddListener registers handler and returns its registration. If
// opts.InitialList is set it is queued first (see ListenerOptions). While the
// processor runs, the listener starts delivering at once; before Run it
// buffers until Run. A listener added after Run has returned is inert: it
// never delivers, its HasSynced stays false and its ShutdownChan is closed;
// the informer should refuse such handlers itself, like client-go.
//
// The caller must serialize AddListener with Distribute (see the package
// documentation), or the listener may miss or reorder concurrent events.
// handler must not be nil.
func (p *Processor) AddListener(handler cache.ResourceEventHandler, opts ListenerOptions) *Listener {
	if handler == nil {
		panic("processor: AddListener with a nil handler")
	}
	name := opts.Name
	if name == "" {
		name = handlerName(handler)
	}
	logger := p.logger
	if opts.Logger != nil {
		logger = *opts.Logger
	}
	l := newListener(handler, name, logger, p.clock, p.initialBufferSize, opts.Synced)
	l.requestedResyncPeriod = opts.RequestedResyncPeriod
	l.resyncPeriod = opts.ResyncPeriod
	l.nextResync = p.clock.Now().Add(opts.ResyncPeriod)

	// Queued before the listener is published, so no goroutine of the
	// listener runs yet and its sync watch cannot start before the initial
	// list is counted.
	for _, n := range opts.Before {
		l.enqueue(n)
	}
	if opts.InitialList != nil {
		for n := range opts.InitialList {
			l.enqueue(n)
		}
	}
	if opts.Progress != "" {
		l.enqueue(ProgressNotification{At: opts.Progress})
	}
	l.filter = opts.Filter

	p.listenersLock.Lock()
	defer p.listenersLock.Unlock()
	switch p.state {
	case stateNew:
		p.listeners[l] = true
	case stateRunning:
		p.listeners[l] = true
		p.startLocked(l)
	case stateStopped:
		logger.Info("Warning: handler added to a stopped processor will never be called", "handler", name)
		p.stopLocked(l)
	}
	return l
}

// RemoveListener unregisters the listener behind reg: nothing is queued to it
// after RemoveListener returns, and its queued notifications are dropped,
// except one its goroutine may already have taken for delivery; a handler
// call in progress is not waited for (wait on the Listener's ShutdownChan, or
// use cache.ShutDownEventHandler). client-go has the same, wider, window:
// its listener may deliver a few more before it notices. Removing a
// listener that is not registered here, for example one removed before,
// returns nil. reg must be a *Listener, else ErrInvalidRegistration.
func (p *Processor) RemoveListener(reg cache.ResourceEventHandlerRegistration) error {
	l, ok := reg.(*Listener)
	if !ok || l == nil {
		return fmt.Errorf("%w: got %T", ErrInvalidRegistration, reg)
	}
	p.listenersLock.Lock()
	defer p.listenersLock.Unlock()
	if _, registered := p.listeners[l]; !registered {
		return nil
	}
	delete(p.listeners, l)
	p.stopLocked(l)
	return nil
}

// Distribute queues n to every listener, or with sync=true only to the
// listeners found due by the last ShouldResync (every listener that was added
// since is due, as in client-go). It never waits for a handler. A nil n is
// ignored.
func (p *Processor) Distribute(n Notification, sync bool) {
	if n == nil {
		return
	}
	p.listenersLock.RLock()
	defer p.listenersLock.RUnlock()
	for l, due := range p.listeners {
		if !sync || due {
			l.distribute(n)
		}
	}
}

// ShouldResync recomputes which listeners are due for resync at the clock's
// current time, moves the next resync time of the due ones one period ahead,
// and reports whether any is due. The informer's reflector calls it every
// resync check period (cache.Config.ShouldResync) and, when it returns true,
// resyncs, whose sync distributions then reach exactly the due listeners.
func (p *Processor) ShouldResync() bool {
	p.listenersLock.Lock()
	defer p.listenersLock.Unlock()
	now := p.clock.Now()
	needed := false
	for l := range p.listeners {
		due := l.resyncDueLocked(now)
		p.listeners[l] = due
		if due {
			needed = true
			l.nextResync = now.Add(l.resyncPeriod)
		}
	}
	return needed
}

// ResyncCheckPeriodChanged recomputes every listener's resync period from its
// requested period and the informer's new resync check period d, with
// DetermineResyncPeriod. Next resync times are kept, as in client-go.
func (p *Processor) ResyncCheckPeriodChanged(d time.Duration) {
	p.listenersLock.Lock()
	defer p.listenersLock.Unlock()
	for l := range p.listeners {
		l.resyncPeriod = DetermineResyncPeriod(p.logger, l.requestedResyncPeriod, d)
	}
}

// Listeners returns the number of registered listeners.
func (p *Processor) Listeners() int {
	p.listenersLock.RLock()
	defer p.listenersLock.RUnlock()
	return len(p.listeners)
}

// startLocked starts l's goroutines. Caller holds listenersLock for writing,
// with state == stateRunning.
func (p *Processor) startLocked(l *Listener) {
	l.started = true
	p.goroutines.Go(l.run)
	p.goroutines.Go(l.watchSynced)
}

// stopLocked stops l for good. Caller holds listenersLock for writing.
func (p *Processor) stopLocked(l *Listener) {
	l.stop()
	if !l.started {
		// No run goroutine will close it.
		close(l.finished)
	}
}
