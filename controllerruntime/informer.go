package boltcr

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/boltinformer/boltinformer"
)

// objectKind is how an informer holds its objects, as controller-runtime
// tells its informers apart.
type objectKind string

const (
	kindTyped        objectKind = "typed"
	kindUnstructured objectKind = "unstructured"
	kindMetadata     objectKind = "metadata"
)

// kindOf returns how obj's informer holds objects (controller-runtime's
// informersByType).
func kindOf(obj runtime.Object) objectKind {
	switch obj.(type) {
	case runtime.Unstructured:
		return kindUnstructured
	case *metav1.PartialObjectMetadata, *metav1.PartialObjectMetadataList:
		return kindMetadata
	}
	return kindTyped
}

// probeTimeout bounds a scope probe (it sends nothing, but a client's
// rate limiter may make it wait).
const probeTimeout = 10 * time.Second

// runState is where an Informer is in its life.
type runState int

const (
	stateIdle     runState = iota // not run yet
	stateRunning                  // its first Run is in progress
	stateDone                     // its first Run returned
	stateReleased                 // removed before it ran: never runs
)

// Informer is the informer NewCache gives controller-runtime for one kind
// and scope: a boltinformer.Informer, saved in the cache file under Name,
// when its scope and transform are known for sure; else client-go's
// in-memory informer, and NotPersisted says why. It is built when
// controller-runtime sets its transform (right after creating it).
type Informer struct {
	c        *Cache
	lw       toolscache.ListerWatcher
	example  runtime.Object
	resync   time.Duration
	indexers toolscache.Indexers
	kind     objectKind
	gvk      schema.GroupVersionKind
	gvr      schema.GroupVersionResource
	scope    scope
	name     string
	planErr  error         // why it cannot be persisted, found by NewInformer
	done     chan struct{} // closed when its first Run returns

	// mu guards the fields below. Lock order: Cache.mu before mu.
	mu          sync.Mutex
	inner       toolscache.SharedIndexInformer // nil until built
	persistent  *boltinformer.Informer
	reason      string // why not persisted
	transformID string
	watchErr    toolscache.WatchErrorHandlerWithContext
	state       runState
	runAt       time.Time                                              // when Run was first called
	queues      map[toolscache.ResourceEventHandlerRegistration]*Queue // handlers feeding durable queues
}

var _ toolscache.SharedIndexInformer = (*Informer)(nil)

// newInformer is cache.Options.NewInformer: it learns the informer's
// kind, resource and scope (scope.go); the informer is built by
// SetTransform.
func (c *Cache) newInformer(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, indexers toolscache.Indexers) toolscache.SharedIndexInformer {
	s := &Informer{c: c, lw: lw, example: obj, resync: resync, indexers: indexers, kind: kindOf(obj), done: make(chan struct{})}
	s.planErr = s.plan()
	c.track(s)
	return s
}

// plan finds the informer's kind, resource, scope and name.
func (s *Informer) plan() error {
	var err error
	if s.kind == kindTyped {
		s.gvk, err = apiutil.GVKForObject(s.example, s.c.scheme)
		if err != nil {
			return fmt.Errorf("the kind of %T: %w", s.example, err)
		}
	} else {
		s.gvk = s.example.GetObjectKind().GroupVersionKind()
		if s.gvk.Kind == "" || s.gvk.Version == "" {
			return fmt.Errorf("the %s example has no apiVersion and kind", s.kind)
		}
	}
	mapping, err := s.c.mapper.RESTMapping(s.gvk.GroupKind(), s.gvk.Version)
	if err != nil {
		return fmt.Errorf("the resource of %s: %w", s.gvk, err)
	}
	s.gvr = mapping.Resource
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	if s.scope, err = probeScope(ctx, s.lw, mapping); err != nil {
		return err
	}
	s.name = informerName(s.kind, s.gvr, s.scope)
	return nil
}

// informerName is the informer's name in the cache file:
//
//	controller-runtime/<kind>/<group>/<version>/<resource>/<namespace>[/<selectors>]
//
// with "core" for the core group, "_all" for all namespaces (or a
// cluster-scoped resource), and a hash of the label and field selectors
// when there are any. Informers of one cache never share a name: they
// differ in kind, resource or namespace (DefaultNamespaces, ByObject), and
// two caches on one file with other selectors get other names.
func informerName(kind objectKind, gvr schema.GroupVersionResource, sc scope) string {
	group, ns := gvr.Group, sc.namespace
	if group == "" {
		group = "core"
	}
	if ns == "" {
		ns = "_all"
	}
	name := fmt.Sprintf("%s%s/%s/%s/%s/%s", informerPrefix, kind, group, gvr.Version, gvr.Resource, ns)
	if sc.label != "" || sc.field != "" {
		sum := sha256.Sum256([]byte(sc.label + "\x00" + sc.field))
		name += "/" + hex.EncodeToString(sum[:6])
	}
	return name
}

