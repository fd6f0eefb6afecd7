package boltinformer_test

// Helpers shared by the informer tests: a recording handler, a gate in
// front of a crashtest.Source, running and waiting.

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/boltinformer/boltinformer/recovery/crashtest"
)

// waitTimeout bounds every wait of these tests. It is a deadline for a
// hang, not a performance threshold.
const waitTimeout = 60 * time.Second

// quietLogger drops the informers' Info logs (errors still show).
var quietLogger = klog.Background().V(5)

// waitFor polls cond until it holds, failing the test after waitTimeout.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", waitTimeout, what)
		}
		time.Sleep(time.Millisecond)
	}
}

func newPodSource() *crashtest.Source {
	return crashtest.NewSource(func() runtime.Object { return &corev1.PodList{} })
}

// runInformer runs inf until the returned stop is called (or the test
// ends); stop waits for Run to return.
func runInformer(t testing.TB, inf cache.SharedIndexInformer) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		inf.RunWithContext(ctx)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}
	t.Cleanup(stop)
	return stop
}

// event is one handler call.
type event struct {
	Kind    string // "add", "update" or "delete"
	Key     string
	Initial bool // OnAdd's isInInitialList
	Unknown bool // the delete carried a cache.DeletedFinalStateUnknown
	Obj     any  // the added, new or deleted object (a DFSU's Obj)
	Old     any  // an update's old object
}

func (e event) String() string {
	s := e.Kind + " " + e.Key
	if e.Initial {
		s += " initial"
	}
	if e.Unknown {
		s += " final-state-unknown"
	}
	if e.Old != nil {
		s += " old-rv=" + rvOf(e.Old)
	}
	if e.Obj != nil {
		s += " rv=" + rvOf(e.Obj)
	}
	return s
}

func rvOf(obj any) string {
	m, err := meta.Accessor(obj)
	if err != nil {
		return "?"
	}
	return m.GetResourceVersion()
}

func rvInt(t testing.TB, rv string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(rv, 10, 64)
	if err != nil {
		t.Fatalf("resourceVersion %q: %v", rv, err)
	}
	return n
}

func keyOf(obj any) string {
	k, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		panic(err)
	}
	return k
}

// evRecorder is a cache.ResourceEventHandler that records every call.
type evRecorder struct {
	name string

	// mu guards evs and keys.
	mu   sync.Mutex
	evs  []event
	keys map[string]int // calls per key
}

func newEvRecorder(name string) *evRecorder { return &evRecorder{name: name, keys: map[string]int{}} }

func (r *evRecorder) add(e event) {
	r.mu.Lock()
	r.evs = append(r.evs, e)
	r.keys[e.Key]++
	r.mu.Unlock()
}

func (r *evRecorder) OnAdd(obj any, isInInitialList bool) {
	r.add(event{Kind: "add", Key: keyOf(obj), Initial: isInInitialList, Obj: obj})
}

func (r *evRecorder) OnUpdate(old, obj any) {
	r.add(event{Kind: "update", Key: keyOf(obj), Obj: obj, Old: old})
}

func (r *evRecorder) OnDelete(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		r.add(event{Kind: "delete", Key: d.Key, Unknown: true, Obj: d.Obj})
		return
	}
	r.add(event{Kind: "delete", Key: keyOf(obj), Obj: obj})
}

func (r *evRecorder) events() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]event(nil), r.evs...)
}

func (r *evRecorder) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.evs)
}

// saw reports whether a call for key was recorded.
func (r *evRecorder) saw(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.keys[key] > 0
}

