package processor

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/cache/synctrack"
	"k8s.io/klog/v2"
	"k8s.io/utils/buffer"
	"k8s.io/utils/clock"
)

var _ cache.ResourceEventHandlerRegistration = (*Listener)(nil)

// crashPause is how long a listener waits after a recovered handler panic
// before it handles the next notification (client-go: one second).
const crashPause = time.Second

// slowHandler is the duration above which a handler call is logged when the
// listener's backlog exceeds its initial buffer size (client-go: 100ms).
const slowHandler = 100 * time.Millisecond

// Listener relays notifications to one handler: Distribute appends to its
// buffer, and its own goroutine takes them out, in order, and calls the
// handler one at a time. It is the registration returned by AddListener and
// implements cache.ResourceEventHandlerRegistration.
//
// The buffer is double: producers append to pending under pendingLock; the
// run goroutine swaps the whole of pending for its drained batch in one
// locked step and then handles the batch without the lock, so producers and
// the handler contend once per batch, not once per notification.
//
// Goroutines: while its Processor runs, a listener has a run goroutine
// (delivery) and a watchSynced goroutine (waits for the informer's sync);
// both are owned by the Processor, started under its listenersLock and ended
// by stop.
type Listener struct {
	handler cache.ResourceEventHandler
	name    string
	// logger has the key "handler"; crashLogger is the logger given, as
	// client-go logs a handler panic: with no key of ours.
	logger        klog.Logger
	crashLogger   klog.Logger
	clock         clock.Clock
	slowThreshold int // backlog above which slow handler calls are logged

	upstream cache.DoneChecker // nil: the informer counts as synced
	synced   *synctrack.SingleFileTracker
	// filter is ListenerOptions.Filter, set before the listener is
	// published.
	filter func(Notification) (Notification, bool)
	// delivered is the At of the last ProgressNotification handled.
	delivered atomic.Pointer[string]

	// pendingLock guards pending and idle, the swap of pending with batch,
	// and the setting of stopped. Lock order: after Processor.listenersLock. Never held
	// while the handler runs.
	pendingLock sync.Mutex
	// pending holds the notifications queued and not yet moved to batch,
	// oldest first.
	pending buffer.Ring[Notification]
	// idle is true while run waits on wake; whoever clears it sends the
	// one wake-up.
	idle bool
	// wake carries at most one wake-up for an idle run goroutine.
	wake chan struct{}

	// batch belongs to the run goroutine: what it took out of pending in
	// its last swap and has not handled yet, oldest first.
	batch buffer.Ring[Notification]
	// unhandled counts batch plus the notification being handled; run
	// raises it under pendingLock at each swap and lowers it after each
	// handler call. Pending reads it under pendingLock.
	unhandled atomic.Int64
	// stopped is set once, by stop: nothing is queued after it, and run
	// checks it before taking each notification out of batch.
	stopped atomic.Bool

	// stopCh is closed by stop, after stopped is set.
	stopCh chan struct{}
	// finished is closed when run has returned, or by the Processor when
	// run will never be started (ShutdownChan).
	finished chan struct{}

	// These fields are guarded by the owning Processor's listenersLock
	// (held for writing); they are set before the listener is published.
	started               bool // run and watchSynced were started
	requestedResyncPeriod time.Duration
	resyncPeriod          time.Duration
	nextResync            time.Time
}

func newListener(handler cache.ResourceEventHandler, name string, logger klog.Logger, clk clock.Clock, bufferSize int, upstream cache.DoneChecker) *Listener {
	upstreamName := "informer"
	if upstream != nil {
		upstreamName = upstream.Name()
	}
	return &Listener{
		handler:       handler,
		name:          name,
		logger:        logger.WithValues("handler", name),
		crashLogger:   logger,
		clock:         clk,
		slowThreshold: bufferSize,
		upstream:      upstream,
		synced:        synctrack.NewSingleFileTracker(fmt.Sprintf("%s + event handler %s", upstreamName, name)),
		pending:       *buffer.NewRing[Notification](buffer.RingOptions{InitialSize: bufferSize, NormalSize: bufferSize}),
		batch:         *buffer.NewRing[Notification](buffer.RingOptions{NormalSize: bufferSize}),
		wake:          make(chan struct{}, 1),
		stopCh:        make(chan struct{}),
		finished:      make(chan struct{}),
	}
}

// Delivered returns the informer's resourceVersion up to which the handler
// has returned from every notification ("" before the first
// ProgressNotification).
func (l *Listener) Delivered() string {
	if p := l.delivered.Load(); p != nil {
		return *p
	}
	return ""
}

// Name returns the handler's name, as used in logs and metrics.
func (l *Listener) Name() string { return l.name }

// HasSynced reports whether the informer has synced and the handler has
// handled every initial-list add queued to it.
func (l *Listener) HasSynced() bool { return l.synced.HasSynced() }

// HasSyncedChecker returns a cache.DoneChecker that is done when HasSynced
// becomes true.
func (l *Listener) HasSyncedChecker() cache.DoneChecker { return l.synced }

// ShutdownChan is closed once the listener has been removed or its
// Processor stopped, and no handler call is in progress any more. It makes
// cache.ShutDownEventHandler work with this registration.
func (l *Listener) ShutdownChan() <-chan struct{} { return l.finished }

