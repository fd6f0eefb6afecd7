package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/boltinformer/boltinformer/store"
)

// source is a store.Source that keeps failed mutations for the next round,
// as the contract asks.
type source struct {
	t    *testing.T
	name string

	mu         sync.Mutex
	ops        []store.Op // not yet handed over
	next       int
	rv         int
	pendingErr error
	outcomes   []error
	done       chan error // one send per Committed
}

func newSource(t *testing.T, name string) *source {
	return &source{t: t, name: name, done: make(chan error, 100)}
}

// add applies n new pods.
func (s *source) add(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := 0; i < n; i++ {
		key, r := podRecord(s.t, s.next, fmt.Sprint(s.rv+1))
		s.next++
		s.rv++
		s.ops = append(s.ops, store.Op{Key: key, Record: r})
	}
}

func (s *source) Pending() (*store.Batch, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pendingErr != nil {
		return nil, s.pendingErr
	}
	if len(s.ops) == 0 {
		return nil, nil
	}
	b := &store.Batch{Informer: s.name, Ops: s.ops, Token: len(s.ops),
		State: &store.State{ResourceVersion: fmt.Sprint(s.rv), Indexes: []string{"namespace", "node"}}}
	s.ops = nil
	return b, nil
}

func (s *source) Committed(b *store.Batch, err error) {
	s.mu.Lock()
	if err != nil && b != nil {
		s.ops = append(b.Ops, s.ops...)
	}
	if b != nil && b.Token.(int) != len(b.Ops) {
		s.t.Errorf("token %v for %d ops", b.Token, len(b.Ops))
	}
	s.outcomes = append(s.outcomes, err)
	s.mu.Unlock()
	s.done <- err
}

// wait returns the outcome of the next commit round.
func (s *source) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-s.done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("no commit within 10s")
		return nil
	}
}

// none asserts that no commit round happens for a while.
func (s *source) none(t *testing.T) {
	t.Helper()
	select {
	case err := <-s.done:
		t.Fatalf("unexpected commit round (err %v)", err)
	case <-time.After(50 * time.Millisecond):
	}
}

// waitTimer waits until the committer has armed a timer on clk.
func waitTimer(t *testing.T, clk *clocktesting.FakeClock) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !clk.HasWaiters() {
		if time.Now().After(deadline) {
			t.Fatal("the committer armed no timer")
		}
		time.Sleep(time.Millisecond)
	}
}

// waitLastError waits until c.LastError satisfies ok (it is set just after
// the sources are told).
func waitLastError(t *testing.T, c *store.Committer, ok func(error) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !ok(c.LastError()) {
		if time.Now().After(deadline) {
			t.Fatalf("LastError stays %v", c.LastError())
		}
		time.Sleep(time.Millisecond)
	}
}

// run starts c.Run and returns a function that stops it and waits.
func run(c *store.Committer) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Run(ctx)
	}()
	return func() {
		cancel()
		<-done
	}
}

func TestCommitterMaxOps(t *testing.T) {
	clk := fakeClock()
	db := openT(t, tempPath(t), nil)
	var infos []store.CommitInfo
	var infoMu sync.Mutex
	c := store.NewCommitter(db, &store.CommitterOptions{MaxOps: 3, MaxDelay: time.Hour, Clock: clk,
		OnCommit: func(i store.CommitInfo) { infoMu.Lock(); infos = append(infos, i); infoMu.Unlock() }})
	src := newSource(t, "pods")
	c.Add(src)
	stop := run(c)
	defer stop()

	src.add(3)
	c.Notify(3)
	if err := src.wait(t); err != nil {
		t.Fatal(err)
	}
	if st := state(t, db, "pods"); st == nil || st.Objects != 3 || st.ResourceVersion != "3" {
		t.Fatalf("state %+v", st)
	}
	if clk.HasWaiters() {
		t.Error("a full batch armed the delay timer")
	}
	infoMu.Lock()
	if len(infos) != 1 || infos[0].Ops != 3 || infos[0].Bytes < 3*1000 || infos[0].Err != nil || len(infos[0].Informers) != 1 {
		t.Errorf("CommitInfo %+v", infos)
	}
	infoMu.Unlock()

	// Fewer than MaxOps: the delay timer, not an immediate commit.
	src.add(2)
	c.Notify(1)
	c.Notify(1)
	waitTimer(t, clk)
	src.none(t)
	src.add(1)
	c.Notify(1) // reaches MaxOps: commits at once
	if err := src.wait(t); err != nil {
		t.Fatal(err)
	}
	if st := state(t, db, "pods"); st.Objects != 6 {
		t.Fatalf("objects %d", st.Objects)
	}
	mustCheck(t, db)
}

