package boltcr

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/boltinformer/boltinformer"
)

// A durable queue: no reconcile storm at a warm start, and nothing lost.
//
// The queue is controller-runtime's priority queue, wrapped. Beside it
// the wrapper keeps, for its controller, which requests still need a
// reconcile: those added and not yet handed to a worker (pending), those
// a worker has (in flight), those whose last reconcile ended in a
// terminal error (controller-runtime neither retries nor forgets them;
// a stock restart would reconcile them again), and the RequeueAfter
// deadlines. A request handed to a worker is no longer pending: the
// reconcile that starts then reads the cache after the event that added
// it was applied (an informer updates its cache before it calls its
// handlers), so it covers every add recorded before it started. A failed
// reconcile is added again (rate-limited) before the worker calls Done:
// pending again.
//
// Every CheckpointInterval, and when the queue shuts down, the queue
// writes its checkpoint (boltinformer.DB.SetCheckpoint, named
// "controller/<controller name>"): first, for each informer whose
// handlers feed it, the position up to which those handlers have
// returned from every notification (boltinformer.HandlerPosition), read
// before anything else; then the requests that still need a reconcile
// (Due with a zero time) and the RequeueAfter deadlines (Due at their
// time). Whatever an event up to a position added is then either done
// (a reconcile that started after it succeeded) or in the Due list. At
// the next start the handlers resume from the positions
// (boltinformer.Informer.AddEventHandlerSince: only the objects changed,
// created or deleted after them) and the Due requests are added again,
// with what is left of their delay. A kill -9 at any point loses nothing:
// the file has the last checkpoint written, whose positions and Due list
// were taken in that order, and what came after its positions is handed
// over again.

// DefaultCheckpointInterval is QueueOptions.CheckpointInterval's default.
const DefaultCheckpointInterval = time.Second

// QueueOptions configure NewQueue. A nil *QueueOptions means the
// defaults.
type QueueOptions struct {
	// CheckpointInterval is how often the queue writes its checkpoint
	// when anything changed (it is committed with the file's next group
	// commit). A kill -9 makes the next start hand over again what the
	// controller did since the last one. 0 means
	// DefaultCheckpointInterval.
	CheckpointInterval time.Duration
	// Logger; default controller-runtime's logger named "boltinformer".
	Logger *logr.Logger
}

// QueueCheckpoint is the name of the checkpoint of the durable queue of
// the controller named controller (NewQueue).
func QueueCheckpoint(controller string) string { return "controller/" + controller }

// NewQueue returns a constructor for controller.Options.NewQueue: the
// controller's queue is controller-runtime's priority queue, and what it
// has done is kept in db (the file of the manager's NewCache), so that at
// a warm start the controller reconciles only what needs work: the
// objects changed, created or deleted while the operator was down, the
// requests that were pending or in flight when it stopped (or was
// killed), and the RequeueAfter deadlines that fell due. Without it (or
// for an informer not kept in db) a controller gets every object again,
// as in stock controller-runtime.
//
// Use it on controllers whose reconcilers are level-based and whose
// state is in the cluster: an object that did not change while the
// operator was down is not reconciled again at the warm start. A
// reconciler whose work depends on something outside the watched objects
// (an external system, the clock) still gets it through RequeueAfter.
//
// The controller's name names the checkpoint (QueueCheckpoint): keep it
// stable across restarts. A controller whose sources are not Kind
// sources of the manager's cache (a channel source, another cache) gets
// their events as usual; only the Kind sources' handlers resume from the
// checkpoint (the others replay what they would without it: at least
// once).
func NewQueue(db *boltinformer.DB, opts *QueueOptions) func(controllerName string, rateLimiter workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
	o := QueueOptions{}
	if opts != nil {
		o = *opts
	}
	if o.CheckpointInterval <= 0 {
		o.CheckpointInterval = DefaultCheckpointInterval
	}
	logger := logf.Log.WithName("boltinformer")
	if o.Logger != nil {
		logger = *o.Logger
	}
	return func(controllerName string, rateLimiter workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
		return newQueue(db, controllerName, rateLimiter, o, logger.WithValues("controller", controllerName))
	}
}

