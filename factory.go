package boltinformer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// FactoryOptions configure NewFactory and NewFactoryForClient. A nil
// *FactoryOptions means the defaults.
type FactoryOptions struct {
	// Namespace limits every informer to one namespace ("" means all): the
	// namespace the group accessors (f.Core(), ...) give client-go's
	// generated informers, and PersistentInformer's and DynamicInformer's.
	Namespace string
	// TweakListOptions edits every list and watch request of those
	// informers (e.g. a spec.nodeName field selector). The label and field
	// selectors it sets are part of each informer's identity; other list
	// options it sets (a limit, a timeout) are not carried over to the
	// persistent informers, whose reflector chooses them.
	TweakListOptions func(*metav1.ListOptions)
	// ResyncPeriod is the default handler resync period (0: none): the
	// defaultResync of informers.NewSharedInformerFactory.
	ResyncPeriod time.Duration
	// ClusterID identifies the cluster, as the caller knows it. "" means:
	// as Identity says.
	ClusterID string
	// Identity selects the cluster identity when ClusterID is "":
	// IdentityNamespaceUID (the default: the kube-system namespace's UID,
	// read within LookupTimeout, unchecked when the server cannot be
	// reached, an error when it answers otherwise) or IdentityEndpoint (a
	// fingerprint of the server URL and CA bundle, no API call; NewFactory
	// only). See ClusterIdentity.
	Identity ClusterIdentity
	// LookupTimeout bounds the kube-system lookup, retries of 429 and 5xx
	// answers included. Default 3s; negative is an error.
	LookupTimeout time.Duration
	// Informer are the defaults for every informer (Memory, CacheSize,
	// SyncPolicy, TransformID, Keyring, ...). Its ClusterID, Resource and
	// ListOptions are the factory's to set, per informer: NewFactory
	// rejects them. Its FreshBookmarkWait 0 means
	// DefaultFactoryFreshBookmarkWait (with SyncAfterFresh, a warm start
	// is fresh by a bookmark of its resumed watch); negative means none
	// (fresh by a metadata list of every object at once).
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
	// Transform is applied to every object of every informer of the
	// factory (typed, dynamic and metadata-only: it gets each of these
	// types) before it is stored, as informers.WithTransform does for
	// client-go's factory; kube-controller-manager trims managedFields.
	// Objects are stored after it, so Informer.TransformID must name it:
	// NewFactory refuses a Transform without one, and a file saved under
	// another TransformID is not resumed (a cold start).
	Transform cache.TransformFunc
	// InformerName is what InformerName returns, as
	// informers.WithInformerName gives client-go's factory: the generated
	// informers that the factory keeps in memory (client-go's own)
	// register their resource under it and publish client-go's informer
	// metrics; the persistent ones publish boltinformer's (Options.
	// Registerer). Shutdown releases it.
	InformerName *cache.InformerName
	// Scopes give the resources they name their own namespace and list
	// options, instead of Namespace and TweakListOptions: one factory
	// watches, say, the Pods bound to one node in every namespace
	// ("pods": {TweakListOptions: a spec.nodeName field selector}) and the
	// ConfigMaps and Secrets of one namespace (Namespace "edge"). Entries
	// name resources as Keyrings entries do; NewFactory rejects an entry
	// that can never match, and two entries that name a common resource.
	// They apply to PersistentInformer, DynamicInformer, ForResource and
	// the group accessors (f.Core().V1().Pods(): a generated informer that
	// asks for the factory's Namespace and TweakListOptions gets its
	// entry's instead); a generated informer built with a scope of its own
	// (corev1informers.New(f, ns, tweak)) gets what it asked for.
	Scopes map[string]Scope
}

