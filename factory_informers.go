package boltinformer

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/informers/internalinterfaces"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"
)

// InformerFor returns the shared informer of obj's type, building it with
// newFunc on first use: client-go's internalinterfaces.SharedInformerFactory
// method, which the generated informers (f.Core().V1().Pods().Informer(),
// corev1informers.New(f, ns, tweak)...) call. The informer is persistent
// (an *Informer) when the factory can build one for exactly what newFunc's
// informer lists (see Factory), else newFunc's own, in memory, with the
// reason logged (PersistentInformer returns it). newFunc must build a new
// informer over the client it is given.
func (f *Factory) InformerFor(obj runtime.Object, newFunc internalinterfaces.NewInformerFunc) cache.SharedIndexInformer {
	f.mu.Lock()
	defer f.mu.Unlock()
	typ := reflect.TypeOf(obj)
	if e := f.byType[typ]; e != nil {
		return e.informer
	}
	e := &factoryEntry{typ: typ}
	inf, memFunc, err := f.persistentLocked(obj, newFunc)
	if err != nil {
		e.inMemory = fmt.Errorf("%w: %T: %w", ErrNotPersistent, obj, err)
		f.logger.Error(err, "Informer kept in memory (client-go's own): it is not persisted", "type", fmt.Sprintf("%T", obj))
		e.informer = memFunc(f.client, f.opts.ResyncPeriod)
	} else {
		e.informer, e.persistent = inf, inf
		f.byName[inf.Name()] = e
	}
	f.setTransformLocked(e)
	f.byType[typ] = e
	f.entries = append(f.entries, e)
	return e.informer
}

// persistentLocked builds the persistent informer of what newFunc's
// informer lists, or says why not and returns the NewInformerFunc of the
// informer to keep in memory instead: newFunc, or, when a Scopes entry
// replaces the factory's scope that newFunc asked for, the same informer
// in the entry's scope. The caller holds mu.
func (f *Factory) persistentLocked(obj runtime.Object, newFunc internalinterfaces.NewInformerFunc) (*Informer, internalinterfaces.NewInformerFunc, error) {
	if f.memoryOnly != nil {
		return nil, newFunc, f.memoryOnly
	}
	tr, ok := typedResourceFor(obj)
	if !ok {
		return nil, newFunc, fmt.Errorf("no typed client of kubernetes.Interface lists %T", obj)
	}
	gvks, _, err := scheme.Scheme.ObjectKinds(obj)
	if err != nil || len(gvks) == 0 {
		return nil, newFunc, fmt.Errorf("%T is not a type of client-go's scheme: %w", obj, err)
	}
	if f.prober == nil {
		if f.prober, err = newProber(); err != nil {
			return nil, newFunc, err
		}
	}
	f.probing.Store(true)
	sc, err := f.prober.probe(newFunc, f.opts.ResyncPeriod)
	f.probing.Store(false)
	if err != nil {
		return nil, newFunc, fmt.Errorf("what the informer lists is not known: %w", err)
	}
	if sc.gvr.GroupVersion() != gvks[0].GroupVersion() {
		return nil, newFunc, fmt.Errorf("the informer lists %s, not objects of %s like %T", sc.gvr, gvks[0].GroupVersion(), obj)
	}
	if kind, ok := builtinKinds()[sc.gvr]; !ok || kind != gvks[0] {
		return nil, newFunc, fmt.Errorf("the informer lists %s, not %s like %T", sc.gvr, gvks[0].Kind, obj)
	}
	// A generated informer of the group accessors asks for the factory's
	// scope: a Scopes entry naming its resource replaces it.
	defNS, defLabels, defFields := selectorsOf(f.defaultScope())
	if entry := f.scopeEntry(sc.gvr.GroupResource()); entry != nil && sc.namespace == defNS && sc.labelSelector == defLabels && sc.fieldSelector == defFields {
		sc.namespace, sc.labelSelector, sc.fieldSelector = selectorsOf(entry)
		newFunc = f.newInformerFunc(obj, tr, entry)
	}
	if !tr.namespaced && sc.namespace != "" {
		return nil, newFunc, fmt.Errorf("the informer lists %s in namespace %q, and %T is cluster-scoped", sc.gvr, sc.namespace, obj)
	}
	name := fileName(sc.gvr)
	if e := f.byName[name]; e != nil {
		return nil, newFunc, fmt.Errorf("the factory's informer %q (of %v) already lists %s", name, e.typ, sc.gvr)
	}
	selectors := func(o *metav1.ListOptions) { o.LabelSelector, o.FieldSelector = sc.labelSelector, sc.fieldSelector }
	io := f.informerOptionsLocked(sc.gvr, sc.namespace, sc.labelSelector, sc.fieldSelector)
	io.Getter = exactGetter(sc.gvr.GroupResource(), sc.labelSelector, sc.fieldSelector, func(ctx context.Context, ns string, o metav1.ListOptions) (runtime.Object, error) {
		return tr.list(ctx, f.client, ns, o)
	})
	inf, err := f.db.NewInformer(name, tr.listWatch(f.client, sc.namespace, selectors), obj, f.opts.ResyncPeriod, sc.indexers, io)
	return inf, newFunc, err
}