// Queue is the durable queue NewQueue builds: controller-runtime's
// priority queue, whose state is kept in the cache file.
type Queue struct {
	priorityqueue.PriorityQueue[reconcile.Request]
	db       *boltinformer.DB
	name     string // the checkpoint's
	interval time.Duration
	logger   logr.Logger
	saved    boltinformer.Checkpoint // as the file had it at the start
	stop     chan struct{}           // closed by ShutDown
	loopDone chan struct{}           // closed when the checkpoint loop returns
	cpMu     sync.Mutex              // serializes checkpoint; before mu

	// mu guards the fields below. Lock order: cpMu before mu; mu is a
	// leaf (handlers call Add under their informer's locks).
	mu        sync.Mutex
	pending   map[reconcile.Request]struct{}  // added, not handed out
	inflight  map[reconcile.Request]bool      // handed out, not Done; true once forgotten
	failed    map[reconcile.Request]struct{}  // last reconcile a terminal error
	due       map[reconcile.Request]time.Time // RequeueAfter deadlines
	sources   map[string][]toolscache.ResourceEventHandlerRegistration
	started   bool // a worker asked for a request: every source is registered
	shutdown  bool
	version   uint64 // bumped by every change of the fields above
	written   uint64 // version of the last checkpoint written
	positions map[string]string

	// testBetween, when set (tests only), is called by checkpoint between
	// reading the positions and reading the requests.
	testBetween func()
}

var _ priorityqueue.PriorityQueue[reconcile.Request] = (*Queue)(nil)

func newQueue(db *boltinformer.DB, controllerName string, rl workqueue.TypedRateLimiter[reconcile.Request], o QueueOptions, logger logr.Logger) *Queue {
	inner := priorityqueue.New(controllerName, func(po *priorityqueue.Opts[reconcile.Request]) {
		po.RateLimiter = rl
		po.Log = logger
	})
	q := &Queue{
		PriorityQueue: inner,
		db:            db,
		name:          QueueCheckpoint(controllerName),
		interval:      o.CheckpointInterval,
		logger:        logger,
		stop:          make(chan struct{}),
		loopDone:      make(chan struct{}),
		pending:       map[reconcile.Request]struct{}{},
		inflight:      map[reconcile.Request]bool{},
		failed:        map[reconcile.Request]struct{}{},
		due:           map[reconcile.Request]time.Time{},
		sources:       map[string][]toolscache.ResourceEventHandlerRegistration{},
	}
	q.saved, _ = db.Checkpoint(q.name)
	q.resume()
	go q.loop()
	return q
}

// resume adds the saved checkpoint's Due requests: now those that were
// pending, in flight or failed, and those whose RequeueAfter fell due;
// the others after what is left of their delay.
func (q *Queue) resume() {
	now := time.Now()
	var ready, later int
	for _, d := range q.saved.Due {
		req, ok := parseRequest(d.Key)
		if !ok {
			q.logger.Info("Warning: a request in the queue's checkpoint does not parse; skipped", "checkpoint", q.name, "key", d.Key)
			continue
		}
		if d.At.IsZero() || !d.At.After(now) {
			q.AddWithOpts(priorityqueue.AddOpts{}, req)
			ready++
			continue
		}
		q.AddWithOpts(priorityqueue.AddOpts{After: d.At.Sub(now)}, req)
		later++
	}
	if len(q.saved.Positions) > 0 || len(q.saved.Due) > 0 {
		q.logger.Info("The controller's queue resumes from its checkpoint", "checkpoint", q.name, "due", ready, "requeueAfter", later, "positions", q.saved.Positions)
	}
}

// requestKey is how the checkpoint names a request: namespace/name, or
// name for a cluster-scoped object.
func requestKey(r reconcile.Request) string {
	if r.Namespace == "" {
		return r.Name
	}
	return r.Namespace + "/" + r.Name
}

func parseRequest(key string) (reconcile.Request, bool) {
	ns, name, err := toolscache.SplitMetaNamespaceKey(key)
	if err != nil || name == "" {
		return reconcile.Request{}, false
	}
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}, true
}

// Add adds item.
func (q *Queue) Add(item reconcile.Request) { q.AddWithOpts(priorityqueue.AddOpts{}, item) }

// AddAfter adds item after duration.
func (q *Queue) AddAfter(item reconcile.Request, duration time.Duration) {
	q.AddWithOpts(priorityqueue.AddOpts{After: duration}, item)
}

// AddRateLimited adds item after its rate limiter's delay.
func (q *Queue) AddRateLimited(item reconcile.Request) {
	q.AddWithOpts(priorityqueue.AddOpts{RateLimited: true}, item)
}

