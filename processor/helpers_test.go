package processor_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/boltinformer/boltinformer/processor"
)

// waitLimit bounds every wait in these tests. It is a deadlock guard, not a
// speed requirement: passing tests never come near it.
const waitLimit = 20 * time.Second

// recorder is a handler that records each call as a string.
type recorder struct {
	// before, if set, runs on the handler goroutine before each call is
	// recorded, with the call's text; it may block.
	before func(ev string)

	mu     sync.Mutex
	events []string
}

func (r *recorder) OnAdd(obj interface{}, isInInitialList bool) {
	r.record(fmt.Sprintf("add %v initial=%v", obj, isInInitialList))
}

func (r *recorder) OnUpdate(oldObj, newObj interface{}) {
	r.record(fmt.Sprintf("update %v->%v", oldObj, newObj))
}

func (r *recorder) OnDelete(obj interface{}) {
	r.record(fmt.Sprintf("delete %v", obj))
}

func (r *recorder) record(ev string) {
	if r.before != nil {
		r.before(ev)
	}
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
}

func (r *recorder) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

func (r *recorder) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.events)
}

// gate blocks the handler call it is placed in until released.
type gate struct {
	entered     chan struct{} // closed when the first blocked call enters
	enteredOnce sync.Once
	release     chan struct{}
	releaseOnce sync.Once
}

// gates holds each test's gates, so that a failing test's cleanup can open
// them before it stops the processor (which waits for blocked handlers).
var gates sync.Map // *testing.T -> *[]*gate, only touched by the test goroutine

func newGate(t *testing.T) *gate {
	g := &gate{entered: make(chan struct{}), release: make(chan struct{})}
	v, _ := gates.LoadOrStore(t, new([]*gate))
	list := v.(*[]*gate)
	*list = append(*list, g)
	return g
}

func openGates(t *testing.T) {
	if v, ok := gates.LoadAndDelete(t); ok {
		for _, g := range *v.(*[]*gate) {
			g.open()
		}
	}
}

// block is a recorder.before that blocks every call until release.
func (g *gate) block(string) {
	g.enteredOnce.Do(func() { close(g.entered) })
	<-g.release
}

// blockOn returns a recorder.before that blocks only the call for ev.
func (g *gate) blockOn(ev string) func(string) {
	return func(got string) {
		if got == ev {
			g.block(got)
		}
	}
}

func (g *gate) open() { g.releaseOnce.Do(func() { close(g.release) }) }

func (g *gate) waitEntered(t *testing.T) {
	t.Helper()
	select {
	case <-g.entered:
	case <-time.After(waitLimit):
		t.Fatal("handler call never entered the gate")
	}
}

// checker is a cache.DoneChecker standing in for the informer's sync.
type checker struct {
	ch   chan struct{}
	once sync.Once
}

func newChecker() *checker { return &checker{ch: make(chan struct{})} }

func (c *checker) Name() string          { return "test informer" }
func (c *checker) Done() <-chan struct{} { return c.ch }
func (c *checker) finish()               { c.once.Do(func() { close(c.ch) }) }

// run starts p.Run and returns a stop function that cancels it and waits for
// Run to return; it is also registered as cleanup.
func run(t *testing.T, p *processor.Processor) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Run(ctx)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			openGates(t)
			cancel()
			select {
			case <-done:
			case <-time.After(waitLimit):
				t.Error("Run did not return after its context was canceled")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// eventually waits until cond holds, failing the test at waitLimit.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitEvents waits until r has recorded n events and returns them.
func waitEvents(t *testing.T, r *recorder, n int) []string {
	t.Helper()
	eventually(t, fmt.Sprintf("%d events", n), func() bool { return r.len() >= n })
	return r.got()
}

func waitClosed(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitLimit):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func adds(objs ...interface{}) []string {
	var out []string
	for _, o := range objs {
		out = append(out, fmt.Sprintf("add %v initial=false", o))
	}
	return out
}
