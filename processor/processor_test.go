package processor_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"k8s.io/client-go/tools/cache"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/boltinformer/boltinformer/processor"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// mixed returns n notifications of every kind and the calls they produce.
func mixed(n int) ([]processor.Notification, []string) {
	var ns []processor.Notification
	var want []string
	for i := range n {
		switch i % 4 {
		case 0:
			ns = append(ns, processor.AddNotification{Obj: i})
			want = append(want, fmt.Sprintf("add %d initial=false", i))
		case 1:
			ns = append(ns, processor.AddNotification{Obj: i, InInitialList: true})
			want = append(want, fmt.Sprintf("add %d initial=true", i))
		case 2:
			ns = append(ns, processor.UpdateNotification{Old: i - 1, New: i})
			want = append(want, fmt.Sprintf("update %d->%d", i-1, i))
		case 3:
			ns = append(ns, processor.DeleteNotification{Old: i})
			want = append(want, fmt.Sprintf("delete %d", i))
		}
	}
	return ns, want
}

func TestOrderPerListener(t *testing.T) {
	p := processor.New(nil)
	recs := make([]*recorder, 3)
	for i := range recs {
		recs[i] = &recorder{}
		p.AddListener(recs[i], processor.ListenerOptions{})
	}
	run(t, p)
	ns, want := mixed(2000)
	for _, n := range ns {
		p.Distribute(n, false)
	}
	for i, r := range recs {
		if got := waitEvents(t, r, len(want)); !slices.Equal(got, want) {
			t.Errorf("listener %d: events differ from distribution order", i)
		}
	}
}