// AddWithOpts adds items. An add with After only (RequeueAfter) is a
// deadline; any other needs a reconcile.
func (q *Queue) AddWithOpts(o priorityqueue.AddOpts, items ...reconcile.Request) {
	q.mu.Lock()
	for _, it := range items {
		if o.After > 0 && !o.RateLimited {
			at := time.Now().Add(o.After)
			if old, ok := q.due[it]; !ok || at.Before(old) {
				q.due[it] = at
			}
		} else {
			q.pending[it] = struct{}{}
		}
	}
	q.version++
	q.mu.Unlock()
	// Recorded first: a worker handed the request before the record
	// would leave it pending for good.
	q.PriorityQueue.AddWithOpts(o, items...)
}

// GetWithPriority hands a request to a worker.
func (q *Queue) GetWithPriority() (reconcile.Request, int, bool) {
	q.mu.Lock()
	q.started = true
	q.mu.Unlock()
	item, prio, shutdown := q.PriorityQueue.GetWithPriority()
	if shutdown {
		return item, prio, shutdown
	}
	q.mu.Lock()
	delete(q.pending, item)
	delete(q.due, item)
	delete(q.failed, item)
	q.inflight[item] = false
	q.version++
	q.mu.Unlock()
	return item, prio, shutdown
}

// Get hands a request to a worker.
func (q *Queue) Get() (reconcile.Request, bool) {
	item, _, shutdown := q.GetWithPriority()
	return item, shutdown
}

// Forget tells the rate limiter that item succeeded (or is to be
// requeued after a fixed delay).
func (q *Queue) Forget(item reconcile.Request) {
	q.mu.Lock()
	if _, ok := q.inflight[item]; ok {
		q.inflight[item] = true
	}
	q.mu.Unlock()
	q.PriorityQueue.Forget(item)
}

// Done marks item's reconcile done. Neither forgotten nor added again, it
// ended in a terminal error: it stays due (a restart tries it again, as
// stock controller-runtime's does) until its next reconcile.
func (q *Queue) Done(item reconcile.Request) {
	q.mu.Lock()
	forgotten, ok := q.inflight[item]
	delete(q.inflight, item)
	if ok && !forgotten {
		_, again := q.pending[item]
		if _, later := q.due[item]; !again && !later {
			q.failed[item] = struct{}{}
		}
	}
	q.version++
	shutdown := q.shutdown
	q.mu.Unlock()
	q.PriorityQueue.Done(item)
	if shutdown {
		// The stop's checkpoint, once more as the workers finish.
		q.checkpoint()
	}
}

// ShutDown shuts the queue down and writes its checkpoint.
func (q *Queue) ShutDown() {
	q.mu.Lock()
	already := q.shutdown
	q.shutdown = true
	q.mu.Unlock()
	q.PriorityQueue.ShutDown()
	if already {
		return
	}
	close(q.stop)
	<-q.loopDone
	q.checkpoint()
}

// ShutDownWithDrain shuts the queue down (controller-runtime does not
// drain).
func (q *Queue) ShutDownWithDrain() { q.ShutDown() }

// track records that reg, a handler of informer, feeds q.
func (q *Queue) track(informer string, reg toolscache.ResourceEventHandlerRegistration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.sources[informer] = append(q.sources[informer], reg)
	q.version++
}

// untrack forgets reg.
func (q *Queue) untrack(reg toolscache.ResourceEventHandlerRegistration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for name, regs := range q.sources {
		if i := slices.Index(regs, reg); i >= 0 {
			q.sources[name] = slices.Delete(regs, i, i+1)
		}
	}
	q.version++
}

// since returns the position from which informer's handlers resume.
func (q *Queue) since(informer string) string { return q.saved.Positions[informer] }

// loop writes the checkpoint every interval when anything changed.
func (q *Queue) loop() {
	defer close(q.loopDone)
	t := time.NewTicker(q.interval)
	defer t.Stop()
	for {
		select {
		case <-q.stop:
			return
		case <-t.C:
			q.checkpoint()
		}
	}
}

