package boltinformer_test

// Options.Clock drives the reflector (issue 14, item 10): its backoff
// after a failed list and its resync timer wait on the DB's clock.

import (
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/internal/testobj"
)

// timerClock is a fake clock that records the durations of the timers
// asked of it.
type timerClock struct {
	*testingclock.FakeClock
	mu     sync.Mutex
	timers []time.Duration
}

func (c *timerClock) NewTimer(d time.Duration) clock.Timer {
	c.record(d)
	return c.FakeClock.NewTimer(d)
}

func (c *timerClock) After(d time.Duration) <-chan time.Time {
	c.record(d)
	return c.FakeClock.After(d)
}

func (c *timerClock) record(d time.Duration) {
	c.mu.Lock()
	c.timers = append(c.timers, d)
	c.mu.Unlock()
}

// timer returns the first duration recorded (from index from on) that ok
// accepts, and the index after it.
func (c *timerClock) timer(from int, ok func(time.Duration) bool) (time.Duration, int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := from; i < len(c.timers); i++ {
		if ok(c.timers[i]) {
			return c.timers[i], i + 1, true
		}
	}
	return 0, len(c.timers), false
}

// waitTimer waits for a timer ok accepts, requested after mark.
func (c *timerClock) waitTimer(t *testing.T, what string, mark *int, ok func(time.Duration) bool) time.Duration {
	t.Helper()
	var d time.Duration
	waitFor(t, what, func() bool {
		var found bool
		var next int
		d, next, found = c.timer(*mark, ok)
		if found {
			*mark = next
		}
		return found
	})
	return d
}

// resyncCounter counts the updates whose old and new objects are the same
// (resyncs) and the adds.
type resyncCounter struct {
	mu           sync.Mutex
	adds, resync int
}

func (h *resyncCounter) OnAdd(any, bool) { h.mu.Lock(); h.adds++; h.mu.Unlock() }
func (h *resyncCounter) OnUpdate(old, new any) {
	h.mu.Lock()
	if old == new {
		h.resync++
	}
	h.mu.Unlock()
}
func (h *resyncCounter) OnDelete(any) {}
func (h *resyncCounter) counts() (int, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.adds, h.resync
}

func TestRegressionClockDrivesBackoffAndResync(t *testing.T) {
	clk := &timerClock{FakeClock: testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}
	src := newPodSource()
	for i := 0; i < 3; i++ {
		src.Create(testobj.Pod(i, 1, 1, ""))
	}
	src.SetDown(true)
	db, err := boltinformer.Open(t.TempDir()+"/cache.db", &boltinformer.Options{NoSync: true, Clock: clk, Logger: &quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const resync = time.Minute
	inf, err := db.NewInformer("pods", src, &corev1.Pod{}, resync, nil, &boltinformer.InformerOptions{Logger: &quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	h := &resyncCounter{}
	if _, err := inf.AddEventHandler(h); err != nil {
		t.Fatal(err)
	}
	runInformer(t, inf)

	// The backoff: after each failed list the reflector waits on the
	// DB's clock (client-go's 800ms doubling, with jitter up to as much
	// again), and lists again once the clock has moved past it.
	isBackoff := func(lo time.Duration) func(time.Duration) bool {
		return func(d time.Duration) bool { return d >= lo && d < 2*lo }
	}
	attempts := func() int { c := src.Calls(); return c.Lists + c.Errors }
	mark := 0
	for i, lo := range []time.Duration{800 * time.Millisecond, 1600 * time.Millisecond} {
		d := clk.waitTimer(t, "a backoff timer on the DB's clock", &mark, isBackoff(lo))
		if n := attempts(); n != i+1 {
			t.Fatalf("%d lists before the backoff %d ended, want %d", n, i, i+1)
		}
		if i == 1 {
			src.SetDown(false)
		}
		clk.Step(d)
		waitFor(t, "the list after the backoff", func() bool { return attempts() >= i+2 })
	}
	waitFor(t, "sync", inf.HasSynced)
	waitFor(t, "the initial adds", func() bool { a, _ := h.counts(); return a == 3 })

	// The resync timer: one period on the DB's clock resyncs every object.
	clk.waitTimer(t, "the resync timer on the DB's clock", &mark, func(d time.Duration) bool { return d == resync })
	if _, r := h.counts(); r != 0 {
		t.Fatalf("%d resyncs before the period passed", r)
	}
	clk.Step(resync)
	waitFor(t, "a resync of every object", func() bool { _, r := h.counts(); return r == 3 })
}