func TestDistributeBeforeRunIsBufferedInOrder(t *testing.T) {
	p := processor.New(nil)
	r := &recorder{}
	p.AddListener(r, processor.ListenerOptions{})
	ns, want := mixed(100)
	for _, n := range ns {
		p.Distribute(n, false) // must not block although nothing runs
	}
	if r.len() != 0 {
		t.Fatalf("handler called before Run")
	}
	run(t, p)
	if got := waitEvents(t, r, len(want)); !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestSlowHandlerBlocksNeitherDistributeNorOthers(t *testing.T) {
	p := processor.New(&processor.Options{InitialBufferSize: 4}) // force growth
	g := newGate(t)
	slow := &recorder{before: g.block}
	fast := &recorder{}
	ls := p.AddListener(slow, processor.ListenerOptions{Name: "slow"})
	p.AddListener(fast, processor.ListenerOptions{Name: "fast"})
	run(t, p)

	ns, want := mixed(10000)
	distributed := make(chan struct{})
	go func() {
		defer close(distributed)
		for _, n := range ns {
			p.Distribute(n, false)
		}
	}()
	waitClosed(t, "Distribute to return while a handler is stuck", distributed)
	if got := waitEvents(t, fast, len(want)); !slices.Equal(got, want) {
		t.Errorf("fast listener: events differ")
	}
	g.waitEntered(t)
	if slow.len() != 0 {
		t.Fatalf("slow handler recorded %d events while blocked", slow.len())
	}
	if got := ls.Pending(); got != len(ns) {
		t.Errorf("slow Pending() = %d, want %d (buffered plus the one in progress)", got, len(ns))
	}

	g.open()
	if got := waitEvents(t, slow, len(want)); !slices.Equal(got, want) {
		t.Errorf("slow listener: events differ after release")
	}
	eventually(t, "Pending() == 0", func() bool { return ls.Pending() == 0 })
}

func TestHasSynced(t *testing.T) {
	t.Run("false until upstream synced and initial adds handled", func(t *testing.T) {
		p := processor.New(nil)
		up := newChecker()
		g := newGate(t)
		r := &recorder{before: g.blockOn("add b initial=true")}
		l := p.AddListener(r, processor.ListenerOptions{Synced: up})
		run(t, p)
		p.Distribute(processor.AddNotification{Obj: "a", InInitialList: true}, false)
		p.Distribute(processor.AddNotification{Obj: "b", InInitialList: true}, false)
		p.Distribute(processor.AddNotification{Obj: "c"}, false) // not initial: not waited for
		g.waitEntered(t)
		if l.HasSynced() {
			t.Fatal("synced before upstream synced")
		}
		up.finish()
		// The tracker must see the upstream first; a control listener with
		// nothing pending proves watchSynced has had its chance.
		ctl := p.AddListener(&recorder{}, processor.ListenerOptions{Synced: up})
		waitClosed(t, "control listener synced", ctl.HasSyncedChecker().Done())
		if l.HasSynced() {
			t.Fatal("synced while an initial add is still being handled")
		}
		g.open()
		waitClosed(t, "listener synced", l.HasSyncedChecker().Done())
		if !l.HasSynced() {
			t.Fatal("HasSynced false after Done closed")
		}
		// Adds with InInitialList=false are not waited for, but still ordered.
		waitEvents(t, r, 3)
	})

	t.Run("false while upstream not synced", func(t *testing.T) {
		p := processor.New(nil)
		up := newChecker()
		r := &recorder{}
		l := p.AddListener(r, processor.ListenerOptions{Synced: up})
		run(t, p)
		p.Distribute(processor.AddNotification{Obj: "a", InInitialList: true}, false)
		waitEvents(t, r, 1)
		if l.HasSynced() {
			t.Fatal("synced although upstream is not")
		}
		up.finish()
		waitClosed(t, "listener synced", l.HasSyncedChecker().Done())
	})

	t.Run("not before Run", func(t *testing.T) {
		p := processor.New(nil)
		up := newChecker()
		up.finish()
		l := p.AddListener(&recorder{}, processor.ListenerOptions{Synced: up})
		// client-go starts watching the upstream only when the processor runs.
		if l.HasSynced() {
			t.Fatal("synced before Run")
		}
		run(t, p)
		waitClosed(t, "listener synced", l.HasSyncedChecker().Done())
	})

	t.Run("checker name", func(t *testing.T) {
		p := processor.New(nil)
		l := p.AddListener(&recorder{}, processor.ListenerOptions{Name: "h", Synced: newChecker()})
		if got, want := l.HasSyncedChecker().Name(), "test informer + event handler h"; got != want {
			t.Errorf("Name() = %q, want %q", got, want)
		}
	})
}

func TestLateListenerGetsInitialListFirst(t *testing.T) {
	p := processor.New(nil)
	up := newChecker()
	up.finish() // the informer synced long ago
	early := &recorder{}
	p.AddListener(early, processor.ListenerOptions{Synced: up})
	run(t, p)
	p.Distribute(processor.AddNotification{Obj: "x"}, false)
	waitEvents(t, early, 1)

	g := newGate(t)
	late := &recorder{before: g.blockOn("add o0 initial=true")}
	var want []string
	var objs []interface{}
	for i := range 100 {
		objs = append(objs, fmt.Sprintf("o%d", i))
		want = append(want, fmt.Sprintf("add o%d initial=true", i))
	}
	initial := func(yield func(processor.AddNotification) bool) {
		// Give a sync watch started too early the time to see the synced
		// informer and an empty tracker.
		time.Sleep(20 * time.Millisecond)
		for _, o := range objs {
			if !yield(processor.AddNotification{Obj: o, InInitialList: true}) {
				return
			}
		}
	}
	l := p.AddListener(late, processor.ListenerOptions{Synced: up, InitialList: initial})
	// The informer has long been synced: only the queued initial list may
	// keep the late listener unsynced.
	if l.HasSynced() {
		t.Fatal("late listener synced before its initial list was handled")
	}
	p.Distribute(processor.UpdateNotification{Old: "o1", New: "o1'"}, false)
	want = append(want, "update o1->o1'")
	g.waitEntered(t)
	if l.HasSynced() {
		t.Fatal("late listener synced while its initial list is being handled")
	}
	g.open()
	waitClosed(t, "late listener synced", l.HasSyncedChecker().Done())
	if got := waitEvents(t, late, len(want)); !slices.Equal(got, want) {
		t.Errorf("late listener got %v, want %v", got, want)
	}
	if got := waitEvents(t, early, 2); !slices.Equal(got, []string{"add x initial=false", "update o1->o1'"}) {
		t.Errorf("early listener got %v", got)
	}
}

func TestResyncOnlyForDueListeners(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := testingclock.NewFakeClock(start)
	p := processor.New(&processor.Options{Clock: clk})
	none, ten, thirty := &recorder{}, &recorder{}, &recorder{}
	p.AddListener(none, processor.ListenerOptions{Name: "none"})
	p.AddListener(ten, processor.ListenerOptions{Name: "ten", RequestedResyncPeriod: 10 * time.Second, ResyncPeriod: 10 * time.Second})
	p.AddListener(thirty, processor.ListenerOptions{Name: "thirty", RequestedResyncPeriod: 30 * time.Second, ResyncPeriod: 30 * time.Second})
	run(t, p)
	recs := map[string]*recorder{"none": none, "ten": ten, "thirty": thirty}

	seq := 0
	// round distributes one sync update, then a non-sync marker that every
	// listener gets, and checks which listeners got the sync update.
	round := func(t *testing.T, wantSync ...string) {
		t.Helper()
		seq++
		syncEv := fmt.Sprintf("update s%d->s%d", seq, seq)
		marker := fmt.Sprintf("delete m%d", seq)
		p.Distribute(processor.UpdateNotification{Old: fmt.Sprintf("s%d", seq), New: fmt.Sprintf("s%d", seq)}, true)
		p.Distribute(processor.DeleteNotification{Old: fmt.Sprintf("m%d", seq)}, false)
		for name, r := range recs {
			eventually(t, name+" marker", func() bool { return slices.Contains(r.got(), marker) })
			got := slices.Contains(r.got(), syncEv)
			if want := slices.Contains(wantSync, name); got != want {
				t.Errorf("round %d: listener %s got sync event = %v, want %v", seq, name, got, want)
			}
		}
	}

	// client-go registers every listener as due until ShouldResync first
	// recomputes it: sync distributions reach all of them before that.
	round(t, "none", "ten", "thirty")

	if p.ShouldResync() {
		t.Error("ShouldResync at start = true, want false")
	}
	round(t)

	clk.Step(10 * time.Second)
	if !p.ShouldResync() {
		t.Error("ShouldResync at 10s = false, want true")
	}
	round(t, "ten")
	// Not due again until a further 10s have passed.
	if p.ShouldResync() {
		t.Error("second ShouldResync at 10s = true, want false")
	}
	round(t)

	clk.Step(20 * time.Second)
	if !p.ShouldResync() {
		t.Error("ShouldResync at 30s = false, want true")
	}
	round(t, "ten", "thirty")

	clk.Step(9 * time.Second)
	if p.ShouldResync() {
		t.Error("ShouldResync at 39s = true, want false")
	}
	round(t)
}

func TestResyncCheckPeriodChanged(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	p := processor.New(&processor.Options{Clock: clk})
	p.AddListener(&recorder{}, processor.ListenerOptions{RequestedResyncPeriod: 5 * time.Second, ResyncPeriod: 5 * time.Second})
	// An informer that does not resync gives no listener a period.
	p.ResyncCheckPeriodChanged(0)
	clk.Step(time.Minute)
	if p.ShouldResync() {
		t.Error("due after the check period became 0")
	}
	// Raised to the check period; next resync time is kept, so it is due now.
	p.ResyncCheckPeriodChanged(20 * time.Second)
	if !p.ShouldResync() {
		t.Error("not due after the check period became 20s")
	}
	clk.Step(19 * time.Second)
	if p.ShouldResync() {
		t.Error("due after 19s with a 20s period")
	}
	clk.Step(time.Second)
	if !p.ShouldResync() {
		t.Error("not due after 20s with a 20s period")
	}
}

func TestDetermineResyncPeriod(t *testing.T) {
	for _, tc := range []struct {
		requested, check, want time.Duration
	}{
		{0, 0, 0},
		{0, time.Second, 0},
		{time.Minute, 0, 0},
		{time.Second, time.Minute, time.Minute},
		{time.Minute, time.Second, time.Minute},
		{time.Minute, time.Minute, time.Minute},
	} {
		if got := processor.DetermineResyncPeriod(testLogger(t), tc.requested, tc.check); got != tc.want {
			t.Errorf("DetermineResyncPeriod(%v, %v) = %v, want %v", tc.requested, tc.check, got, tc.want)
		}
	}
}

func TestRemoveListenerStopsDelivery(t *testing.T) {
	p := processor.New(nil)
	g := newGate(t)
	removed := &recorder{before: g.blockOn("add 0 initial=false")}
	kept := &recorder{}
	l := p.AddListener(removed, processor.ListenerOptions{})
	p.AddListener(kept, processor.ListenerOptions{})
	run(t, p)
	for i := range 10 {
		p.Distribute(processor.AddNotification{Obj: i}, false)
	}
	g.waitEntered(t)
	if err := p.RemoveListener(l); err != nil {
		t.Fatalf("RemoveListener: %v", err)
	}
	if got := p.Listeners(); got != 1 {
		t.Errorf("Listeners() = %d after removal, want 1", got)
	}
	select {
	case <-l.ShutdownChan():
		t.Fatal("ShutdownChan closed while a handler call is in progress")
	default:
	}
	for i := 10; i < 20; i++ {
		p.Distribute(processor.AddNotification{Obj: i}, false)
	}
	g.open()
	waitClosed(t, "ShutdownChan", l.ShutdownChan())
	// The call in progress completes; nothing queued behind it is handled.
	if got := removed.got(); !slices.Equal(got, adds(0)) {
		t.Errorf("removed listener got %v, want only the call in progress", got)
	}
	if got := l.Pending(); got != 0 {
		t.Errorf("Pending() = %d after removal, want 0", got)
	}
	want := adds(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19)
	if got := waitEvents(t, kept, 20); !slices.Equal(got, want) {
		t.Errorf("kept listener got %v", got)
	}
	// Idempotent, like client-go.
	if err := p.RemoveListener(l); err != nil {
		t.Errorf("second RemoveListener: %v", err)
	}
}

func TestRemoveListenerErrors(t *testing.T) {
	p := processor.New(nil)
	var nilListener *processor.Listener
	for name, reg := range map[string]cache.ResourceEventHandlerRegistration{
		"nil":          nil,
		"nil listener": nilListener,
		"foreign type": foreignRegistration{},
	} {
		if err := p.RemoveListener(reg); !errors.Is(err, processor.ErrInvalidRegistration) {
			t.Errorf("%s: RemoveListener = %v, want ErrInvalidRegistration", name, err)
		}
	}
	other := processor.New(nil).AddListener(&recorder{}, processor.ListenerOptions{})
	if err := p.RemoveListener(other); err != nil {
		t.Errorf("listener of another processor: RemoveListener = %v, want nil", err)
	}
}

type foreignRegistration struct{}

func (foreignRegistration) HasSynced() bool                     { return false }
func (foreignRegistration) HasSyncedChecker() cache.DoneChecker { return nil }

func TestRemoveBeforeRun(t *testing.T) {
	p := processor.New(nil)
	r := &recorder{}
	l := p.AddListener(r, processor.ListenerOptions{})
	p.Distribute(processor.AddNotification{Obj: 1}, false)
	if err := p.RemoveListener(l); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, "ShutdownChan of a listener that never ran", l.ShutdownChan())
	ctl := &recorder{}
	p.AddListener(ctl, processor.ListenerOptions{})
	run(t, p)
	p.Distribute(processor.AddNotification{Obj: 2}, false)
	waitEvents(t, ctl, 1)
	if got := r.len(); got != 0 {
		t.Errorf("removed listener got %d events", got)
	}
}

