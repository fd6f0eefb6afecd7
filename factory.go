package boltinformer

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// FactoryOptions configure NewFactory. A nil *FactoryOptions means the
// defaults.
type FactoryOptions struct {
	// Namespace limits every informer to one namespace ("" means all).
	Namespace string
	// TweakListOptions edits every list and watch request (e.g. a
	// spec.nodeName field selector). Its effect is fingerprinted into each
	// informer's identity.
	TweakListOptions func(*metav1.ListOptions)
	// ResyncPeriod is the default handler resync period (0: none).
	ResyncPeriod time.Duration
	// ClusterID identifies the cluster, as the caller knows it. "" means:
	// as Identity says.
	ClusterID string
	// Identity selects the cluster identity when ClusterID is "":
	// IdentityNamespaceUID (the default: the kube-system namespace's UID,
	// read within LookupTimeout, unchecked when the server cannot be
	// reached, an error when it answers otherwise) or IdentityEndpoint (a
	// fingerprint of the server URL and CA bundle, no API call). See
	// ClusterIdentity.
	Identity ClusterIdentity
	// LookupTimeout bounds the kube-system lookup, retries of 429 and 5xx
	// answers included. Default 3s; negative is an error.
	LookupTimeout time.Duration
	// Informer are the defaults for every informer (Memory, CacheSize,
	// SyncPolicy, TransformID, Keyring, ...). Its ClusterID, Resource and
	// ListOptions are the factory's to set, per informer: NewFactory
	// rejects them.
	Informer InformerOptions
	// Keyrings encrypt at rest the resources they name: each informer of a
	// resource an entry names gets that entry's keyring. An entry is
	// written as kubectl names resources, in any case:
	//
	//	"secrets", "secret"        a built-in resource, in any group
	//	"deployments.apps"         resource.group (custom resources: the CRD's name)
	//	"deployments.v1.apps"      resource.version.group; "secrets.v1." for the core group
	//	"v1/secrets", "apps/v1/deployments"
	//	"/v1, Resource=secrets"    schema.GroupVersionResource.String()
	//
	// An entry matches every version of its resource. NewFactory rejects an
	// entry that can never match (a name that is not a built-in resource
	// unless it is group-qualified, a built-in group without that
	// resource, a dotless group that is not built in), a nil or invalid
	// keyring, and two entries that name a common resource with different
	// keyrings. A custom resource's entry is checked for its form only (its
	// resources are known to the server alone): Start logs a warning for
	// an entry that no informer has matched.
	Keyrings map[string]*Keyring
	// Scopes give the resources they name their own namespace and list
	// options, instead of Namespace and TweakListOptions: one factory
	// watches, say, the Pods bound to one node in every namespace
	// ("pods": {TweakListOptions: a spec.nodeName field selector}) and the
	// ConfigMaps and Secrets of one namespace (Namespace "edge"). Entries
	// name resources as Keyrings entries do; NewFactory rejects an entry
	// that can never match, and two entries that name a common resource.
	Scopes map[string]Scope
}

// Factory builds informers for many resources on one DB (one file, one
// group-commit loop), from a rest.Config: typed ones for built-in types and
// dynamic (unstructured) ones for CRDs.
type Factory struct {
	db       *DB
	config   *rest.Config
	opts     FactoryOptions
	keyrings []*keyringEntry
	scopes   []*scopeEntry
	cluster  string
	dynamic  dynamic.Interface
	meta     metadata.Interface

	// mu guards informers, started and matched.
	mu        sync.Mutex
	informers map[string]*Informer
	started   map[string]bool
	matched   map[*keyringEntry]bool // Keyrings entries an informer used
	wg        sync.WaitGroup
}