// Name returns the informer's name in the cache file ("" when its scope
// could not be learned).
func (s *Informer) Name() string { return s.name }

// GroupVersionKind returns the kind of the informer's objects.
func (s *Informer) GroupVersionKind() schema.GroupVersionKind { return s.gvk }

// RunAt returns when the informer was started (Run first called; zero
// before). With its Health's LoadedAfter, FreshAfter and LiveAfter it
// tells the moments of its start.
func (s *Informer) RunAt() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runAt
}

// Persistent returns the boltinformer.Informer behind s, or nil when s is
// kept in memory (see NotPersisted) or not built yet.
func (s *Informer) Persistent() *boltinformer.Informer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.persistent
}

// NotPersisted says why s is kept in memory ("" when it is persisted or
// not built yet).
func (s *Informer) NotPersisted() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reason
}

// get returns the informer behind s, building it (without a transform)
// if SetTransform has not.
func (s *Informer) get() toolscache.SharedIndexInformer {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inner == nil {
		s.buildLocked(nil)
	}
	return s.inner
}

// buildLocked builds the informer behind s: persistent when its scope and
// transform are known, else in memory, with the reason logged. Caller
// holds mu.
func (s *Informer) buildLocked(transform toolscache.TransformFunc) {
	c := s.c
	// base is the persistent informer's logger (it adds the key
	// "informer" itself); logger is for this file's lines.
	base := c.logger.WithValues("gvk", s.gvk.String(), "namespace", s.scope.namespace)
	logger := base.WithValues("informer", s.name)
	err := s.planErr
	if err == nil && c.opts.InMemory != nil && c.opts.InMemory(s.gvk) {
		err = errors.New("Options.InMemory names its kind")
	}
	if err == nil {
		s.transformID, err = transformID(transform, s.kind, s.gvk, s.example)
	}
	if err == nil {
		var inf *boltinformer.Informer
		inf, err = c.db.NewInformer(s.name, s.lw, s.example, s.resync, s.indexers, s.informerOptions(base))
		if err == nil {
			_ = inf.SetTransform(transform) // not started: cannot fail
			if s.watchErr != nil {
				_ = inf.SetWatchErrorHandlerWithContext(s.watchErr)
			}
			s.inner, s.persistent = inf, inf
			return
		}
		if !errors.Is(err, boltinformer.ErrInformerExists) {
			// The file failed it (a keyring that does not open it, a
			// closed DB, a read error): Start returns the error.
			err = fmt.Errorf("boltcr: informer %s: %w", s.name, err)
			logger.Error(err, "The cache file failed an informer; the cache stops")
			c.fail(err)
		}
	}
	s.reason = err.Error()
	logger.Info("Warning: informer not persisted, kept in memory (client-go's informer: a restart lists it again)", "reason", s.reason)
	inner := toolscache.NewSharedIndexInformer(s.lw, s.example, s.resync, s.indexers)
	_ = inner.SetTransform(transform)
	if s.watchErr != nil {
		_ = inner.SetWatchErrorHandlerWithContext(s.watchErr)
	}
	s.inner = inner
}

// informerOptions are the options of the persistent informer behind s.
func (s *Informer) informerOptions(logger logr.Logger) *boltinformer.InformerOptions {
	c := s.c
	o := &boltinformer.InformerOptions{
		ClusterID:          c.cluster,
		Resource:           fmt.Sprintf("%s (%s)", s.gvr, s.kind),
		ListOptions:        boltinformer.ListOptionsFingerprint(s.scope.namespace, s.scope.listOptions()),
		TransformID:        s.transformID,
		SyncPolicy:         boltinformer.SyncAfterFresh,
		FreshTimeout:       c.freshFor,
		FreshBookmarkWait:  c.bookmark,
		FreshListMax:       c.opts.FreshListMax,
		Metadata:           s.metadataLister(),
		Getter:             s.exactGetter(),
		ReplayDownDeletes:  !c.opts.NoReplayDownDeletes,
		ChangedFirst:       !c.opts.NoChangedFirst,
		PartialRelistRatio: c.opts.PartialRelistRatio,
		Memory:             c.opts.Memory,
		CacheSize:          c.opts.CacheSize,
		Scheme:             c.scheme, // the manager's: a transform may return any of its kinds
		Logger:             &logger,
	}
	if c.opts.SyncAfterDiskLoad {
		o.SyncPolicy = boltinformer.SyncAfterDiskLoad
	}
	if c.opts.Keyring != nil {
		o.Keyring = c.opts.Keyring(s.gvk)
	}
	return o
}

