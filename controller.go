package boltinformer

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgofeaturegate "k8s.io/client-go/features"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// The reflector's backoff after a failed list or watch: client-go's own
// (reflector.go: 800ms doubling to 30s with full jitter, reset after two
// minutes without a failure).
const (
	backoffInit   = 800 * time.Millisecond
	backoffMax    = 30 * time.Second
	backoffReset  = 2 * time.Minute
	backoffFactor = 2.0
	backoffJitter = 1.0
)

func reflectorBackoff() *wait.Backoff {
	return &wait.Backoff{
		Duration: backoffInit,
		Cap:      backoffMax,
		Steps:    int(math.Ceil(float64(backoffMax) / float64(backoffInit))),
		Factor:   backoffFactor,
		Jitter:   backoffJitter,
	}
}

// controller is client-go's cache.New controller (a Reflector feeding the
// queue, and the loop popping it into the process functions) with a clock:
// cache.New's always uses the real clock, and Reflector.RunWithContext
// waits out its backoff on a real timer whatever clock it was given. Here
// the DB's clock drives the reflector's resync timer, its backoff between
// failed lists and watches (this loop's and the retries inside
// ListAndWatch) and its timeouts, so a test clock controls all of them.
type controller struct {
	cfg   cache.Config
	name  string // the reflector's, in its logs
	clock clock.Clock

	// reflectorMu guards reflector, set once RunWithContext built it.
	reflectorMu sync.RWMutex
	reflector   *cache.Reflector
}

var _ cache.Controller = (*controller)(nil)

func newController(name string, cfg *cache.Config, clk clock.Clock) *controller {
	return &controller{cfg: *cfg, name: name, clock: clk}
}

// Run runs the controller until stopCh is closed.
func (c *controller) Run(stopCh <-chan struct{}) {
	c.RunWithContext(wait.ContextForChannel(stopCh))
}

// RunWithContext runs the reflector and the process loop until ctx is
// done; it returns once both have.
func (c *controller) RunWithContext(ctx context.Context) {
	defer utilruntime.HandleCrashWithContext(ctx)
	logger := klog.FromContext(ctx)
	r := cache.NewReflectorWithOptions(c.cfg.ListerWatcher, c.cfg.ObjectType, c.cfg.Queue, cache.ReflectorOptions{
		Logger:          &logger,
		Name:            c.name,
		ResyncPeriod:    c.cfg.FullResyncPeriod,
		MinWatchTimeout: c.cfg.MinWatchTimeout,
		TypeDescription: c.cfg.ObjectDescription,
		Clock:           c.clock,
		Backoff:         reflectorBackoff(),
	})
	r.ShouldResync = c.cfg.ShouldResync
	r.WatchListPageSize = c.cfg.WatchListPageSize
	c.reflectorMu.Lock()
	c.reflector = r
	c.reflectorMu.Unlock()

	var wg wait.Group
	defer wg.Wait()
	// Closing the queue ends the process loop (as in cache.New's
	// controller); this goroutine ends with ctx.
	wg.Start(func() {
		<-ctx.Done()
		c.cfg.Queue.Close()
	})
	wg.StartWithContext(ctx, func(ctx context.Context) { c.runReflector(ctx, r) })
	c.processLoop(ctx)
}

// runReflector is Reflector.RunWithContext with the controller's clock
// for the wait between two ListAndWatch calls (sliding: the delay starts
// when a call has returned).
func (c *controller) runReflector(ctx context.Context, r *cache.Reflector) {
	logger := klog.FromContext(ctx)
	logger.V(3).Info("Starting reflector", "type", r.TypeDescription(), "resyncPeriod", c.cfg.FullResyncPeriod, "reflector", r.Name())
	defer logger.V(3).Info("Stopping reflector", "type", r.TypeDescription(), "resyncPeriod", c.cfg.FullResyncPeriod, "reflector", r.Name())
	handler := c.cfg.WatchErrorHandlerWithContext
	if handler == nil {
		handler = cache.DefaultWatchErrorHandler
	}
	delay := reflectorBackoff().DelayWithReset(c.clock, backoffReset)
	for {
		if err := r.ListAndWatchWithContext(ctx); err != nil {
			handler(ctx, r, err)
		}
		if ctx.Err() != nil {
			return
		}
		t := c.clock.NewTimer(delay())
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
	}
}

// processLoop pops the queue into the process functions until the queue
// is closed, in batches when the queue, the config and client-go's
// InOrderInformersBatchProcess feature allow it (as cache.New's
// controller decides).
func (c *controller) processLoop(ctx context.Context) {
	batchQueue, ok := c.cfg.Queue.(cache.QueueWithBatch)
	useBatch := ok && c.cfg.ProcessBatch != nil && clientgofeaturegate.FeatureGates().Enabled(clientgofeaturegate.InOrderInformersBatchProcess)
	for ctx.Err() == nil {
		var err error
		if useBatch {
			err = batchQueue.PopBatch(c.cfg.ProcessBatch, cache.PopProcessFunc(c.cfg.Process))
		} else {
			_, err = c.cfg.Queue.Pop(cache.PopProcessFunc(c.cfg.Process))
		}
		if errors.Is(err, cache.ErrFIFOClosed) {
			return
		}
	}
}

// HasSynced reports whether the queue has synced (its first list was
// popped and processed).
func (c *controller) HasSynced() bool { return c.cfg.Queue.HasSynced() }

// HasSyncedChecker returns the queue's sync checker.
func (c *controller) HasSyncedChecker() cache.DoneChecker { return c.cfg.Queue.HasSyncedChecker() }

// LastSyncResourceVersion is the reflector's ("" before Run).
func (c *controller) LastSyncResourceVersion() string {
	if r := c.currentReflector(); r != nil {
		return r.LastSyncResourceVersion()
	}
	return ""
}

// currentReflector returns the reflector (nil before Run).
func (c *controller) currentReflector() *cache.Reflector {
	c.reflectorMu.RLock()
	defer c.reflectorMu.RUnlock()
	return c.reflector
}
