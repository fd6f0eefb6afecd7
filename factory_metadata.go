package boltinformer

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
)

// MetadataFactory is a Factory's metadata-only informers: a client-go
// metadatainformer.SharedInformerFactory whose informers, one per
// resource, hold *metav1.PartialObjectMetadata objects (name, namespace,
// UID, labels, owner references, finalizers...: what a garbage collector
// or a quota controller reads) and persist them in the factory's file,
// beside its typed informers. Get it with Factory.MetadataFactory.
//
// Its informers have the factory's identity, options, keyrings, scopes and
// transform (a resource's metadata informer is scoped as its typed
// informer would be), and are named "metadata/<group/version/resource>"
// in the file. ForResource keeps client-go's own metadata informer, in
// memory, when it cannot build a persistent one (the reason is logged).
//
// Its Start and WaitForCacheSync concern its own informers; the Factory's
// concern the others. Factory.Shutdown waits for both (they share the
// file, which is closed after); MetadataFactory.Shutdown for its own.
type MetadataFactory struct {
	f      *Factory
	client metadata.Interface
}

var _ metadatainformer.SharedInformerFactory = (*MetadataFactory)(nil)

// metadataState is a Factory's MetadataFactory and its informers. The
// Factory's mu guards it.
type metadataState struct {
	factory      *MetadataFactory
	byGVR        map[schema.GroupVersionResource]*factoryEntry
	shuttingDown bool
	wg           sync.WaitGroup
}

// MetadataFactory returns the factory's metadata-only informer factory,
// listing and watching through client: nil means the factory's own
// metadata client, over the REST transport of its client (NewFactory, or
// a clientset with a REST transport). A Factory has one: later calls
// return it, and fail if they name another client.
func (f *Factory) MetadataFactory(client metadata.Interface) (*MetadataFactory, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := &f.metadataInformers
	if st.factory != nil {
		if client != nil && client != st.factory.client {
			return nil, errors.New("boltinformer: factory: MetadataFactory was already made with another metadata client")
		}
		return st.factory, nil
	}
	if client == nil {
		if f.meta == nil {
			return nil, fmt.Errorf("boltinformer: factory: metadata informers need a metadata client: the client %T has no REST transport", f.client)
		}
		client = f.meta
	}
	st.factory = &MetadataFactory{f: f, client: client}
	st.byGVR = map[schema.GroupVersionResource]*factoryEntry{}
	return st.factory, nil
}

// ForResource returns the shared metadata-only informer of gvr, building
// it on first use: persistent, or client-go's own in memory when the
// factory cannot persist it (the reason logged; PersistentInformer of
// the Factory does not report on metadata informers: see Informers).
func (m *MetadataFactory) ForResource(gvr schema.GroupVersionResource) informers.GenericInformer {
	f := m.f
	f.mu.Lock()
	defer f.mu.Unlock()
	st := &f.metadataInformers
	if e := st.byGVR[gvr]; e != nil {
		return &genericInformer{informer: e.informer, resource: gvr.GroupResource()}
	}
	e := &factoryEntry{metadata: true, gvr: gvr, typ: reflect.TypeFor[*metav1.PartialObjectMetadata]()}
	ns, labelSelector, fieldSelector := selectorsOf(f.scope(gvr.GroupResource()))
	inf, err := m.persistentLocked(gvr, ns, labelSelector, fieldSelector)
	if err != nil {
		e.inMemory = fmt.Errorf("%w: metadata of %s: %w", ErrNotPersistent, gvr, err)
		f.logger.Error(err, "Metadata informer kept in memory (client-go's own): it is not persisted", "resource", gvr.String())
		e.informer = metadatainformer.NewFilteredMetadataInformer(m.client, gvr, ns, f.opts.ResyncPeriod, namespaceIndexers, func(o *metav1.ListOptions) {
			o.LabelSelector, o.FieldSelector = labelSelector, fieldSelector
		}).Informer()
	} else {
		e.informer, e.persistent = inf, inf
		f.byName[inf.Name()] = e
	}
	f.setTransformLocked(e)
	st.byGVR[gvr] = e
	f.entries = append(f.entries, e)
	return &genericInformer{informer: e.informer, resource: gvr.GroupResource()}
}

// persistentLocked builds the persistent metadata informer of gvr in
// namespace ns with these selectors. The caller holds the factory's mu.
func (m *MetadataFactory) persistentLocked(gvr schema.GroupVersionResource, ns, labelSelector, fieldSelector string) (*Informer, error) {
	f := m.f
	if f.memoryOnly != nil {
		return nil, f.memoryOnly
	}
	name := "metadata/" + fileName(gvr)
	if e := f.byName[name]; e != nil {
		return nil, fmt.Errorf("the factory's informer %q already lists the metadata of %s", name, gvr)
	}
	ri := m.client.Resource(gvr).Namespace(ns)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector, o.FieldSelector = labelSelector, fieldSelector
			return ri.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector, o.FieldSelector = labelSelector, fieldSelector
			return ri.Watch(ctx, o)
		},
	}
	io := f.informerOptionsLocked(gvr, ns, labelSelector, fieldSelector)
	io.Metadata = MetadataListerFunc(func(ctx context.Context, o metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
		o.LabelSelector, o.FieldSelector = labelSelector, fieldSelector
		return ri.List(ctx, o)
	})
	io.Getter = exactGetter(gvr.GroupResource(), labelSelector, fieldSelector, func(ctx context.Context, ns string, o metav1.ListOptions) (runtime.Object, error) {
		return m.client.Resource(gvr).Namespace(ns).List(ctx, o)
	})
	return f.db.NewInformer(name, cache.ToListWatcherWithWatchListSemantics(lw, m.client), &metav1.PartialObjectMetadata{}, f.opts.ResyncPeriod, namespaceIndexers, io)
}

// Start runs the metadata informers not yet started, until stopCh is
// closed. It does not block. After Shutdown (its own or the Factory's) it
// starts nothing.
func (m *MetadataFactory) Start(stopCh <-chan struct{}) {
	ctx := wait.ContextForChannel(stopCh)
	f := m.f
	f.mu.Lock()
	defer f.mu.Unlock()
	st := &f.metadataInformers
	if f.shuttingDown || st.shuttingDown {
		return
	}
	for _, e := range f.entries {
		if !e.metadata || e.started {
			continue
		}
		e.started = true
		st.wg.Go(func() { e.informer.RunWithContext(ctx) })
	}
}

// WaitForCacheSync waits until every started metadata informer has synced
// or stopCh is closed, and reports each one's state by resource.
func (m *MetadataFactory) WaitForCacheSync(stopCh <-chan struct{}) map[schema.GroupVersionResource]bool {
	f := m.f
	f.mu.Lock()
	var started []*factoryEntry
	for _, e := range f.entries {
		if e.metadata && e.started {
			started = append(started, e)
		}
	}
	f.mu.Unlock()
	checkers := make([]cache.DoneChecker, 0, len(started))
	for _, e := range started {
		checkers = append(checkers, e.informer.HasSyncedChecker())
	}
	cache.WaitFor(wait.ContextForChannel(stopCh), "", checkers...)
	out := make(map[schema.GroupVersionResource]bool, len(started))
	for _, e := range started {
		out[e.gvr] = e.informer.HasSynced()
	}
	return out
}

// Shutdown marks the metadata factory as shutting down (Start then starts
// nothing) and waits for its started informers to return: cancel the
// context given to Start first.
func (m *MetadataFactory) Shutdown() {
	f := m.f
	f.mu.Lock()
	f.metadataInformers.shuttingDown = true
	f.mu.Unlock()
	f.metadataInformers.wg.Wait()
}