// DefaultFactoryFreshBookmarkWait is a Factory's informers'
// FreshBookmarkWait unless FactoryOptions.Informer sets one: with
// SyncAfterFresh, a warm start is fresh at a bookmark of its resumed watch
// (about a second in, in a live cluster), at about a hundredth of the
// apiserver's CPU and bytes of the metadata list of every object, which
// decides after this long without one (docs/BENCHMARKS.md, "Fresh
// resume").
const DefaultFactoryFreshBookmarkWait = 5 * time.Second

// informerOptionsLocked returns the options of gvr's informer listing
// namespace ns with these selectors: the factory's defaults, its
// identity, the metadata lister of that scope when the factory has a
// metadata client, and the keyring of the Keyrings entry that names gvr's
// resource, if any (parseKeyrings left at most one keyring per resource).
// The caller holds mu.
func (f *Factory) informerOptionsLocked(gvr schema.GroupVersionResource, ns, labelSelector, fieldSelector string) *InformerOptions {
	io := f.opts.Informer
	if io.FreshBookmarkWait == 0 {
		io.FreshBookmarkWait = DefaultFactoryFreshBookmarkWait
	}
	io.ClusterID = f.cluster
	io.Resource = gvr.String()
	io.ListOptions = ListOptionsFingerprint(ns, metav1.ListOptions{LabelSelector: labelSelector, FieldSelector: fieldSelector})
	if f.meta != nil {
		ri := f.meta.Resource(gvr).Namespace(ns)
		io.Metadata = MetadataListerFunc(func(ctx context.Context, o metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
			o.LabelSelector, o.FieldSelector = labelSelector, fieldSelector
			return ri.List(ctx, o)
		})
	}
	for _, e := range f.keyrings {
		if e.matches(gvr.GroupResource()) {
			io.Keyring = e.keyring
			f.matched[e] = true
		}
	}
	return &io
}

// exactGetter reads one object as it was at an exact resourceVersion
// within the selectors: a LIST in its namespace with a metadata.name field
// selector (and the informer's) and resourceVersionMatch=Exact.
func exactGetter(gr schema.GroupResource, labelSelector, fieldSelector string, list func(ctx context.Context, namespace string, o metav1.ListOptions) (runtime.Object, error)) ObjectGetter {
	return ObjectGetterFunc(func(ctx context.Context, namespace, name, rv string) (runtime.Object, error) {
		sel := fields.OneTermEqualSelector("metadata.name", name).String()
		if fieldSelector != "" {
			sel = fieldSelector + "," + sel
		}
		o := metav1.ListOptions{LabelSelector: labelSelector, FieldSelector: sel, ResourceVersion: rv, ResourceVersionMatch: metav1.ResourceVersionMatchExact}
		l, err := list(ctx, namespace, o)
		if err != nil {
			return nil, err
		}
		items, err := meta.ExtractList(l)
		if err != nil {
			return nil, fmt.Errorf("boltinformer: exact read of %s %s/%s: %w", gr, namespace, name, err)
		}
		if len(items) != 1 {
			return nil, apierrors.NewNotFound(gr, name)
		}
		return items[0], nil
	})
}

// selectorsOf returns sc's namespace and the selectors its
// TweakListOptions sets.
func selectorsOf(sc *Scope) (ns, labelSelector, fieldSelector string) {
	var o metav1.ListOptions
	sc.tweak(&o)
	return sc.Namespace, o.LabelSelector, o.FieldSelector
}

var namespaceIndexers = cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}

// newInformerFunc returns the NewInformerFunc of a built-in type, as
// client-go's generated informers build it, in scope sc: a client-go
// shared informer over the typed client given, with the namespace index.
func (f *Factory) newInformerFunc(example runtime.Object, tr typedResource, sc *Scope) internalinterfaces.NewInformerFunc {
	return func(c kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		return cache.NewSharedIndexInformer(tr.listWatch(c, sc.Namespace, sc.TweakListOptions), example, resync, namespaceIndexers)
	}
}