// Factory builds informers for many resources on one DB (one file, one
// group-commit loop). It is a client-go informers.SharedInformerFactory:
// the group accessors (f.Core().V1().Pods(), f.Apps().V1().Deployments(),
// ...) and every package of client-go's generated informer tree that takes
// an internalinterfaces.SharedInformerFactory (corev1informers.New(f, ns,
// tweak)) build persistent informers, and a program written for
// informers.NewSharedInformerFactory(client, resync) switches with one
// line: boltinformer.NewSharedInformerFactory(db, client, resync).
//
// InformerFor learns what a generated informer lists (its resource,
// namespace, and the label and field selectors its tweak sets) by building
// it over a clientset of the factory's own whose transport answers
// nothing, and running it until its first request; it then builds a
// persistent informer of that scope over the factory's client, with a
// metadata lister and an exact getter (see InformerOptions.Metadata and
// Getter) when the client has a REST transport. When it cannot (an object
// of a type the clientset does not list, an informer that makes no request
// through the client it is given, the cluster identity not established,
// the file refusing the informer), it keeps client-go's own informer, in
// memory, with the reason logged and returned by PersistentInformer: never
// another scope's file. Like client-go's factory, it shares one informer
// per Go type: the first InformerFor of a type decides its scope.
//
// DynamicInformer builds informers of any resource (e.g. a CRD) whose
// objects are *unstructured.Unstructured; PersistentInformer returns the
// persistent informer of a type, for its Health, Flush, Observe and
// moments.
type Factory struct {
	db       *DB
	logger   klog.Logger
	opts     FactoryOptions
	keyrings []*keyringEntry
	scopes   []*scopeEntry
	cluster  string
	// client lists and watches the typed informers: the caller's
	// (NewFactoryForClient), or one built from the config (NewFactory).
	client kubernetes.Interface
	// dynamic and meta are nil when the client has no REST transport (the
	// fake clientset): no dynamic informers, no metadata lists.
	dynamic dynamic.Interface
	meta    metadata.Interface
	// memoryOnly, when set, is why every informer is kept in memory
	// (NewSharedInformerFactory could not build a persistent factory).
	memoryOnly error

	// probing is set while the prober builds an informer: InformerName
	// returns nil then, so that the throwaway informer registers nothing
	// under the name.
	probing atomic.Bool

	// mu guards everything below, and serializes probes. Lock order: mu
	// before the DB's locks.
	mu           sync.Mutex
	prober       *prober
	entries      []*factoryEntry
	byType       map[reflect.Type]*factoryEntry
	byName       map[string]*factoryEntry // persistent informers, by file name
	matched      map[*keyringEntry]bool   // Keyrings entries an informer used
	shuttingDown bool
	wg           sync.WaitGroup
	// meta is the state of the metadata-only informers (MetadataFactory).
	metadataInformers metadataState
}

// factoryEntry is one informer of the factory.
type factoryEntry struct {
	informer   cache.SharedIndexInformer
	persistent *Informer // nil when in memory
	inMemory   error     // why it is in memory
	typ        reflect.Type
	dynamic    bool
	// metadata marks a MetadataFactory's informer, of resource gvr: its
	// Start, not the Factory's, starts it.
	metadata bool
	gvr      schema.GroupVersionResource
	started  bool
}

var _ informers.SharedInformerFactory = (*Factory)(nil)