// metadataLister lists the metadata of exactly what s lists: its
// resource, namespace and selectors.
func (s *Informer) metadataLister() boltinformer.MetadataLister {
	sc := s.scope
	ri := s.c.meta.Resource(s.gvr)
	list := ri.List
	if sc.namespace != "" {
		list = ri.Namespace(sc.namespace).List
	}
	return boltinformer.MetadataListerFunc(func(ctx context.Context, o metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
		o.LabelSelector, o.FieldSelector = sc.label, sc.field
		return list(ctx, o)
	})
}

// exactGetter reads one object at an exact resourceVersion through s's
// own ListerWatcher (so it is decoded as s's objects are), with the
// object's namespace and name added to its field selector by the
// transport.
func (s *Informer) exactGetter() boltinformer.ObjectGetter {
	lw := toolscache.ToListerWatcherWithContext(s.lw)
	gr := s.gvr.GroupResource()
	return boltinformer.ObjectGetterFunc(func(ctx context.Context, namespace, name, rv string) (runtime.Object, error) {
		l, err := lw.ListWithContext(context.WithValue(ctx, exactKey, exactRead{namespace: namespace, name: name}),
			metav1.ListOptions{ResourceVersion: rv, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
		if err != nil {
			return nil, err
		}
		items, err := meta.ExtractList(l)
		if err != nil {
			return nil, fmt.Errorf("boltcr: exact read of %s %s/%s: %w", gr, namespace, name, err)
		}
		if len(items) != 1 {
			return nil, apierrors.NewNotFound(gr, name)
		}
		return items[0], nil
	})
}

// removed stops s for good (RemoveInformer): an informer that never ran
// gives its name back at once; a running one is waited for until ctx is
// done.
func (s *Informer) removed(ctx context.Context) error {
	s.mu.Lock()
	switch s.state {
	case stateIdle:
		s.state = stateReleased
		p := s.persistent
		s.mu.Unlock()
		if p != nil {
			return s.c.db.Release(p)
		}
		return nil
	case stateRunning:
		s.mu.Unlock()
		select {
		case <-s.done:
		case <-ctx.Done():
			s.c.logger.Info("Warning: a removed informer has not stopped yet; creating it again now keeps it in memory", "informer", s.name, "err", ctx.Err())
		}
		return nil
	default:
		s.mu.Unlock()
		return nil
	}
}

// Run runs the informer until stopCh is closed.
func (s *Informer) Run(stopCh <-chan struct{}) {
	s.RunWithContext(wait.ContextForChannel(stopCh))
}

// RunWithContext runs the informer until ctx is done. An informer removed
// before it ran returns at once.
func (s *Informer) RunWithContext(ctx context.Context) {
	inner := s.get()
	s.mu.Lock()
	state := s.state
	if state == stateIdle {
		s.state = stateRunning
		s.runAt = time.Now()
	}
	s.mu.Unlock()
	switch state {
	case stateReleased:
		return
	case stateIdle:
		defer func() {
			s.mu.Lock()
			s.state = stateDone
			s.mu.Unlock()
			close(s.done)
		}()
	}
	inner.RunWithContext(ctx)
}

// SetTransform builds the informer with the transform (controller-runtime
// calls it right after creating the informer). A second call may not
// change the transform of a persisted informer.
func (s *Informer) SetTransform(handler toolscache.TransformFunc) error {
	s.mu.Lock()
	if s.inner == nil {
		s.buildLocked(handler)
		s.mu.Unlock()
		return nil
	}
	inner, persistent, built := s.inner, s.persistent, s.transformID
	s.mu.Unlock()
	if persistent != nil {
		id, err := transformID(handler, s.kind, s.gvk, s.example)
		if err != nil || id != built {
			return fmt.Errorf("boltcr: informer %s is persisted with transform %q; it cannot change (%q, %v)", s.name, built, id, err)
		}
	}
	return inner.SetTransform(handler)
}

// SetWatchErrorHandler sets the handler called when a list or watch fails.
func (s *Informer) SetWatchErrorHandler(handler toolscache.WatchErrorHandler) error {
	return s.SetWatchErrorHandlerWithContext(func(_ context.Context, r *toolscache.Reflector, err error) { handler(r, err) })
}

// SetWatchErrorHandlerWithContext sets the handler called when a list or
// watch fails.
func (s *Informer) SetWatchErrorHandlerWithContext(handler toolscache.WatchErrorHandlerWithContext) error {
	s.mu.Lock()
	if s.inner == nil {
		s.watchErr = handler
		s.mu.Unlock()
		return nil
	}
	inner := s.inner
	s.mu.Unlock()
	return inner.SetWatchErrorHandlerWithContext(handler)
}

// AddEventHandler adds a handler.
func (s *Informer) AddEventHandler(handler toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	return s.get().AddEventHandler(handler)
}

// AddEventHandlerWithResyncPeriod adds a handler with its own resync period.
func (s *Informer) AddEventHandlerWithResyncPeriod(handler toolscache.ResourceEventHandler, resyncPeriod time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	return s.get().AddEventHandlerWithResyncPeriod(handler, resyncPeriod)
}

// AddEventHandlerWithOptions adds a handler. The handler of a
// controller-runtime Kind source whose controller has a durable queue
// (NewQueue) resumes from the queue's checkpoint when s is persisted
// (boltinformer.Informer.AddEventHandlerSince): it gets only what
// changed, appeared or vanished since. Any other handler gets every
// object.
func (s *Informer) AddEventHandlerWithOptions(handler toolscache.ResourceEventHandler, options toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	inner := s.get()
	s.mu.Lock()
	p := s.persistent
	s.mu.Unlock()
	if p == nil || !isKindSourceHandler(handler) {
		return inner.AddEventHandlerWithOptions(handler, options)
	}
	var reg toolscache.ResourceEventHandlerRegistration
	var err error
	if q := durableQueueOf(handler); q != nil {
		if reg, err = p.AddEventHandlerSince(handler, q.since(s.name), options); err != nil {
			return nil, err
		}
		q.track(s.name, reg)
		s.mu.Lock()
		if s.queues == nil {
			s.queues = map[toolscache.ResourceEventHandlerRegistration]*Queue{}
		}
		s.queues[reg] = q
		s.mu.Unlock()
	} else if reg, err = p.AddEventHandlerWithOptions(handler, options); err != nil {
		return nil, err
	}
	waitHandedOver(reg)
	return reg, nil
}

// handoverWait bounds waitHandedOver.
const handoverWait = 2 * time.Second

// waitHandedOver waits, at most handoverWait, until reg's handler has been
// handed what a late handler gets first (the deletes while down, the
// initial adds): the Kind source then finds it synced at its first look,
// instead of polling again 100 ms later (client-go's WaitForCacheSync).
// controller-runtime's handler only adds requests to its queue, which
// does not block.
func waitHandedOver(reg toolscache.ResourceEventHandlerRegistration) {
	c, ok := reg.(interface{ HasSyncedChecker() toolscache.DoneChecker })
	if !ok {
		return
	}
	t := time.NewTimer(handoverWait)
	defer t.Stop()
	select {
	case <-c.HasSyncedChecker().Done():
	case <-t.C:
	}
}

// RemoveEventHandler removes a handler.
func (s *Informer) RemoveEventHandler(handle toolscache.ResourceEventHandlerRegistration) error {
	s.mu.Lock()
	q := s.queues[handle]
	delete(s.queues, handle)
	s.mu.Unlock()
	if q != nil {
		q.untrack(handle)
	}
	return s.get().RemoveEventHandler(handle)
}

// GetStore returns the informer's store.
func (s *Informer) GetStore() toolscache.Store { return s.get().GetStore() }

// GetIndexer returns the informer's indexer.
func (s *Informer) GetIndexer() toolscache.Indexer { return s.get().GetIndexer() }

// AddIndexers adds indexes (controller-runtime's IndexField).
func (s *Informer) AddIndexers(indexers toolscache.Indexers) error {
	return s.get().AddIndexers(indexers)
}

// GetController returns the informer's controller.
func (s *Informer) GetController() toolscache.Controller { return s.get().GetController() }

// HasSynced reports whether the informer has synced (for a persisted
// one: fresh, or loaded with Options.SyncAfterDiskLoad).
func (s *Informer) HasSynced() bool { return s.get().HasSynced() }

// HasSyncedChecker returns a DoneChecker for HasSynced.
func (s *Informer) HasSyncedChecker() toolscache.DoneChecker { return s.get().HasSyncedChecker() }

// LastSyncResourceVersion returns the reflector's last resourceVersion.
func (s *Informer) LastSyncResourceVersion() string { return s.get().LastSyncResourceVersion() }

// IsStopped reports whether the informer has stopped.
func (s *Informer) IsStopped() bool { return s.get().IsStopped() }
