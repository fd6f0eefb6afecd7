package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Source is something whose mutations the Committer writes: in this module,
// an indexer. Its methods are called from the committer's goroutine (or from
// Flush's caller), never concurrently with each other.
type Source interface {
	// Pending hands over everything applied since the last call as one batch
	// (nil if there is nothing). The batch's State carries the
	// resourceVersion of the last mutation in it.
	Pending() (*Batch, error)
	// Committed reports the outcome of the batch Pending returned. On error
	// the source must keep those mutations and return them again (merged
	// with newer ones) from the next Pending.
	Committed(b *Batch, err error)
}

// CommitterOptions configure a Committer. A nil *CommitterOptions means the
// defaults.
type CommitterOptions struct {
	// MaxOps commits as soon as this many mutations are pending. Default 1000.
	MaxOps int
	// MaxDelay commits at most this long after the first pending mutation.
	// Default 100ms.
	MaxDelay time.Duration
	// MinBackoff and MaxBackoff bound the jittered exponential backoff after
	// a failed commit. Defaults 100ms and 30s.
	MinBackoff, MaxBackoff time.Duration
	// Clock drives the timers. Default: the real clock.
	Clock clock.WithTicker
	// OnCommit, when set, is called after every commit attempt (metrics).
	OnCommit func(CommitInfo)
}

// CommitInfo describes one commit attempt.
type CommitInfo struct {
	// Informers are the names of the informers in the transaction.
	Informers []string
	// Ops is the number of object mutations written.
	Ops int
	// Bytes is the size of the encoded records written.
	Bytes int
	// Duration is the time the transaction took, fsync included.
	Duration time.Duration
	// Err is the error, or nil.
	Err error
}

// Committer is the group-commit loop of one DB: the sources registered
// with it are written together, one bbolt transaction (and one fsync) per
// round, when MaxOps mutations are pending or MaxDelay has passed.
// Run owns its goroutine; Flush commits synchronously.
type Committer struct {
	db   *DB
	opts CommitterOptions

	// commitMu serialises commit rounds (the loop and Flush). Lock order:
	// commitMu before mu.
	commitMu sync.Mutex

	// mu guards sources, pending, failures and lastErr.
	mu       sync.Mutex
	sources  []Source
	pending  int
	failures int
	lastErr  error

	wake chan struct{}
}

// NewCommitter returns a committer for db. Start it with Run.
func NewCommitter(db *DB, opts *CommitterOptions) *Committer {
	o := CommitterOptions{}
	if opts != nil {
		o = *opts
	}
	if o.MaxOps <= 0 {
		o.MaxOps = 1000
	}
	if o.MaxDelay <= 0 {
		o.MaxDelay = 100 * time.Millisecond
	}
	if o.MinBackoff <= 0 {
		o.MinBackoff = 100 * time.Millisecond
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = 30 * time.Second
		if o.MaxBackoff < o.MinBackoff {
			o.MaxBackoff = o.MinBackoff
		}
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return &Committer{db: db, opts: o, wake: make(chan struct{}, 1)}
}

// Add registers a source.
func (c *Committer) Add(s Source) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sources = append(c.sources, s)
}

// Remove unregisters a source (after flushing it, if the caller wants).
func (c *Committer) Remove(s Source) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, x := range c.sources {
		if x == s {
			c.sources = append(c.sources[:i], c.sources[i+1:]...)
			return
		}
	}
}

// Notify tells the committer that n more mutations are pending. It never
// blocks.
func (c *Committer) Notify(n int) {
	c.mu.Lock()
	c.pending += n
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// LastError returns the error of the last commit round, or nil if it
// succeeded.
func (c *Committer) LastError() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastErr
}