// NewFactory returns a factory for db whose informers list and watch
// through config: typed ones for built-in types (the client-go accessors,
// InformerFor, PersistentInformer) and dynamic ones (DynamicInformer). It
// establishes the cluster identity first (see FactoryOptions.Identity).
func NewFactory(db *DB, config *rest.Config, opts *FactoryOptions) (*Factory, error) {
	if config == nil {
		return nil, errors.New("boltinformer: factory: nil rest.Config")
	}
	config = rest.CopyConfig(config)
	if config.UserAgent == "" {
		config.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	hc, err := rest.HTTPClientFor(config)
	if err != nil {
		return nil, fmt.Errorf("boltinformer: factory: %w", err)
	}
	client, err := kubernetes.NewForConfigAndClient(config, hc)
	if err != nil {
		return nil, fmt.Errorf("boltinformer: factory: %w", err)
	}
	return newFactory(db, client, config, hc, config, opts)
}

// NewFactoryForClient returns a factory for db whose typed informers list
// and watch through client: a clientset (kubernetes.NewForConfig), a
// wrapper of one, or the fake clientset of
// k8s.io/client-go/kubernetes/fake for tests.
//
// With a clientset that has a REST transport (its CoreV1().RESTClient()
// is a *rest.RESTClient), the factory reuses its HTTP client (credentials,
// TLS, user agent) and its rate limiter for metadata-only lists and
// informers and for dynamic informers. The cluster identity is
// IdentityNamespaceUID's lookup through client (or ClusterID);
// IdentityEndpoint needs a rest.Config (NewFactory).
//
// A client without a REST transport (the fake clientset) is for tests:
// its objects carry no resourceVersion and its watch does not replay
// deletions from one, so a file filled from it must never be resumed.
// The factory persists its informers (the same code paths as in
// production) under a cluster identity of its own, so every factory over
// such a client starts cold: a test restarts an agent over the fake with a
// full relist, never a stale cache. Test warm restarts with
// recovery/crashtest's Source instead.
func NewFactoryForClient(db *DB, client kubernetes.Interface, opts *FactoryOptions) (*Factory, error) {
	if client == nil || (reflect.ValueOf(client).Kind() == reflect.Pointer && reflect.ValueOf(client).IsNil()) {
		return nil, errors.New("boltinformer: factory: nil client")
	}
	var (
		config *rest.Config
		hc     *http.Client
	)
	if rc, ok := client.CoreV1().RESTClient().(*rest.RESTClient); ok && rc != nil && rc.Client != nil {
		// The clientset's base URL: its core client's, without /api/v1.
		u := rc.Get().URL()
		u.Path = strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), "/api/v1")
		u.RawQuery = ""
		config, hc = &rest.Config{Host: u.String(), UserAgent: rest.DefaultKubernetesUserAgent()}, rc.Client
		// The metadata and dynamic clients share the clientset's rate
		// limiter (none when it has none), not client-go's default of 5
		// requests per second.
		if rl := rc.GetRateLimiter(); rl != nil {
			config.RateLimiter = rl
		} else {
			config.QPS = -1
		}
	}
	return newFactory(db, client, config, hc, nil, opts)
}

// NewSharedInformerFactory is informers.NewSharedInformerFactory on db:
// a factory whose informers list and watch through client, with handlers
// resynced every defaultResync (0: never). A program written for
// client-go's factory switches with this one line; f.Core().V1().Pods()
// and the rest of the generated tree then build persistent informers.
//
// Like client-go's, it returns no error: when the factory cannot be built
// (a nil DB, the cluster identity not established: see
// NewFactoryForClient and ClusterIdentity), it logs why and every
// informer is client-go's own, in memory (PersistentInformer returns the
// reason). Use NewFactoryForClient for the error and for options.
func NewSharedInformerFactory(db *DB, client kubernetes.Interface, defaultResync time.Duration) *Factory {
	f, err := NewFactoryForClient(db, client, &FactoryOptions{ResyncPeriod: defaultResync})
	if err == nil {
		return f
	}
	logger := klog.Background()
	if db != nil {
		logger = db.logger
	}
	logger.Error(err, "Informers are client-go's, in memory: they are not persisted")
	return &Factory{db: db, logger: logger, client: client, opts: FactoryOptions{ResyncPeriod: defaultResync},
		memoryOnly: fmt.Errorf("%w: %w", ErrNotPersistent, err), byType: map[reflect.Type]*factoryEntry{},
		byName: map[string]*factoryEntry{}, matched: map[*keyringEntry]bool{}}
}