func TestCommitterMaxDelay(t *testing.T) {
	clk := fakeClock()
	db := openT(t, tempPath(t), nil)
	c := store.NewCommitter(db, &store.CommitterOptions{MaxOps: 100, MaxDelay: 50 * time.Millisecond, Clock: clk})
	src := newSource(t, "pods")
	c.Add(src)
	stop := run(c)
	defer stop()

	src.add(1)
	c.Notify(1)
	waitTimer(t, clk)
	clk.Step(50*time.Millisecond - time.Nanosecond)
	src.none(t)
	// More mutations within the delay join the same round.
	src.add(2)
	c.Notify(2)
	clk.Step(time.Nanosecond)
	if err := src.wait(t); err != nil {
		t.Fatal(err)
	}
	if st := state(t, db, "pods"); st.Objects != 3 || st.ResourceVersion != "3" {
		t.Fatalf("state %+v", st)
	}
	// Nothing pending: no timer, no round.
	clk.Step(time.Hour)
	src.none(t)
}

// TestCommitterRetry: a failing commit (BeforeCommit failpoint) reaches the
// source, sets LastError, and is retried after a backoff until it succeeds.
func TestCommitterRetry(t *testing.T) {
	for _, trigger := range []string{"max-ops", "max-delay"} {
		t.Run(trigger, func(t *testing.T) {
			clk := fakeClock()
			fail := errors.New("failpoint: disk on fire")
			var hookMu sync.Mutex
			failures := 2
			db := openT(t, tempPath(t), &store.Options{NoSync: true, BeforeCommit: func() error {
				hookMu.Lock()
				defer hookMu.Unlock()
				if failures > 0 {
					failures--
					return fail
				}
				return nil
			}})
			const minBackoff = time.Second
			c := store.NewCommitter(db, &store.CommitterOptions{MaxOps: 2, MaxDelay: 10 * time.Millisecond,
				MinBackoff: minBackoff, MaxBackoff: time.Minute, Clock: clk})
			src := newSource(t, "pods")
			c.Add(src)
			stop := run(c)
			defer stop()

			if trigger == "max-ops" {
				src.add(2)
				c.Notify(2)
			} else {
				src.add(1)
				c.Notify(1)
				waitTimer(t, clk)
				clk.Step(10 * time.Millisecond)
			}
			if err := src.wait(t); !errors.Is(err, fail) {
				t.Fatalf("first round: %v", err)
			}
			waitLastError(t, c, func(err error) bool { return errors.Is(err, fail) })
			if st := state(t, db, "pods"); st != nil {
				t.Fatalf("failed commit left state %+v", st)
			}
			// First backoff: jittered in [minBackoff/2, minBackoff].
			waitTimer(t, clk)
			clk.Step(minBackoff/2 - time.Nanosecond)
			src.none(t)
			clk.Step(minBackoff/2 + time.Nanosecond)
			if err := src.wait(t); !errors.Is(err, fail) {
				t.Fatalf("second round: %v", err)
			}
			// Second backoff: doubled, in [minBackoff, 2*minBackoff].
			waitTimer(t, clk)
			clk.Step(minBackoff - time.Nanosecond)
			src.none(t)
			clk.Step(minBackoff + time.Nanosecond)
			if err := src.wait(t); err != nil {
				t.Fatalf("third round: %v", err)
			}
			waitLastError(t, c, func(err error) bool { return err == nil })
			if st := state(t, db, "pods"); st == nil || st.Objects != int64(src.next) {
				t.Fatalf("state %+v after retry", st)
			}
			clk.Step(time.Hour)
			src.none(t)
			mustCheck(t, db)
		})
	}
}

func TestCommitterPendingError(t *testing.T) {
	db := openT(t, tempPath(t), nil)
	c := store.NewCommitter(db, nil)
	bad, good := newSource(t, "bad"), newSource(t, "good")
	bad.pendingErr = errors.New("cannot encode")
	c.Add(bad)
	c.Add(good)
	good.add(1)
	err := c.Flush(context.Background())
	if !errors.Is(err, bad.pendingErr) || !errors.Is(c.LastError(), bad.pendingErr) {
		t.Fatalf("Flush: %v; LastError %v", err, c.LastError())
	}
	if err := <-bad.done; !errors.Is(err, bad.pendingErr) {
		t.Fatalf("bad source told %v", err)
	}
	// The other source's batch is committed regardless.
	if err := <-good.done; err != nil {
		t.Fatal(err)
	}
	if st := state(t, db, "good"); st == nil || st.Objects != 1 {
		t.Fatalf("good: %+v", st)
	}
	c.Remove(bad)
	if err := c.Flush(context.Background()); err != nil || c.LastError() != nil {
		t.Fatalf("after Remove: %v, %v", err, c.LastError())
	}
}

func TestCommitterFinalFlush(t *testing.T) {
	clk := fakeClock()
	db := openT(t, tempPath(t), nil)
	c := store.NewCommitter(db, &store.CommitterOptions{MaxOps: 1000, MaxDelay: time.Hour, Clock: clk})
	src := newSource(t, "pods")
	c.Add(src)
	stop := run(c)
	src.add(5)
	c.Notify(5)
	waitTimer(t, clk)
	stop() // returns only after the final round
	select {
	case err := <-src.done:
		if err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatal("Run returned without a final flush")
	}
	if st := state(t, db, "pods"); st == nil || st.Objects != 5 {
		t.Fatalf("state %+v", st)
	}
}