// informerStub routes RemoveEventHandler to a Processor so that client-go's
// own cache.ShutDownEventHandler can be used on our registrations.
type informerStub struct {
	cache.SharedInformer // nil: other methods are not called
	p                    *processor.Processor
}

func (s informerStub) RemoveEventHandler(reg cache.ResourceEventHandlerRegistration) error {
	return s.p.RemoveListener(reg)
}

func TestClientGoShutDownEventHandler(t *testing.T) {
	p := processor.New(nil)
	g := newGate(t)
	r := &recorder{before: g.block}
	l := p.AddListener(r, processor.ListenerOptions{})
	run(t, p)
	p.Distribute(processor.AddNotification{Obj: 1}, false)
	g.waitEntered(t)
	returned := make(chan error, 1)
	go func() { returned <- cache.ShutDownEventHandler(informerStub{p: p}, l) }()
	select {
	case err := <-returned:
		t.Fatalf("ShutDownEventHandler returned (%v) while the handler is running", err)
	case <-time.After(50 * time.Millisecond):
	}
	g.open()
	select {
	case err := <-returned:
		if err != nil {
			t.Fatalf("ShutDownEventHandler: %v", err)
		}
	case <-time.After(waitLimit):
		t.Fatal("ShutDownEventHandler did not return")
	}
}

