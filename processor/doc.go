// Package processor is the shared event processor of a boltinformer informer:
// it fans notifications out from the informer loop to the registered event
// handlers (listeners).
//
// # What it owns
//
//   - Listeners, one per registered cache.ResourceEventHandler, each with an
//     unbounded FIFO buffer and its own delivery goroutine, so that a slow or
//     stuck handler delays only itself.
//   - Handler registration and removal, and each handler's HasSynced: a
//     handler is synced once the informer is synced AND every
//     AddNotification with InInitialList=true that was queued to it has been
//     handled (client-go's synctrack.SingleFileTracker).
//   - Resync bookkeeping: which listeners are due (ShouldResync) and therefore
//     receive sync distributions.
//   - Delivering the current state to a handler added while the informer runs
//     (ListenerOptions.InitialList), queued before the handler can be observed
//     as synced.
//
// # What it must never do
//
//   - Block the informer loop on a handler. Distribute only appends to
//     in-memory buffers under short locks; no lock of this package is held
//     while a handler runs.
//   - Know about bbolt, the store, the indexer or the API server. Objects are
//     opaque values; the informer decides what to distribute and when.
//
// # Semantics, matched to client-go v0.37 (tools/cache/shared_informer.go)
//
// Per listener, notifications are delivered in the order they were queued.
// A listener is registered as due for resync and stays so until the next
// ShouldResync call recomputes it, exactly like client-go's sharedProcessor:
// with an informer that never resyncs, sync distributions (for example the
// equal-resourceVersion updates of a relist) reach every listener.
// Removing a listener or stopping the processor drops the notifications it
// has not taken for delivery (client-go drops them too; stopping does not
// drain); a handler call in progress is not interrupted.
//
// A handler panic is handled with utilruntime.HandleCrashWithLogger, as in
// client-go: by default (utilruntime.ReallyCrash == true) the panic is logged
// and re-raised, which crashes the process. If ReallyCrash is false, the
// offending notification is skipped and the listener waits one second (on the
// processor's clock) before handling the next one; an initial-list add whose
// handler panicked is never counted as handled, so that handler never
// becomes synced.
//
// One deliberate difference: client-go's Distribute waits until the processor
// runs; here notifications distributed before Run are buffered and delivered
// once Run starts. The sequence each handler observes is the same.
//
// # Locking
//
// Processor.listenersLock is taken before any Listener.pendingLock; handlers
// run with no lock of this package held. The informer must serialize
// Distribute with AddListener and RemoveListener for a handler's sequence to
// be well defined (client-go's blockDeltas lock), and must not let its synced
// checker complete before every initial-list notification has been passed to
// Distribute.
package processor