func TestCommitterFlush(t *testing.T) {
	db := openT(t, tempPath(t), nil)
	c := store.NewCommitter(db, nil)
	src := newSource(t, "pods")
	c.Add(src)
	if err := c.Flush(context.Background()); err != nil {
		t.Fatalf("empty Flush: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Flush(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Flush with a done context: %v", err)
	}
	src.add(2)
	if err := c.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-src.done
	_ = db.Close()
	src.add(1)
	if err := c.Flush(context.Background()); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Flush after Close: %v", err)
	}
	if err := <-src.done; !errors.Is(err, store.ErrClosed) {
		t.Fatalf("source told %v", err)
	}
}

// TestCommitterConcurrentNotify: many goroutines notify while the loop
// commits; every mutation ends up on disk exactly once.
func TestCommitterConcurrentNotify(t *testing.T) {
	db := openT(t, tempPath(t), nil)
	c := store.NewCommitter(db, &store.CommitterOptions{MaxOps: 7, MaxDelay: time.Millisecond})
	srcs := []*source{newSource(t, "a"), newSource(t, "b"), newSource(t, "c")}
	for _, s := range srcs {
		s.done = make(chan error, 1000)
		c.Add(s)
	}
	stop := run(c)
	var wg sync.WaitGroup
	for _, s := range srcs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 30; i++ {
				s.add(1)
				c.Notify(1)
			}
		}()
	}
	wg.Wait()
	stop()
	for _, s := range srcs {
		if st := state(t, db, s.name); st == nil || st.Objects != 30 || st.ResourceVersion != "30" {
			t.Errorf("%s: state %+v", s.name, st)
		}
	}
	mustCheck(t, db)
}

// lateSource hands over one batch whose records are still being encoded
// (Batch.Encoding). For an informer name the store refuses, the commit
// fails before it reads any op.
type lateSource struct {
	t         *testing.T
	name      string
	fail      bool
	failed    []string
	committed chan *store.Batch
}

func (s *lateSource) Pending() (*store.Batch, error) {
	if s.committed == nil {
		return nil, nil
	}
	b := podBatch(s.t, s.name, 0, 12, "3")
	s.failed = encodeLate(b, s.fail)
	return b, nil
}

func (s *lateSource) Committed(b *store.Batch, err error) {
	if b != nil {
		s.committed <- b
		s.committed = nil
	}
}

// TestCommitterWaitsForEncoding: the committer reports the ops and bytes
// written only once the batch's encoding is done, including when the
// commit failed before applying anything (the race detector watches the
// ops).
func TestCommitterWaitsForEncoding(t *testing.T) {
	for _, name := range []string{"pods", "bad\x00name"} {
		t.Run(name, func(t *testing.T) {
			db := openT(t, tempPath(t), nil)
			var info store.CommitInfo
			c := store.NewCommitter(db, &store.CommitterOptions{OnCommit: func(i store.CommitInfo) { info = i }})
			committed := make(chan *store.Batch, 1)
			s := &lateSource{t: t, name: name, committed: committed}
			c.Add(s)
			err := c.Flush(context.Background())
			if (err == nil) != (name == "pods") {
				t.Fatalf("Flush: %v", err)
			}
			b := <-committed
			bytes := 0
			for _, op := range b.Ops {
				bytes += len(op.Raw)
			}
			if info.Ops != len(b.Ops) || info.Bytes != bytes || len(b.Ops) != 12 {
				t.Fatalf("reported %d ops, %d bytes; the batch has %d ops, %d bytes", info.Ops, info.Bytes, len(b.Ops), bytes)
			}
		})
	}
}

// TestCommitterUnencodableBatch: a source's batch with an op it could not
// encode is handed back to it with the *BatchError, and the other sources'
// batches are written in the same round, without it.
func TestCommitterUnencodableBatch(t *testing.T) {
	db := openT(t, tempPath(t), nil)
	c := store.NewCommitter(db, nil)
	badCommitted := make(chan *store.Batch, 1)
	bad := &lateSource{t: t, name: "bad", fail: true, committed: badCommitted}
	good := newSource(t, "good")
	c.Add(bad)
	c.Add(good)
	good.add(5)
	err := c.Flush(context.Background())
	var be *store.BatchError
	if !errors.As(err, &be) || be.Informer != "bad" {
		t.Fatalf("Flush: %v", err)
	}
	<-badCommitted
	if err := good.wait(t); err != nil {
		t.Fatalf("the good source's batch: %v", err)
	}
	if st := state(t, db, "good"); st == nil || st.Objects != 5 {
		t.Fatalf("good: state %+v", st)
	}
	if st := state(t, db, "bad"); st != nil {
		t.Fatalf("bad: state %+v", st)
	}
	mustCheck(t, db)
}