func TestRunStopWaitsForHandlers(t *testing.T) {
	p := processor.New(nil)
	g := newGate(t)
	r := &recorder{before: g.blockOn("add 0 initial=false")}
	l := p.AddListener(r, processor.ListenerOptions{Synced: newChecker()})
	others := make([]*processor.Listener, 5)
	for i := range others {
		others[i] = p.AddListener(&recorder{}, processor.ListenerOptions{Synced: newChecker()})
	}
	ctx, cancel := context.WithCancel(context.Background())
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		p.Run(ctx)
	}()
	for i := range 5 {
		p.Distribute(processor.AddNotification{Obj: i}, false)
	}
	g.waitEntered(t)
	cancel()
	select {
	case <-returned:
		t.Fatal("Run returned while a handler call is in progress")
	case <-time.After(50 * time.Millisecond):
	}
	g.open()
	waitClosed(t, "Run to return", returned)
	for _, x := range append(others, l) {
		waitClosed(t, "ShutdownChan after stop", x.ShutdownChan())
	}
	// Queued notifications are dropped on stop.
	if got := r.got(); !slices.Equal(got, adds(0)) {
		t.Errorf("got %v after stop, want only the call in progress", got)
	}
	if got := p.Listeners(); got != 0 {
		t.Errorf("Listeners() = %d after stop, want 0", got)
	}
	// A stopped processor accepts calls without blocking or delivering.
	p.Distribute(processor.AddNotification{Obj: 99}, false)
	p.ShouldResync()
	late := p.AddListener(&recorder{}, processor.ListenerOptions{})
	waitClosed(t, "ShutdownChan of a listener added after stop", late.ShutdownChan())
	if err := p.RemoveListener(l); err != nil {
		t.Errorf("RemoveListener after stop: %v", err)
	}
	p.Run(context.Background()) // runs once: returns at once
}

