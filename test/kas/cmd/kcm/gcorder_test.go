//go:build kcm

package main

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// fakeReg is a registration whose HasSynced the test decides; waited is
// closed when someone asks for its DoneChecker (waitOwners does).
type fakeReg struct {
	synced     chan struct{}
	waitedOnce sync.Once
	waited     chan struct{}
}

func (r *fakeReg) HasSynced() bool {
	select {
	case <-r.synced:
		return true
	default:
		return false
	}
}

func (r *fakeReg) HasSyncedChecker() cache.DoneChecker {
	r.waitedOnce.Do(func() { close(r.waited) })
	return r
}
func (r *fakeReg) Name() string          { return "fake" }
func (r *fakeReg) Done() <-chan struct{} { return r.synced }

// fakeInformer records the handlers registered on it.
type fakeInformer struct {
	cache.SharedIndexInformer // nil: only the AddEventHandler methods are called
	mu                        sync.Mutex
	handlers                  []cache.ResourceEventHandler
	regs                      []*fakeReg
}

func (i *fakeInformer) AddEventHandlerWithOptions(h cache.ResourceEventHandler, _ cache.HandlerOptions) (cache.ResourceEventHandlerRegistration, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	r := &fakeReg{synced: make(chan struct{}), waited: make(chan struct{})}
	i.handlers = append(i.handlers, h)
	i.regs = append(i.regs, r)
	return r, nil
}

func (i *fakeInformer) AddEventHandlerWithResyncPeriod(h cache.ResourceEventHandler, _ time.Duration) (cache.ResourceEventHandlerRegistration, error) {
	return i.AddEventHandlerWithOptions(h, cache.HandlerOptions{})
}

type fakeGeneric struct{ i *fakeInformer }

func (g fakeGeneric) Informer() cache.SharedIndexInformer { return g.i }
func (g fakeGeneric) Lister() cache.GenericLister         { return nil }

// fakeFactory is an informerfactory.InformerFactory of fakeInformers.
type fakeFactory struct {
	mu  sync.Mutex
	inf map[schema.GroupVersionResource]*fakeInformer
}

func (f *fakeFactory) ForResource(r schema.GroupVersionResource) (informers.GenericInformer, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.inf[r] == nil {
		f.inf[r] = &fakeInformer{}
	}
	return fakeGeneric{f.inf[r]}, nil
}

func (f *fakeFactory) Start(<-chan struct{}) {}

var (
	podsGVR        = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	replicaSetsGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "replicasets"}
	deploymentsGVR = schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
)

// eventLog is handlers that append "<name> <verb>" to one log.
type eventLog struct {
	mu  sync.Mutex
	got []string
}

func (l *eventLog) handler(name string, delivered chan<- struct{}) cache.ResourceEventHandler {
	add := func(s string) {
		l.mu.Lock()
		l.got = append(l.got, s)
		l.mu.Unlock()
		if delivered != nil {
			delivered <- struct{}{}
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { add(name + " add") },
		UpdateFunc: func(any, any) { add(name + " update") },
		DeleteFunc: func(any) { add(name + " delete") },
	}
}

func (l *eventLog) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.got)
}