// NewFactory returns a factory for db and config.
func NewFactory(db *DB, config *rest.Config, opts *FactoryOptions) (*Factory, error) {
	o := FactoryOptions{}
	if opts != nil {
		o = *opts
	}
	if o.LookupTimeout == 0 {
		o.LookupTimeout = 3 * time.Second
	}
	if o.LookupTimeout < 0 {
		return nil, fmt.Errorf("boltinformer: factory: LookupTimeout %s is negative", o.LookupTimeout)
	}
	// The factory sets these per informer: a value given would be ignored.
	for field, v := range map[string]string{
		"Informer.ClusterID (use ClusterID or Identity)":            o.Informer.ClusterID,
		"Informer.Resource (the factory names each informer's)":     o.Informer.Resource,
		"Informer.ListOptions (use Namespace and TweakListOptions)": o.Informer.ListOptions,
	} {
		if v != "" {
			return nil, fmt.Errorf("boltinformer: factory: FactoryOptions.%s is set by the factory for each informer; %q would be ignored", field, v)
		}
	}
	keyrings, err := parseKeyrings(o.Keyrings)
	if err != nil {
		return nil, err
	}
	scopes, err := parseScopes(o.Scopes)
	if err != nil {
		return nil, err
	}
	dc, err := dynamic.NewForConfig(config)
	if err != nil {
		return nil, fmt.Errorf("boltinformer: factory: %w", err)
	}
	mc, err := metadata.NewForConfig(config)
	if err != nil {
		return nil, fmt.Errorf("boltinformer: factory: %w", err)
	}
	f := &Factory{db: db, config: rest.CopyConfig(config), opts: o, keyrings: keyrings, scopes: scopes, dynamic: dc, meta: mc,
		informers: map[string]*Informer{}, started: map[string]bool{}, matched: map[*keyringEntry]bool{}}
	switch {
	case o.ClusterID != "":
		f.cluster = o.ClusterID
	case o.Identity == IdentityNamespaceUID:
		f.cluster, err = f.lookupClusterID()
	case o.Identity == IdentityEndpoint:
		f.cluster, err = EndpointIdentity(config)
	default:
		err = fmt.Errorf("boltinformer: factory: unknown Identity %v", o.Identity)
	}
	if err != nil {
		return nil, err
	}
	return f, nil
}

// ClusterID returns the cluster identity the factory's informers use: ""
// when the server could not be reached to look it up (an offline start,
// IdentityNamespaceUID), whose informers resume their files unchecked.
func (f *Factory) ClusterID() string { return f.cluster }