func TestListenerAddedWhileRunningStopsWithRun(t *testing.T) {
	p := processor.New(nil)
	stop := run(t, p)
	r := &recorder{}
	l := p.AddListener(r, processor.ListenerOptions{Synced: newChecker()})
	p.Distribute(processor.DeleteNotification{Old: 1}, false)
	waitEvents(t, r, 1)
	stop()
	waitClosed(t, "ShutdownChan", l.ShutdownChan())
}

func TestHandlerName(t *testing.T) {
	p := processor.New(nil)
	if got, want := p.AddListener(&recorder{}, processor.ListenerOptions{}).Name(),
		"github.com/boltinformer/boltinformer/processor_test.recorder"; got != want {
		t.Errorf("type name = %q, want %q", got, want)
	}
	funcs := cache.ResourceEventHandlerFuncs{AddFunc: func(interface{}) {}, DeleteFunc: func(interface{}) {}}
	if got, want := p.AddListener(funcs, processor.ListenerOptions{}).Name(),
		"github.com/boltinformer/boltinformer/processor_test.TestHandlerName"; got != want {
		t.Errorf("funcs name = %q, want %q", got, want)
	}
	if got := p.AddListener(&recorder{}, processor.ListenerOptions{Name: "mine"}).Name(); got != "mine" {
		t.Errorf("explicit name = %q", got)
	}
}

// TestConcurrentUse runs producers, registration churn, resync checks and
// gauges at once (for -race), and checks each listener's per-producer order.
func TestConcurrentUse(t *testing.T) {
	clk := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	p := processor.New(&processor.Options{Clock: clk, InitialBufferSize: 8})
	const producers, perProducer = 4, 2000
	stable := make([]*recorder, 3)
	for i := range stable {
		stable[i] = &recorder{}
		p.AddListener(stable[i], processor.ListenerOptions{ResyncPeriod: time.Second, RequestedResyncPeriod: time.Second})
	}
	run(t, p)

	var wg sync.WaitGroup
	for w := range producers {
		wg.Go(func() {
			for i := range perProducer {
				p.Distribute(processor.UpdateNotification{Old: w, New: i}, i%7 == 0)
			}
		})
	}
	done := make(chan struct{})
	var churned []*recorder
	var churnMu sync.Mutex
	var side sync.WaitGroup
	side.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			r := &recorder{}
			l := p.AddListener(r, processor.ListenerOptions{InitialList: slices.Values([]processor.AddNotification{{Obj: "i", InInitialList: true}})})
			churnMu.Lock()
			churned = append(churned, r)
			churnMu.Unlock()
			_ = l.Pending()
			_ = l.HasSynced()
			if err := p.RemoveListener(l); err != nil {
				t.Error(err)
			}
		}
	})
	side.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			clk.Step(100 * time.Millisecond)
			p.ShouldResync()
			p.ResyncCheckPeriodChanged(time.Second)
			_ = p.Listeners()
		}
	})
	wg.Wait()
	close(done)
	side.Wait()

	check := func(name string, events []string) {
		next := make([]int, producers)
		for _, ev := range events {
			var w, i int
			if _, err := fmt.Sscanf(ev, "update %d->%d", &w, &i); err != nil {
				continue // initial add
			}
			if i < next[w] {
				t.Fatalf("%s: producer %d event %d after %d", name, w, i, next[w])
			}
			next[w] = i + 1
		}
	}
	for i, r := range stable {
		// Sync updates may be skipped (not due), the others never.
		eventually(t, "stable listener to drain", func() bool {
			got := r.got()
			n := 0
			for _, ev := range got {
				var w, j int
				if _, err := fmt.Sscanf(ev, "update %d->%d", &w, &j); err == nil && j == perProducer-1 {
					n++
				}
			}
			return n == producers
		})
		check(fmt.Sprintf("stable %d", i), r.got())
	}
	churnMu.Lock()
	defer churnMu.Unlock()
	for i, r := range churned {
		check(fmt.Sprintf("churned %d", i), r.got())
	}
}