// register registers h for r through f, as the graph builder does.
func register(t *testing.T, f *ownersFirst, r schema.GroupVersionResource, h cache.ResourceEventHandler) {
	t.Helper()
	gi, err := f.ForResource(r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gi.Informer().AddEventHandlerWithResyncPeriod(h, 0); err != nil {
		t.Fatal(err)
	}
}

// TestOwnersFirstPodsAfterReplicaSets: the graph builder registers Pods'
// handler before ReplicaSets' (its map order), and the Pods' informer
// delivers first (a warm start holds every object). The Pod's add reaches
// the graph builder only after ReplicaSets' handler has synced, so the
// ReplicaSet is in the graph before its Pods: no virtual owner, no GET.
func TestOwnersFirstPodsAfterReplicaSets(t *testing.T) {
	ff := &fakeFactory{inf: map[schema.GroupVersionResource]*fakeInformer{}}
	f := newOwnersFirst(t.Context(), ff, time.Hour)
	var log eventLog
	podDelivered := make(chan struct{}, 1)
	register(t, f, podsGVR, log.handler("pod", podDelivered))
	register(t, f, replicaSetsGVR, log.handler("rs", nil))
	f.Start(nil)
	pods, rs := ff.inf[podsGVR], ff.inf[replicaSetsGVR]

	go pods.handlers[0].OnAdd("pod-a", true) // the listener's own goroutine
	select {
	case <-podDelivered:
		t.Fatalf("the Pod reached the graph builder before ReplicaSets' handler synced: %v", log.list())
	case <-rs.regs[0].waited:
	}
	rs.handlers[0].OnAdd("rs-a", true)
	close(rs.regs[0].synced)
	<-podDelivered
	pods.handlers[0].OnDelete("pod-a") // later events do not wait again
	<-podDelivered
	if got, want := log.list(), []string{"rs add", "pod add", "pod delete"}; !slices.Equal(got, want) {
		t.Fatalf("graph builder got %v, want %v", got, want)
	}
}

// TestOwnersFirstRootsDoNotWait: a resource without owners in ownersOf
// (Deployments) is delivered at once, before any Start.
func TestOwnersFirstRootsDoNotWait(t *testing.T) {
	ff := &fakeFactory{inf: map[schema.GroupVersionResource]*fakeInformer{}}
	f := newOwnersFirst(t.Context(), ff, time.Hour)
	var log eventLog
	register(t, f, deploymentsGVR, log.handler("deploy", nil))
	ff.inf[deploymentsGVR].handlers[0].OnAdd("d", true) // would block for an hour
	// ReplicaSets wait for Deployments' handler, synced here.
	register(t, f, replicaSetsGVR, log.handler("rs", nil))
	f.Start(nil)
	close(ff.inf[deploymentsGVR].regs[0].synced)
	ff.inf[replicaSetsGVR].handlers[0].OnAdd("rs", true)
	if got, want := log.list(), []string{"deploy add", "rs add"}; !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// TestOwnersFirstBounded: owners that never sync, or a factory never
// started, hold a dependent's events only until the bound, or until the
// context ends.
func TestOwnersFirstBounded(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start bool
		bound time.Duration
		stop  bool
	}{
		{name: "owners never synced", start: true, bound: time.Millisecond},
		{name: "never started", bound: time.Millisecond},
		{name: "context done", start: true, bound: time.Hour, stop: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			ff := &fakeFactory{inf: map[schema.GroupVersionResource]*fakeInformer{}}
			f := newOwnersFirst(ctx, ff, tc.bound)
			var log eventLog
			register(t, f, podsGVR, log.handler("pod", nil))
			register(t, f, replicaSetsGVR, log.handler("rs", nil))
			if tc.start {
				f.Start(nil)
			}
			if tc.stop {
				cancel()
			}
			ff.inf[podsGVR].handlers[0].OnAdd("pod", true) // returns: bounded
			if got := log.list(); !slices.Equal(got, []string{"pod add"}) {
				t.Fatalf("got %v", got)
			}
		})
	}
}

// TestOwnersOfAcyclic: no resource waits, through ownersOf, on itself.
func TestOwnersOfAcyclic(t *testing.T) {
	const (
		unseen = iota
		visiting
		done
	)
	state := map[schema.GroupResource]int{}
	var visit func(gr schema.GroupResource, path []schema.GroupResource)
	visit = func(gr schema.GroupResource, path []schema.GroupResource) {
		switch state[gr] {
		case visiting:
			t.Fatalf("ownersOf has a cycle: %v -> %v", path, gr)
		case done:
			return
		}
		state[gr] = visiting
		for _, o := range ownersOf[gr] {
			visit(o, append(path, gr))
		}
		state[gr] = done
	}
	for gr := range ownersOf {
		visit(gr, nil)
	}
}