// newFactory builds a factory over client. config and hc, when set, are
// the REST transport for the dynamic and metadata clients; endpoint is the
// caller's rest.Config (NewFactory), for IdentityEndpoint.
func newFactory(db *DB, client kubernetes.Interface, config *rest.Config, hc *http.Client, endpoint *rest.Config, opts *FactoryOptions) (*Factory, error) {
	if db == nil {
		return nil, errors.New("boltinformer: factory: nil DB")
	}
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
	if o.Transform != nil && o.Informer.TransformID == "" {
		return nil, errors.New("boltinformer: factory: FactoryOptions.Transform needs Informer.TransformID, its fingerprint: objects are stored after the transform, and a file saved with another transform must not be resumed")
	}
	keyrings, err := parseKeyrings(o.Keyrings)
	if err != nil {
		return nil, err
	}
	scopes, err := parseScopes(o.Scopes)
	if err != nil {
		return nil, err
	}
	f := &Factory{db: db, logger: db.logger, opts: o, keyrings: keyrings, scopes: scopes, client: client,
		byType: map[reflect.Type]*factoryEntry{}, byName: map[string]*factoryEntry{}, matched: map[*keyringEntry]bool{}}
	if config != nil {
		if f.dynamic, err = dynamic.NewForConfigAndClient(config, hc); err != nil {
			return nil, fmt.Errorf("boltinformer: factory: %w", err)
		}
		if f.meta, err = metadata.NewForConfigAndClient(config, hc); err != nil {
			return nil, fmt.Errorf("boltinformer: factory: %w", err)
		}
	}
	switch {
	case config == nil:
		// No REST transport (the fake clientset): never resumed.
		var b [8]byte
		_, _ = rand.Read(b[:])
		f.cluster = "unresumable:" + hex.EncodeToString(b[:])
		f.logger.Info("The client has no REST transport (a fake clientset?): informers persist to the file, but every factory over such a client starts cold", "client", fmt.Sprintf("%T", client))
	case o.ClusterID != "":
		f.cluster = o.ClusterID
	case o.Identity == IdentityNamespaceUID:
		f.cluster, err = f.lookupClusterID()
	case o.Identity == IdentityEndpoint && endpoint == nil:
		err = errors.New("boltinformer: factory: Identity IdentityEndpoint needs the rest.Config (NewFactory); set ClusterID, or use IdentityNamespaceUID")
	case o.Identity == IdentityEndpoint:
		f.cluster, err = EndpointIdentity(endpoint)
	default:
		err = fmt.Errorf("boltinformer: factory: unknown Identity %v", o.Identity)
	}
	if err != nil {
		return nil, err
	}
	return f, nil
}

// ErrNotPersistent is wrapped by PersistentInformer's error when the
// factory keeps the informer in memory (client-go's own), with the reason.
var ErrNotPersistent = errors.New("boltinformer: the informer is in memory, not persisted")

// ClusterID returns the cluster identity the factory's informers use: ""
// when the server could not be reached to look it up (an offline start,
// IdentityNamespaceUID), whose informers resume their files unchecked.
func (f *Factory) ClusterID() string { return f.cluster }

// lookupClusterID reads the kube-system namespace's UID through the
// factory's client (see lookupNamespaceUID).
func (f *Factory) lookupClusterID() (string, error) {
	return lookupNamespaceUID(f.logger, f.opts.LookupTimeout, func(ctx context.Context) (*corev1.Namespace, error) {
		return f.client.CoreV1().Namespaces().Get(ctx, metav1.NamespaceSystem, metav1.GetOptions{})
	})
}

// Informers returns the factory's persistent informers by name.
func (f *Factory) Informers() map[string]*Informer {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]*Informer, len(f.byName))
	for k, e := range f.byName {
		out[k] = e.persistent
	}
	return out
}

// fileName is gvr written as the factory names files:
// "v1/pods", "apps/v1/deployments".
func fileName(gvr schema.GroupVersionResource) string {
	return gvr.GroupVersion().String() + "/" + gvr.Resource
}