// checkpoint writes the queue's checkpoint when anything changed: the
// positions first, then the requests that need a reconcile and the
// deadlines.
func (q *Queue) checkpoint() {
	q.cpMu.Lock()
	defer q.cpMu.Unlock()
	q.mu.Lock()
	sources := make(map[string][]toolscache.ResourceEventHandlerRegistration, len(q.sources))
	for k, v := range q.sources {
		sources[k] = slices.Clone(v)
	}
	started := q.started
	q.mu.Unlock()
	// Positions before the requests: what the handlers handed over up to
	// them is in the queue's state read below, or done.
	positions := map[string]string{}
	for name, regs := range sources {
		if p, ok := minPosition(regs); ok {
			positions[name] = p
		} else if p := q.saved.Positions[name]; p != "" {
			positions[name] = p
		}
	}
	if !started {
		// Sources still registering: keep the others' saved positions
		// (what came after them is handed over again).
		for name, p := range q.saved.Positions {
			if _, ok := positions[name]; !ok {
				positions[name] = p
			}
		}
	}
	if q.testBetween != nil {
		q.testBetween()
	}
	q.mu.Lock()
	if q.version == q.written && maps.Equal(positions, q.positions) {
		q.mu.Unlock()
		return
	}
	version := q.version
	cp := boltinformer.Checkpoint{Positions: positions}
	for r := range q.pending {
		cp.Due = append(cp.Due, boltinformer.Due{Key: requestKey(r)})
	}
	for r := range q.inflight {
		if _, ok := q.pending[r]; !ok {
			cp.Due = append(cp.Due, boltinformer.Due{Key: requestKey(r)})
		}
	}
	for r := range q.failed {
		cp.Due = append(cp.Due, boltinformer.Due{Key: requestKey(r)})
	}
	for r, at := range q.due {
		if _, ok := q.pending[r]; ok {
			continue
		}
		if _, ok := q.inflight[r]; ok {
			continue
		}
		cp.Due = append(cp.Due, boltinformer.Due{Key: requestKey(r), At: at})
	}
	q.mu.Unlock()
	slices.SortFunc(cp.Due, func(a, b boltinformer.Due) int { return strings.Compare(a.Key, b.Key) })
	if err := q.db.SetCheckpoint(q.name, cp); err != nil {
		q.logger.Error(err, "Writing the queue's checkpoint failed; the next start hands over more again", "checkpoint", q.name)
		return
	}
	q.mu.Lock()
	q.written, q.positions = version, positions
	q.mu.Unlock()
}

// minPosition returns the oldest position of regs, false when one has
// none yet or two do not compare.
func minPosition(regs []toolscache.ResourceEventHandlerRegistration) (string, bool) {
	out := ""
	for i, reg := range regs {
		p := boltinformer.HandlerPosition(reg)
		if p == "" {
			return "", false
		}
		if i == 0 {
			out = p
			continue
		}
		c, err := resourceversion.CompareResourceVersion(p, out)
		if err != nil {
			return "", false
		}
		if c < 0 {
			out = p
		}
	}
	return out, len(regs) > 0
}

// handlerSourcePkg is the package of controller-runtime's Kind source
// handler (internal.EventHandler), whose unexported field queue is the
// controller's queue.
const handlerSourcePkg = "sigs.k8s.io/controller-runtime/pkg/internal/source"

// isKindSourceHandler reports whether handler is controller-runtime's
// Kind source handler.
func isKindSourceHandler(handler toolscache.ResourceEventHandler) bool {
	v := reflect.ValueOf(handler)
	return v.Kind() == reflect.Pointer && !v.IsNil() && v.Elem().Kind() == reflect.Struct && v.Elem().Type().PkgPath() == handlerSourcePkg
}

// durableQueueOf returns the durable queue a controller-runtime Kind
// source's handler feeds, or nil: another handler, or another queue.
func durableQueueOf(handler toolscache.ResourceEventHandler) *Queue {
	if !isKindSourceHandler(handler) {
		return nil
	}
	s := reflect.ValueOf(handler).Elem()
	f := s.FieldByName("queue")
	if !f.IsValid() || f.Kind() != reflect.Interface || !f.CanAddr() {
		return nil
	}
	f = reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
	if f.IsNil() {
		return nil
	}
	q, _ := f.Interface().(*Queue)
	return q
}

// Busy returns how many requests need a reconcile: added and not yet
// handed to a worker, in a worker's hands, or last ended in a terminal
// error (RequeueAfter deadlines are not counted).
func (q *Queue) Busy() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := len(q.pending) + len(q.failed)
	for r := range q.inflight {
		if _, ok := q.pending[r]; !ok {
			n++
		}
	}
	return n
}

// Started reports whether a worker has asked for a request: the
// controller has started its sources (each handler registered and handed
// what it resumes with) and its workers.
func (q *Queue) Started() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.started
}

// String names the queue.
func (q *Queue) String() string { return fmt.Sprintf("boltcr durable queue %s", q.name) }
