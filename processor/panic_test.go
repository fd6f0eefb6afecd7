package processor_test

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/boltinformer/boltinformer/processor"
)

func testLogger(t *testing.T) klog.Logger {
	return ktesting.NewLogger(t, ktesting.NewConfig())
}

// panicker panics on the objects in boom and records the others.
type panicker struct {
	recorder
	boom map[interface{}]bool
}

func (h *panicker) OnAdd(obj interface{}, isInInitialList bool) {
	if h.boom[obj] {
		panic(fmt.Sprintf("test panic on %v", obj))
	}
	h.recorder.OnAdd(obj, isInInitialList)
}

// TestHandlerPanicRecovered: with utilruntime.ReallyCrash off, the offending
// notification is skipped and the listener pauses one second on its clock,
// as client-go's processorListener does. Not parallel: ReallyCrash is global.
func TestHandlerPanicRecovered(t *testing.T) {
	old := utilruntime.ReallyCrash
	utilruntime.ReallyCrash = false
	t.Cleanup(func() { utilruntime.ReallyCrash = old })

	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	p := processor.New(&processor.Options{Clock: clk, Logger: testLogger(t)})
	up := newChecker()
	h := &panicker{boom: map[interface{}]bool{"b": true}}
	l := p.AddListener(h, processor.ListenerOptions{Synced: up})
	run(t, p)
	p.Distribute(processor.AddNotification{Obj: "a", InInitialList: true}, false)
	p.Distribute(processor.AddNotification{Obj: "b", InInitialList: true}, false)
	p.Distribute(processor.AddNotification{Obj: "c", InInitialList: true}, false)
	up.finish()

	waitEvents(t, &h.recorder, 1)
	eventually(t, "the pause after the panic", clk.HasWaiters)
	if got := h.len(); got != 1 {
		t.Fatalf("handled %d notifications during the pause, want 1", got)
	}
	clk.Step(time.Second - time.Millisecond)
	if !clk.HasWaiters() {
		t.Fatal("pause after the panic ended before one second")
	}
	if got := h.len(); got != 1 {
		t.Fatalf("handled %d notifications during the pause, want 1", got)
	}
	clk.Step(time.Millisecond)
	if got, want := waitEvents(t, &h.recorder, 2), []string{"add a initial=true", "add c initial=true"}; !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	// client-go counts an initial add as handled only when its handler
	// returned, so this listener never syncs.
	ctl := p.AddListener(&recorder{}, processor.ListenerOptions{Synced: up})
	waitClosed(t, "control listener synced", ctl.HasSyncedChecker().Done())
	if l.HasSynced() {
		t.Error("listener synced although an initial add panicked")
	}
}

const crashChildEnv = "PROCESSOR_TEST_CRASH_CHILD"

// TestHandlerPanicCrashesByDefault: with utilruntime's defaults a handler
// panic crashes the process, as with client-go's informer. Runs in a child.
func TestHandlerPanicCrashesByDefault(t *testing.T) {
	if os.Getenv(crashChildEnv) == "1" {
		p := processor.New(nil)
		p.AddListener(&panicker{boom: map[interface{}]bool{"b": true}}, processor.ListenerOptions{})
		p.Distribute(processor.AddNotification{Obj: "b"}, false)
		stop := run(t, p)
		time.Sleep(waitLimit) // the crash ends the process before this
		stop()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHandlerPanicCrashesByDefault$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("child exited cleanly, want a crash; output:\n%s", out)
	}
	if !strings.Contains(string(out), "test panic on b") {
		t.Errorf("child output lacks the panic:\n%s", out)
	}
}
