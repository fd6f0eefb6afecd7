//go:build kcm

package main

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/controller-manager/pkg/informerfactory"
	"k8s.io/klog/v2"
)

// ownersOf names, for a resource whose objects usually have owners, the
// resources of those owners (built-in controllers' ownerReferences). The
// table is acyclic (TestOwnersOfAcyclic): a handler waits only on the
// handlers of resources above it, so no wait waits on itself.
var ownersOf = map[schema.GroupResource][]schema.GroupResource{
	{Resource: "pods"}: {
		{Group: "apps", Resource: "replicasets"},
		{Group: "apps", Resource: "statefulsets"},
		{Group: "apps", Resource: "daemonsets"},
		{Group: "batch", Resource: "jobs"},
		{Resource: "replicationcontrollers"},
		{Resource: "nodes"},
	},
	{Group: "apps", Resource: "replicasets"}:                {{Group: "apps", Resource: "deployments"}},
	{Group: "apps", Resource: "controllerrevisions"}:        {{Group: "apps", Resource: "statefulsets"}, {Group: "apps", Resource: "daemonsets"}},
	{Group: "batch", Resource: "jobs"}:                      {{Group: "batch", Resource: "cronjobs"}},
	{Group: "discovery.k8s.io", Resource: "endpointslices"}: {{Resource: "services"}},
	{Group: "resource.k8s.io", Resource: "resourceclaims"}:  {{Resource: "pods"}},
}

// ownersFirst is the informer factory of the garbage collector's graph
// builder in persistent mode. The graph builder turns every owner it has
// not seen yet into a "virtual" node and queues it for attemptToDelete,
// whose workers then read it, and its owners, from the API server
// (at --kube-api-qps x 2). Client-go's informers list from the API
// server, and the small lists of owners usually reach the graph first.
// Persistent informers hold every object at start, and the graph builder's
// handlers get them all at once: Pods came before their ReplicaSets, and
// a warm restart of 1,000 Deployments made 2,000 GETs (10 s).
//
// Here the garbage collector's handler of a resource in ownersOf waits,
// once, before its first event, until the garbage collector's handlers
// of the owners' resources have handled their initial lists
// (registration HasSynced): the owners' adds are in the graph builder's
// queue first. Only the garbage collector's own handlers wait, and only
// on each other along the acyclic table; they do nothing but queue. The
// wait is bounded (bound) and ends with ctx.
type ownersFirst struct {
	informerfactory.InformerFactory
	ctx   context.Context
	bound time.Duration

	startOnce sync.Once
	started   chan struct{} // closed by the first Start: the first monitors are registered

	mu   sync.Mutex // guards regs
	regs map[schema.GroupResource][]cache.ResourceEventHandlerRegistration
}

func newOwnersFirst(ctx context.Context, f informerfactory.InformerFactory, bound time.Duration) *ownersFirst {
	return &ownersFirst{InformerFactory: f, ctx: ctx, bound: bound, started: make(chan struct{}), regs: map[schema.GroupResource][]cache.ResourceEventHandlerRegistration{}}
}

// Start starts the informers. The graph builder calls it after it has
// registered a set of monitors (startMonitors): the first call says the
// first set of owners' handlers is registered.
func (f *ownersFirst) Start(stopCh <-chan struct{}) {
	f.InformerFactory.Start(stopCh)
	f.startOnce.Do(func() { close(f.started) })
}

// ForResource wraps the informer of resource.
func (f *ownersFirst) ForResource(resource schema.GroupVersionResource) (informers.GenericInformer, error) {
	gi, err := f.InformerFactory.ForResource(resource)
	if err != nil {
		return nil, err
	}
	return orderedGeneric{GenericInformer: gi, f: f, gr: resource.GroupResource()}, nil
}

// waitOwners blocks until the handlers registered for gr's owners have
// synced, or f.bound has passed, or f.ctx is done.
func (f *ownersFirst) waitOwners(gr schema.GroupResource) {
	owners := ownersOf[gr]
	if len(owners) == 0 {
		return
	}
	start := time.Now()
	timer := time.NewTimer(f.bound)
	defer timer.Stop()
	logger := klog.FromContext(f.ctx)
	select {
	case <-f.started:
	case <-timer.C:
		logger.Info("Garbage collector: owners' handlers not registered in time, going on", "resource", gr, "bound", f.bound)
		return
	case <-f.ctx.Done():
		return
	}
	for _, o := range owners {
		f.mu.Lock()
		regs := append([]cache.ResourceEventHandlerRegistration(nil), f.regs[o]...)
		f.mu.Unlock()
		for _, r := range regs {
			select {
			case <-r.HasSyncedChecker().Done():
			case <-timer.C:
				logger.Info("Garbage collector: owners' handlers not synced in time, going on", "resource", gr, "owner", o, "bound", f.bound)
				return
			case <-f.ctx.Done():
				return
			}
		}
	}
	logger.V(2).Info("Garbage collector: owners' initial adds queued first", "resource", gr, "waited", time.Since(start))
}

// orderedGeneric is a GenericInformer whose Informer orders handlers.
type orderedGeneric struct {
	informers.GenericInformer
	f  *ownersFirst
	gr schema.GroupResource
}

func (g orderedGeneric) Informer() cache.SharedIndexInformer {
	return orderedInformer{SharedIndexInformer: g.GenericInformer.Informer(), f: g.f, gr: g.gr}
}

// orderedInformer registers handlers that wait for their owners' first.
type orderedInformer struct {
	cache.SharedIndexInformer
	f  *ownersFirst
	gr schema.GroupResource
}

func (i orderedInformer) AddEventHandler(h cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	return i.AddEventHandlerWithOptions(h, cache.HandlerOptions{})
}

func (i orderedInformer) AddEventHandlerWithResyncPeriod(h cache.ResourceEventHandler, resync time.Duration) (cache.ResourceEventHandlerRegistration, error) {
	return i.AddEventHandlerWithOptions(h, cache.HandlerOptions{ResyncPeriod: &resync})
}

func (i orderedInformer) AddEventHandlerWithOptions(h cache.ResourceEventHandler, o cache.HandlerOptions) (cache.ResourceEventHandlerRegistration, error) {
	oh := &orderedHandler{h: h, wait: func() { i.f.waitOwners(i.gr) }}
	reg, err := i.SharedIndexInformer.AddEventHandlerWithOptions(oh, o)
	if err != nil {
		return nil, err
	}
	i.f.mu.Lock()
	i.f.regs[i.gr] = append(i.f.regs[i.gr], reg)
	i.f.mu.Unlock()
	return reg, nil
}

// orderedHandler calls wait once, before its first event, then h.
type orderedHandler struct {
	h    cache.ResourceEventHandler
	once sync.Once
	wait func()
}

func (o *orderedHandler) OnAdd(obj any, isInInitialList bool) {
	o.once.Do(o.wait)
	o.h.OnAdd(obj, isInInitialList)
}

func (o *orderedHandler) OnUpdate(oldObj, newObj any) {
	o.once.Do(o.wait)
	o.h.OnUpdate(oldObj, newObj)
}

func (o *orderedHandler) OnDelete(obj any) {
	o.once.Do(o.wait)
	o.h.OnDelete(obj)
}