// normalize orders what client-go leaves in map order: the adds of an
// initial list (a late handler gets the store's List) and the
// DeletedFinalStateUnknown deletions of one relist. Everything else keeps
// its order.
func normalize(evs []event) []event {
	out := append([]event(nil), evs...)
	byKey := func(s []event) { sort.SliceStable(s, func(i, j int) bool { return s[i].Key < s[j].Key }) }
	i := 0
	for i < len(out) && out[i].Kind == "add" && out[i].Initial {
		i++
	}
	byKey(out[:i])
	for i < len(out) {
		if !out[i].Unknown {
			i++
			continue
		}
		j := i
		for j < len(out) && out[j].Unknown {
			j++
		}
		byKey(out[i:j])
		i = j
	}
	return out
}

// diffEvents returns "" when the two normalized sequences are equal
// (objects compared with apiequality.Semantic), else the first difference.
func diffEvents(want, got []event) string {
	want, got = normalize(want), normalize(got)
	for i := 0; i < len(want) || i < len(got); i++ {
		if i >= len(want) || i >= len(got) {
			var w, g string
			if i < len(want) {
				w = want[i].String()
			}
			if i < len(got) {
				g = got[i].String()
			}
			return fmt.Sprintf("length %d, want %d; event %d: want %q, got %q", len(got), len(want), i, w, g)
		}
		w, g := want[i], got[i]
		if w.Kind != g.Kind || w.Key != g.Key || w.Initial != g.Initial || w.Unknown != g.Unknown ||
			!apiequality.Semantic.DeepEqual(w.Obj, g.Obj) || !apiequality.Semantic.DeepEqual(w.Old, g.Old) {
			lo := max(0, i-3)
			return fmt.Sprintf("event %d: want %q, got %q\nwant around: %v\ngot around:  %v", i, w, g, want[lo:min(len(want), i+4)], got[lo:min(len(got), i+4)])
		}
	}
	return ""
}

// model replays a handler's sequence and reports the first call that is
// not consistent with the objects it was given before: an add of a key it
// has, an update or delete of one it has not, an update whose old object
// is not the one it has, a resourceVersion going back. It starts empty (a
// new handler).
type model struct {
	objs    map[string]any
	initial bool // still in the leading run of initial adds
}

func newModel() *model { return &model{objs: map[string]any{}, initial: true} }

func (m *model) apply(t testing.TB, e event) error {
	t.Helper()
	if e.Initial && !m.initial {
		return fmt.Errorf("%s: an initial-list add after other events", e)
	}
	if !e.Initial {
		m.initial = false
	}
	cur, has := m.objs[e.Key]
	switch e.Kind {
	case "add":
		if has {
			return fmt.Errorf("%s: add of a key the handler has (rv %s)", e, rvOf(cur))
		}
		m.objs[e.Key] = e.Obj
	case "update":
		if !has {
			return fmt.Errorf("%s: update of a key the handler does not have", e)
		}
		if !apiequality.Semantic.DeepEqual(cur, e.Old) {
			return fmt.Errorf("%s: old object is not the one last given (rv %s)", e, rvOf(cur))
		}
		if rvInt(t, rvOf(e.Obj)) < rvInt(t, rvOf(cur)) {
			return fmt.Errorf("%s: resourceVersion went back from %s", e, rvOf(cur))
		}
		m.objs[e.Key] = e.Obj
	case "delete":
		if !has {
			return fmt.Errorf("%s: delete of a key the handler does not have", e)
		}
		if e.Unknown {
			if e.Obj != nil && !apiequality.Semantic.DeepEqual(cur, e.Obj) {
				return fmt.Errorf("%s: final state is not the object last given (rv %s)", e, rvOf(cur))
			}
		} else if rvInt(t, rvOf(e.Obj)) <= rvInt(t, rvOf(cur)) {
			return fmt.Errorf("%s: deletion resourceVersion not after %s", e, rvOf(cur))
		}
		delete(m.objs, e.Key)
	}
	return nil
}

// checkConsistent replays evs in a new model and returns it.
func checkConsistent(t testing.TB, name string, evs []event) *model {
	t.Helper()
	m := newModel()
	for i, e := range evs {
		if err := m.apply(t, e); err != nil {
			t.Fatalf("handler %s, event %d: %v", name, i, err)
		}
	}
	return m
}