func (f *Factory) restClient(gv schema.GroupVersion) (*rest.RESTClient, error) {
	cfg := rest.CopyConfig(f.config)
	cfg.GroupVersion = &gv
	cfg.APIPath = "/apis"
	if gv.Group == "" {
		cfg.APIPath = "/api"
	}
	cfg.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	if cfg.UserAgent == "" {
		cfg.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	return rest.RESTClientFor(cfg)
}

// metadataLister lists gvr's metadata with its scope's namespace and
// list options: what a warm start diffs against its cache to know when it
// is fresh.
func (f *Factory) metadataLister(gvr schema.GroupVersionResource) MetadataLister {
	sc := f.scope(gvr.GroupResource())
	ri := f.meta.Resource(gvr).Namespace(sc.Namespace)
	return MetadataListerFunc(func(ctx context.Context, o metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
		sc.tweak(&o)
		return ri.List(ctx, o)
	})
}

// exactGetter reads one object as it was at an exact resourceVersion with
// its scope's list options: a LIST in its namespace with a metadata.name
// field selector (and the scope's) and resourceVersionMatch=Exact.
func (f *Factory) exactGetter(gr schema.GroupResource, list func(ctx context.Context, namespace string, o metav1.ListOptions) (runtime.Object, error)) ObjectGetter {
	sc := f.scope(gr)
	return ObjectGetterFunc(func(ctx context.Context, namespace, name, rv string) (runtime.Object, error) {
		var o metav1.ListOptions
		sc.tweak(&o)
		sel := fields.OneTermEqualSelector("metadata.name", name).String()
		if o.FieldSelector != "" {
			sel = o.FieldSelector + "," + sel
		}
		o.FieldSelector, o.ResourceVersion, o.ResourceVersionMatch = sel, rv, metav1.ResourceVersionMatchExact
		o.Limit, o.Continue = 0, ""
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

// informerOptionsLocked returns the options of gvr's informer: the factory's
// defaults, its identity, and the keyring of the Keyrings entry that
// names gvr's resource, if any (parseKeyrings left at most one keyring per
// resource). The caller holds mu.
func (f *Factory) informerOptionsLocked(gvr schema.GroupVersionResource) *InformerOptions {
	io := f.opts.Informer
	io.ClusterID = f.cluster
	io.Resource = gvr.String()
	sc := f.scope(gvr.GroupResource())
	var lo metav1.ListOptions
	sc.tweak(&lo)
	io.ListOptions = ListOptionsFingerprint(sc.Namespace, lo)
	io.Metadata = f.metadataLister(gvr)
	for _, e := range f.keyrings {
		if e.matches(gvr.GroupResource()) {
			io.Keyring = e.keyring
			f.matched[e] = true
		}
	}
	return &io
}

var defaultIndexers = cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}

// InformerFor returns the shared informer for a typed built-in object (e.g.
// &corev1.Pod{}), creating it on first use. resource is the plural
// resource name; "" guesses it from the kind. Nil indexers means the
// namespace index.
func (f *Factory) InformerFor(example runtime.Object, resource string, indexers cache.Indexers) (*Informer, error) {
	gvks, _, err := scheme.Scheme.ObjectKinds(example)
	if err != nil || len(gvks) == 0 {
		return nil, fmt.Errorf("boltinformer: factory: %T is not a registered built-in type: %w", example, err)
	}
	gvk := gvks[0]
	if resource == "" {
		plural, _ := meta.UnsafeGuessKindToResource(gvk)
		resource = plural.Resource
	}
	gvr := gvk.GroupVersion().WithResource(resource)
	name := gvr.GroupVersion().String() + "/" + resource
	f.mu.Lock()
	defer f.mu.Unlock()
	if inf := f.informers[name]; inf != nil {
		return inf, nil
	}
	rc, err := f.restClient(gvk.GroupVersion())
	if err != nil {
		return nil, fmt.Errorf("boltinformer: factory: %w", err)
	}
	sc := f.scope(gvr.GroupResource())
	lw := cache.ToListWatcherWithWatchListSemantics(cache.NewFilteredListWatchFromClient(rc, resource, sc.Namespace, sc.tweak), rc)
	if indexers == nil {
		indexers = defaultIndexers
	}
	io := f.informerOptionsLocked(gvr)
	io.Getter = f.exactGetter(gvr.GroupResource(), func(ctx context.Context, ns string, o metav1.ListOptions) (runtime.Object, error) {
		return rc.Get().Namespace(ns).Resource(resource).VersionedParams(&o, scheme.ParameterCodec).Do(ctx).Get()
	})
	inf, err := f.db.NewInformer(name, lw, example, f.opts.ResyncPeriod, indexers, io)
	if err != nil {
		return nil, err
	}
	f.informers[name] = inf
	return inf, nil
}

// ForResource returns the shared dynamic informer of a resource (e.g. a
// CRD), whose objects are *unstructured.Unstructured.
func (f *Factory) ForResource(gvr schema.GroupVersionResource, indexers cache.Indexers) (*Informer, error) {
	name := "dynamic/" + gvr.GroupVersion().String() + "/" + gvr.Resource
	f.mu.Lock()
	defer f.mu.Unlock()
	if inf := f.informers[name]; inf != nil {
		return inf, nil
	}
	sc := f.scope(gvr.GroupResource())
	ri := f.dynamic.Resource(gvr).Namespace(sc.Namespace)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			sc.tweak(&o)
			return ri.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			sc.tweak(&o)
			return ri.Watch(ctx, o)
		},
	}
	if indexers == nil {
		indexers = defaultIndexers
	}
	io := f.informerOptionsLocked(gvr)
	io.Getter = f.exactGetter(gvr.GroupResource(), func(ctx context.Context, ns string, o metav1.ListOptions) (runtime.Object, error) {
		return f.dynamic.Resource(gvr).Namespace(ns).List(ctx, o)
	})
	inf, err := f.db.NewInformer(name, cache.ToListWatcherWithWatchListSemantics(lw, f.dynamic), &unstructured.Unstructured{}, f.opts.ResyncPeriod, indexers, io)
	if err != nil {
		return nil, err
	}
	f.informers[name] = inf
	return inf, nil
}

// Start runs every informer not yet started, until ctx is done. It does
// not block; Shutdown waits for them.
func (f *Factory) Start(ctx context.Context) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range f.keyrings {
		if !f.matched[e] {
			f.db.logger.Info("Warning: a Keyrings entry matches none of the factory's informers (yet); check its spelling", "entry", e.entry)
		}
	}
	for name, inf := range f.informers {
		if f.started[name] {
			continue
		}
		f.started[name] = true
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			inf.RunWithContext(ctx)
		}()
	}
}

// WaitForCacheSync waits until every started informer has synced or ctx
// is done, and reports each one's state by name.
func (f *Factory) WaitForCacheSync(ctx context.Context) map[string]bool {
	f.mu.Lock()
	infs := map[string]*Informer{}
	for name, inf := range f.informers {
		if f.started[name] {
			infs[name] = inf
		}
	}
	f.mu.Unlock()
	out := map[string]bool{}
	names := make([]string, 0, len(infs))
	for n := range infs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		out[n] = cache.WaitForCacheSync(ctx.Done(), infs[n].HasSynced)
	}
	return out
}

// Informers returns the factory's informers by name.
func (f *Factory) Informers() map[string]*Informer {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]*Informer, len(f.informers))
	for k, v := range f.informers {
		out[k] = v
	}
	return out
}

// Shutdown waits for every started informer to return (cancel the context
// given to Start first). The DB stays open: Close it after.
func (f *Factory) Shutdown() { f.wg.Wait() }