// Run commits until ctx is done, then makes a final round and returns. It
// is the owner of the committer's timers.
func (c *Committer) Run(ctx context.Context) {
	var timer clock.Timer
	var timerC <-chan time.Time
	stopTimer := func() {
		if timer != nil {
			timer.Stop()
			timer, timerC = nil, nil
		}
	}
	defer stopTimer()
	// rearm starts the timer after a round that left work: mutations that
	// arrived meanwhile, or a failure to retry after a backoff.
	rearm := func() {
		c.mu.Lock()
		n, failures := c.pending, c.failures
		c.mu.Unlock()
		if n > 0 || failures > 0 {
			timer = c.opts.Clock.NewTimer(c.delay(failures))
			timerC = timer.C()
		}
	}
	for {
		select {
		case <-ctx.Done():
			_ = c.Flush(context.Background())
			return
		case <-c.wake:
			c.mu.Lock()
			n, failures := c.pending, c.failures
			c.mu.Unlock()
			if n >= c.opts.MaxOps && failures == 0 {
				stopTimer()
				c.round()
				rearm()
			} else if timer == nil && n > 0 {
				timer = c.opts.Clock.NewTimer(c.delay(failures))
				timerC = timer.C()
			}
		case <-timerC:
			timer, timerC = nil, nil
			c.round()
			rearm()
		}
	}
}

// delay is MaxDelay, or after failures a jittered exponential backoff.
func (c *Committer) delay(failures int) time.Duration {
	if failures == 0 {
		return c.opts.MaxDelay
	}
	d := c.opts.MinBackoff
	for i := 1; i < failures && d < c.opts.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, c.opts.MaxBackoff)
	// Jitter in [d/2, d).
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

func (c *Committer) round() {
	if err := c.Flush(context.Background()); err != nil && !errors.Is(err, ErrClosed) {
		// Reported through LastError and OnCommit; the loop retries.
		return
	}
}

// Flush commits everything pending now, in one transaction, and returns
// its error. It does not wait for a backoff.
func (c *Committer) Flush(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.commitMu.Lock()
	defer c.commitMu.Unlock()
	c.mu.Lock()
	sources := append([]Source(nil), c.sources...)
	c.pending = 0
	c.mu.Unlock()

	type taken struct {
		src   Source
		batch *Batch
	}
	var batches []*Batch
	var took []taken
	var errs []error
	info := CommitInfo{}
	for _, s := range sources {
		b, err := s.Pending()
		if err != nil {
			s.Committed(nil, err)
			errs = append(errs, err)
			continue
		}
		if b == nil {
			continue
		}
		batches = append(batches, b)
		took = append(took, taken{s, b})
		if b.Informer != "" {
			info.Informers = append(info.Informers, b.Informer)
		}
	}
	// failed counts toward the backoff: a transaction that failed. A
	// source's batch that it could not encode (a *BatchError) is not the
	// file's fault: it is handed back to its source, which holds its
	// mutations back, and the other batches are written without it, in
	// the same round.
	failed := false
	for len(batches) > 0 {
		start := c.opts.Clock.Now()
		err := c.db.Commit(batches...)
		info.Duration += c.opts.Clock.Since(start)
		var be *BatchError
		if err != nil && errors.As(err, &be) {
			if i := slices.IndexFunc(took, func(t taken) bool { return t.batch.Informer == be.Informer }); i >= 0 {
				t := took[i]
				if t.batch.Encoding != nil {
					t.batch.Encoding.Wait()
				}
				t.src.Committed(t.batch, err)
				errs = append(errs, err)
				took = slices.Delete(took, i, i+1)
				batches = slices.Delete(batches, i, i+1)
				continue
			}
		}
		info.Err = err
		for _, b := range batches { // Commit encodes the ops without Raw
			if b.Encoding != nil {
				b.Encoding.Wait() // when the commit failed before it applied all
			}
			for i := range b.Ops {
				info.Ops++
				info.Bytes += len(b.Ops[i].Raw)
			}
		}
		for _, t := range took {
			t.src.Committed(t.batch, err)
		}
		if err != nil {
			errs = append(errs, err)
			failed = true
		}
		if c.opts.OnCommit != nil {
			c.opts.OnCommit(info)
		}
		break
	}
	err := errors.Join(errs...)
	c.mu.Lock()
	c.lastErr = err
	if failed {
		c.failures++
	} else {
		c.failures = 0
	}
	c.mu.Unlock()
	if err != nil {
		return fmt.Errorf("store: group commit: %w", err)
	}
	return nil
}