// typedScope returns the scope of example's informers (see scope).
func (f *Factory) typedScope(example runtime.Object) *Scope {
	gvks, _, err := scheme.Scheme.ObjectKinds(example)
	if err != nil || len(gvks) == 0 {
		return f.defaultScope()
	}
	plural, _ := meta.UnsafeGuessKindToResource(gvks[0])
	return f.scope(plural.GroupResource())
}

// PersistentInformer returns the persistent informer of example's type
// (e.g. &corev1.Pod{}): the one InformerFor built for it (by a generated
// accessor: f.Core().V1().Pods()), or one built now with the factory's
// namespace and TweakListOptions (or its Scopes entry's) and the
// namespace index, as the accessor would. An informer the factory keeps in memory is an error
// wrapping ErrNotPersistent, with the reason.
func (f *Factory) PersistentInformer(example runtime.Object) (*Informer, error) {
	tr, ok := typedResourceFor(example)
	if !ok {
		return nil, fmt.Errorf("boltinformer: factory: %T is not a built-in type (no typed client lists it): use DynamicInformer", example)
	}
	f.InformerFor(example, f.newInformerFunc(example, tr, f.typedScope(example)))
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.byType[reflect.TypeOf(example)]
	if e.persistent == nil {
		return nil, e.inMemory
	}
	return e.persistent, nil
}

// DynamicInformer returns the shared dynamic informer of a resource (e.g.
// a CRD), whose objects are *unstructured.Unstructured, with the factory's
// namespace and TweakListOptions (or its Scopes entry's), creating it on
// first use with indexers
// (nil: the namespace index). It needs a REST transport: NewFactory, or a
// clientset that has one.
func (f *Factory) DynamicInformer(gvr schema.GroupVersionResource, indexers cache.Indexers) (*Informer, error) {
	name := "dynamic/" + fileName(gvr)
	f.mu.Lock()
	defer f.mu.Unlock()
	if e := f.byName[name]; e != nil {
		return e.persistent, nil
	}
	if f.memoryOnly != nil {
		return nil, f.memoryOnly
	}
	if f.dynamic == nil {
		return nil, fmt.Errorf("boltinformer: factory: dynamic informers need a REST transport, which the client %T has not", f.client)
	}
	ns, labelSelector, fieldSelector := selectorsOf(f.scope(gvr.GroupResource()))
	ri := f.dynamic.Resource(gvr).Namespace(ns)
	selectors := func(o *metav1.ListOptions) { o.LabelSelector, o.FieldSelector = labelSelector, fieldSelector }
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			selectors(&o)
			return ri.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			selectors(&o)
			return ri.Watch(ctx, o)
		},
	}
	if indexers == nil {
		indexers = namespaceIndexers
	}
	io := f.informerOptionsLocked(gvr, ns, labelSelector, fieldSelector)
	io.Getter = exactGetter(gvr.GroupResource(), labelSelector, fieldSelector, func(ctx context.Context, ns string, o metav1.ListOptions) (runtime.Object, error) {
		return f.dynamic.Resource(gvr).Namespace(ns).List(ctx, o)
	})
	inf, err := f.db.NewInformer(name, cache.ToListWatcherWithWatchListSemantics(lw, f.dynamic), &unstructured.Unstructured{}, f.opts.ResyncPeriod, indexers, io)
	if err != nil {
		return nil, err
	}
	e := &factoryEntry{informer: inf, persistent: inf, dynamic: true, typ: reflect.TypeOf(&unstructured.Unstructured{})}
	f.setTransformLocked(e)
	f.byName[name] = e
	f.entries = append(f.entries, e)
	return inf, nil
}

// builtinKinds maps the built-in resources of client-go's scheme to their
// kinds.
var builtinKinds = sync.OnceValue(func() map[schema.GroupVersionResource]schema.GroupVersionKind {
	out := map[schema.GroupVersionResource]schema.GroupVersionKind{}
	for gvk := range scheme.Scheme.AllKnownTypes() {
		if gvk.Version == runtime.APIVersionInternal {
			continue
		}
		plural, _ := meta.UnsafeGuessKindToResource(gvk)
		out[plural] = gvk
	}
	return out
})

// ForResource gives generic access to the shared informer of a built-in
// resource: the same informer as its group accessor's (f.ForResource of
// pods and f.Core().V1().Pods().Informer() share one), as client-go's
// factory does. Any other resource is an error, as in client-go: use
// DynamicInformer.
func (f *Factory) ForResource(resource schema.GroupVersionResource) (informers.GenericInformer, error) {
	gvk, ok := builtinKinds()[resource]
	if !ok {
		return nil, fmt.Errorf("no informer found for %v", resource)
	}
	example, err := scheme.Scheme.New(gvk)
	if err != nil {
		return nil, fmt.Errorf("no informer found for %v: %w", resource, err)
	}
	tr, ok := typedResourceFor(example)
	if !ok {
		return nil, fmt.Errorf("no informer found for %v", resource)
	}
	return &genericInformer{informer: f.InformerFor(example, f.newInformerFunc(example, tr, f.scope(resource.GroupResource()))), resource: resource.GroupResource()}, nil
}