// diffObjects compares a set of objects with the truth, by key, with
// apiequality.Semantic; "" when equal.
func diffObjects(want map[string]runtime.Object, got []any) string {
	gotBy := map[string]any{}
	for _, o := range got {
		gotBy[keyOf(o)] = o
	}
	var diffs []string
	for k, w := range want {
		g, ok := gotBy[k]
		switch {
		case !ok:
			diffs = append(diffs, "missing "+k+" rv="+rvOf(w))
		case !apiequality.Semantic.DeepEqual(w, g):
			diffs = append(diffs, fmt.Sprintf("differs %s: rv %s, want rv %s", k, rvOf(g), rvOf(w)))
		}
	}
	for k, g := range gotBy {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, "extra "+k+" rv="+rvOf(g))
		}
	}
	sort.Strings(diffs)
	if len(diffs) == 0 {
		return ""
	}
	if len(diffs) > 10 {
		diffs = append(diffs[:10], fmt.Sprintf("... %d more", len(diffs)-10))
	}
	return fmt.Sprint(diffs)
}

// modelObjects returns a model's objects as a list.
func (m *model) list() []any {
	out := make([]any, 0, len(m.objs))
	for _, o := range m.objs {
		out = append(out, o)
	}
	return out
}

// gateLW is a ListerWatcher in front of a Source that can hold new watches
// (so that they start only after the Source compacted past their
// resourceVersion) and counts the lists it passes on.
type gateLW struct {
	src *crashtest.Source

	lists   atomic.Int64 // first pages only
	watches atomic.Int64

	// mu guards hold.
	mu   sync.Mutex
	hold chan struct{} // non-nil: Watch waits until it is closed
}

var (
	_ cache.ListerWatcherWithContext = (*gateLW)(nil)
	_ cache.ListerWatcher            = (*gateLW)(nil)
)

func newGate(src *crashtest.Source) *gateLW { return &gateLW{src: src} }

// IsWatchListSemanticsUnSupported: like the Source, LIST then WATCH.
func (g *gateLW) IsWatchListSemanticsUnSupported() bool { return true }

func (g *gateLW) List(o metav1.ListOptions) (runtime.Object, error) {
	return g.ListWithContext(context.Background(), o)
}

func (g *gateLW) ListWithContext(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
	if o.Continue == "" {
		g.lists.Add(1)
	}
	return g.src.ListWithContext(ctx, o)
}

func (g *gateLW) Watch(o metav1.ListOptions) (watch.Interface, error) {
	return g.WatchWithContext(context.Background(), o)
}

func (g *gateLW) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	g.mu.Lock()
	h := g.hold
	g.mu.Unlock()
	if h != nil {
		select {
		case <-h:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	g.watches.Add(1)
	return g.src.WatchWithContext(ctx, o)
}

// holdWatches makes new watches wait until release.
func (g *gateLW) holdWatches() {
	g.mu.Lock()
	if g.hold == nil {
		g.hold = make(chan struct{})
	}
	g.mu.Unlock()
}

func (g *gateLW) release() {
	g.mu.Lock()
	if g.hold != nil {
		close(g.hold)
		g.hold = nil
	}
	g.mu.Unlock()
}

// storeHas reports whether store holds key at resourceVersion rv.
func storeHas(store cache.Store, key, rv string) bool {
	obj, ok, err := store.GetByKey(key)
	return err == nil && ok && rvOf(obj) == rv
}

// bumpPod returns a changed copy of pod (a label and a restart count).
func bumpPod(obj runtime.Object, n int) *corev1.Pod {
	p := obj.(*corev1.Pod).DeepCopy()
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	p.Labels["rev"] = strconv.Itoa(n)
	if len(p.Status.ContainerStatuses) > 0 {
		p.Status.ContainerStatuses[0].RestartCount++
	}
	return p
}

// sortedKeys returns the keys of m in order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
