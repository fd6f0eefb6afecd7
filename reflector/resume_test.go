package reflector_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/boltinformer/boltinformer/internal/testobj"
	"github.com/boltinformer/boltinformer/recovery/crashtest"
	"github.com/boltinformer/boltinformer/reflector"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newSource(t *testing.T, n int) *crashtest.Source {
	t.Helper()
	src := crashtest.NewSource(func() runtime.Object { return &corev1.PodList{} })
	for i := 0; i < n; i++ {
		if _, err := src.Create(testobj.Pod(i, 1, 1, "")); err != nil {
			t.Fatal(err)
		}
	}
	return src
}

func TestWarmFirstListFromDisk(t *testing.T) {
	src := newSource(t, 3)
	answered := 0
	lw := reflector.New(src, &reflector.Options{
		ResourceVersion: "2",
		Snapshot:        func() []runtime.Object { return nil },
		OnDiskAnswer:    func() { answered++ },
	})
	if !lw.Warm() || !lw.IsWatchListSemanticsUnSupported() {
		t.Fatal("a warm ListerWatcher must opt out of WatchList")
	}
	obj, err := lw.ListWithContext(context.Background(), metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	lm, _ := meta.ListAccessor(obj)
	if lm.GetResourceVersion() != "2" || answered != 1 || src.Calls().Lists != 0 {
		t.Fatalf("disk answer: rv %q, answered %d, server lists %d", lm.GetResourceVersion(), answered, src.Calls().Lists)
	}
	// Every later call goes to the server.
	obj, err = lw.ListWithContext(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if items, _ := meta.ExtractList(obj); len(items) != 3 || src.Calls().Lists != 1 || answered != 1 {
		t.Fatalf("second list: %d items, %d server lists", len(items), src.Calls().Lists)
	}
	st := lw.Stats()
	if st.DiskAnswers != 1 || st.Lists != 1 || !st.Resumed {
		t.Fatalf("stats %+v", st)
	}
	select {
	case <-lw.Resumed():
	default:
		t.Fatal("a server list must mark the resume")
	}
}

func TestColdPassesThrough(t *testing.T) {
	src := newSource(t, 2)
	lw := reflector.New(src, nil)
	if lw.Warm() {
		t.Fatal("no resourceVersion: cold")
	}
	// crashtest.Source has no WatchList: the cold wrapper says what it says.
	if !lw.IsWatchListSemanticsUnSupported() {
		t.Fatal("cold wrapper must report the inner ListerWatcher's semantics")
	}
	if _, err := lw.List(metav1.ListOptions{}); err != nil || src.Calls().Lists != 1 {
		t.Fatalf("cold list: %v, %d server lists", err, src.Calls().Lists)
	}
}

func TestWatchObservesEventsAndExpired(t *testing.T) {
	src := newSource(t, 2)
	lw := reflector.New(src, nil)
	w, err := lw.Watch(metav1.ListOptions{ResourceVersion: "1"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		if ev.Type != watch.Added {
			t.Fatalf("event %v", ev.Type)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event")
	}
	w.Stop()
	// A cold wrapper resumes nothing: Resumed stays false, while the
	// channel says that the server answered.
	if st := lw.Stats(); st.Events != 1 || st.Resumed || st.LastEvent.IsZero() {
		t.Fatalf("stats %+v", st)
	}
	select {
	case <-lw.Resumed():
	default:
		t.Fatal("a watch event must close Resumed()")
	}
	src.Compact()
	w, err = lw.Watch(metav1.ListOptions{ResourceVersion: "1"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-w.ResultChan():
		if ev.Type != watch.Error {
			t.Fatalf("event %v, want the 410 ERROR", ev.Type)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no error event")
	}
	w.Stop()
	if st := lw.Stats(); st.Expired != 1 || st.Errors < 1 {
		t.Fatalf("stats %+v", st)
	}
	src.SetDown(true)
	if _, err := lw.Watch(metav1.ListOptions{}); !errors.Is(err, crashtest.ErrOutage) {
		t.Fatalf("outage: %v", err)
	}
	if st := lw.Stats(); st.LastError == nil {
		t.Fatal("the outage is not recorded")
	}
}

// TestRequestRelist: a requested relist ends the running watch with a 410
// ERROR event (client-go's Reflector then lists), or refuses the next
// watch with one; it is not counted as the server's expiry.
func TestRequestRelist(t *testing.T) {
	src := newSource(t, 2)
	lw := reflector.New(src, nil)
	w, err := lw.Watch(metav1.ListOptions{ResourceVersion: src.ResourceVersion()})
	if err != nil {
		t.Fatal(err)
	}
	lw.RequestRelist()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok || ev.Type != watch.Error {
			t.Fatalf("event %v (open %v), want the 410 ERROR", ev.Type, ok)
		}
		if err := apierrors.FromObject(ev.Object); !apierrors.IsResourceExpired(err) {
			t.Fatalf("error event %v, want Expired", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not end")
	}
	select {
	case _, ok := <-w.ResultChan():
		if ok {
			t.Fatal("an event after the relist's ERROR")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the watch's channel was not closed")
	}
	w.Stop()
	// Requested before a watch starts: that watch is refused.
	lw.RequestRelist()
	if _, err := lw.Watch(metav1.ListOptions{ResourceVersion: src.ResourceVersion()}); !apierrors.IsResourceExpired(err) {
		t.Fatalf("watch after RequestRelist: %v, want Expired", err)
	}
	// Only once: the next watch runs.
	w, err = lw.Watch(metav1.ListOptions{ResourceVersion: src.ResourceVersion()})
	if err != nil {
		t.Fatalf("second watch: %v", err)
	}
	w.Stop()
	if st := lw.Stats(); st.RelistsRequested != 2 || st.Expired != 0 {
		t.Fatalf("stats %+v, want 2 requested relists and no server expiry", st)
	}
}