// genericInformer is an informers.GenericInformer.
type genericInformer struct {
	informer cache.SharedIndexInformer
	resource schema.GroupResource
}

func (g *genericInformer) Informer() cache.SharedIndexInformer { return g.informer }

func (g *genericInformer) Lister() cache.GenericLister {
	return cache.NewGenericLister(g.informer.GetIndexer(), g.resource)
}

// InformerName returns FactoryOptions.InformerName (nil by default):
// generated informers register their resource under it, and those the
// factory keeps in memory (client-go's own) publish client-go's informer
// metrics under it. Persistent informers publish boltinformer's metrics
// (Options.Registerer) instead.
func (f *Factory) InformerName() *cache.InformerName {
	if f.probing.Load() {
		return nil // the probe's throwaway informer must not take the name
	}
	return f.opts.InformerName
}

// setTransformLocked gives e's informer, not yet started, the factory's
// transform (FactoryOptions.Transform). The caller holds mu.
func (f *Factory) setTransformLocked(e *factoryEntry) {
	if f.opts.Transform == nil {
		return
	}
	if err := e.informer.SetTransform(f.opts.Transform); err != nil {
		// Only a started informer refuses it, and e's was just built.
		f.logger.Error(err, "The factory's transform could not be set", "type", e.typ.String())
	}
}

// Start runs every informer not yet started, until stopCh is closed. It
// does not block; Shutdown waits for them.
func (f *Factory) Start(stopCh <-chan struct{}) {
	f.StartWithContext(wait.ContextForChannel(stopCh))
}

// StartWithContext runs every informer not yet started, until ctx is
// done. It does not block; Shutdown waits for them. After Shutdown it
// starts nothing.
func (f *Factory) StartWithContext(ctx context.Context) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.shuttingDown {
		return
	}
	for _, e := range f.keyrings {
		if !f.matched[e] {
			f.logger.Info("Warning: a Keyrings entry matches none of the factory's informers (yet); check its spelling", "entry", e.entry)
		}
	}
	for _, e := range f.entries {
		if e.started || e.metadata {
			continue
		}
		e.started = true
		f.wg.Go(func() { e.informer.RunWithContext(ctx) })
	}
}

// Shutdown marks the factory as shutting down (Start, and its
// MetadataFactory's, then start nothing), waits for every started
// informer to return, its metadata informers' too (cancel the contexts
// given to Start first), and releases FactoryOptions.InformerName, as
// client-go's factory does. The DB stays open: Close it after.
func (f *Factory) Shutdown() {
	f.mu.Lock()
	f.shuttingDown = true
	f.mu.Unlock()
	f.wg.Wait()
	f.metadataInformers.wg.Wait()
	f.opts.InformerName.Release()
}

// WaitForCacheSync waits until every started informer has synced or
// stopCh is closed, and reports each one's state by type (dynamic
// informers together, under *unstructured.Unstructured: synced when all
// are).
func (f *Factory) WaitForCacheSync(stopCh <-chan struct{}) map[reflect.Type]bool {
	return f.WaitForCacheSyncWithContext(wait.ContextForChannel(stopCh)).Synced
}

// WaitForCacheSyncWithContext waits until every started informer has
// synced or ctx is done, and reports each one's state by type (as
// WaitForCacheSync), with Err the cause of ctx when one has not.
func (f *Factory) WaitForCacheSyncWithContext(ctx context.Context) cache.SyncResult {
	f.mu.Lock()
	var started []*factoryEntry
	for _, e := range f.entries {
		if e.started && !e.metadata {
			started = append(started, e)
		}
	}
	f.mu.Unlock()
	checkers := make([]cache.DoneChecker, 0, len(started))
	for _, e := range started {
		checkers = append(checkers, e.informer.HasSyncedChecker())
	}
	cache.WaitFor(ctx, "", checkers...)
	res := cache.SyncResult{Synced: make(map[reflect.Type]bool, len(started))}
	failed := false
	for _, e := range started {
		synced := e.informer.HasSynced()
		if prev, seen := res.Synced[e.typ]; seen {
			synced = synced && prev
		}
		res.Synced[e.typ] = synced
		failed = failed || !synced
	}
	if failed {
		res.Err = context.Cause(ctx)
		if res.Err == nil {
			res.Err = errors.New("boltinformer: informers not synced")
		}
	}
	return res
}