// Pending returns the number of notifications queued to the listener and
// not yet handled, counting one whose handler call is in progress.
func (l *Listener) Pending() int {
	l.pendingLock.Lock()
	defer l.pendingLock.Unlock()
	return l.pending.Len() + int(l.unhandled.Load())
}

// distribute queues a distributed notification, through the listener's
// filter.
func (l *Listener) distribute(n Notification) {
	if l.filter != nil {
		var ok bool
		if n, ok = l.filter(n); !ok {
			return
		}
	}
	l.enqueue(n)
}

// AddLate queues obj as an initial add that the listener does not wait
// for to be synced: the informer hands a handler those of its objects that
// matter less after it is published (InformerOptions.ChangedFirst).
func (l *Listener) AddLate(obj any) {
	l.enqueue(AddNotification{Obj: obj, InInitialList: true, late: true})
}

// QueueProgress queues a ProgressNotification.
func (l *Listener) QueueProgress(at string) { l.enqueue(ProgressNotification{At: at}) }

// enqueue appends n to the buffer and wakes run if it waits; an initial
// add (not a late one) is counted for HasSynced. It never blocks on the
// handler.
func (l *Listener) enqueue(n Notification) {
	l.pendingLock.Lock()
	if l.stopped.Load() {
		l.pendingLock.Unlock()
		return
	}
	if a, ok := n.(AddNotification); ok && a.InInitialList && !a.late {
		l.synced.Start()
	}
	l.pending.WriteOne(n)
	signal := l.idle
	l.idle = false
	l.pendingLock.Unlock()
	if signal {
		select {
		case l.wake <- struct{}{}:
		default: // cannot happen: one wake-up per idle period
		}
	}
}

// stop marks the listener removed, drops its buffer and tells its
// goroutines to return. Idempotent.
func (l *Listener) stop() {
	l.pendingLock.Lock()
	defer l.pendingLock.Unlock()
	if l.stopped.Load() {
		return
	}
	l.stopped.Store(true)
	l.pending = buffer.Ring[Notification]{}
	close(l.stopCh)
}

// next takes the oldest notification, refilling batch from pending when it
// is empty; ok is false once the listener is stopped. backlog is what
// remains in batch behind it.
func (l *Listener) next() (n Notification, backlog int, ok bool) {
	for {
		if l.stopped.Load() {
			return nil, 0, false
		}
		if n, ok := l.batch.ReadOne(); ok {
			return n, l.batch.Len(), true
		}
		if !l.refill() {
			return nil, 0, false
		}
	}
}

// refill waits until pending holds notifications, then swaps it with the
// drained batch. It returns false once the listener is stopped.
func (l *Listener) refill() bool {
	l.pendingLock.Lock()
	defer l.pendingLock.Unlock()
	for l.pending.Len() == 0 {
		if l.stopped.Load() {
			return false
		}
		l.idle = true
		l.pendingLock.Unlock()
		select {
		case <-l.wake:
		case <-l.stopCh:
		}
		l.pendingLock.Lock()
		l.idle = false
	}
	if l.stopped.Load() {
		return false
	}
	l.pending, l.batch = l.batch, l.pending
	l.unhandled.Add(int64(l.batch.Len()))
	return true
}

// run is the delivery goroutine: it hands notifications to the handler one
// at a time until the listener is stopped.
func (l *Listener) run() {
	defer close(l.finished)
	crashed := false
	for {
		if crashed {
			// Only reached with utilruntime.ReallyCrash == false.
			select {
			case <-l.clock.After(crashPause):
			case <-l.stopCh:
				return
			}
		}
		n, backlog, ok := l.next()
		if !ok {
			// Drop what was taken but not handled.
			l.batch = buffer.Ring[Notification]{}
			l.unhandled.Store(0)
			return
		}
		crashed = l.handle(n, backlog)
		l.unhandled.Add(-1)
	}
}

// handle calls the handler for n. A panic is passed to
// utilruntime.HandleCrashWithLogger, which re-raises it unless
// utilruntime.ReallyCrash is false; then handle reports crashed.
func (l *Listener) handle(n Notification, backlog int) (crashed bool) {
	crashed = true
	defer utilruntime.HandleCrashWithLogger(l.crashLogger)
	if backlog > l.slowThreshold {
		start := l.clock.Now()
		defer func() {
			if d := l.clock.Since(start); d > slowHandler {
				l.logger.Info("Slow event handler", "duration", d, "pendingNotifications", backlog)
			}
		}()
	}
	switch n := n.(type) {
	case AddNotification:
		l.handler.OnAdd(n.Obj, n.InInitialList)
		if n.InInitialList && !n.late {
			l.synced.Finished()
		}
	case UpdateNotification:
		l.handler.OnUpdate(n.Old, n.New)
	case DeleteNotification:
		l.handler.OnDelete(n.Old)
	case ProgressNotification:
		l.delivered.Store(&n.At)
	}
	return false
}

// watchSynced tells the sync tracker when the informer has synced. It is
// started only after the initial list was queued, so the tracker cannot
// report synced with initial adds still uncounted.
func (l *Listener) watchSynced() {
	if l.upstream == nil {
		l.synced.UpstreamHasSynced()
		return
	}
	select {
	case <-l.upstream.Done():
		l.synced.UpstreamHasSynced()
	case <-l.stopCh:
	}
}
