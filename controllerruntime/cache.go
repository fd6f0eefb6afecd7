package boltcr

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/boltinformer/boltinformer"
)

// DefaultFreshTimeout is Options.FreshTimeout's default: how long
// WaitForCacheSync waits for a warm-started informer to be fresh before it
// serves the cache as loaded (stale) because the server does not answer.
// It is well within controller-runtime's default CacheSyncTimeout (2
// minutes), after which a controller gives up.
const DefaultFreshTimeout = 30 * time.Second

// DefaultFreshBookmarkWait is Options.FreshBookmarkWait's default.
const DefaultFreshBookmarkWait = 5 * time.Second

// removeWait bounds how long RemoveInformer waits for a removed informer's
// Run to return (it stops its reflector and handlers and flushes).
const removeWait = 30 * time.Second

// Options configure NewCache. A nil *Options means the defaults.
type Options struct {
	// ClusterID identifies the cluster; "" means as Identity says (see
	// boltinformer.FactoryOptions: the kube-system namespace's UID by
	// default, read once when the cache is built, within LookupTimeout).
	ClusterID     string
	Identity      boltinformer.ClusterIdentity
	LookupTimeout time.Duration
	// SyncAfterDiskLoad makes a warm-started informer synced as soon as
	// its file is loaded (boltinformer.SyncAfterDiskLoad), even with the
	// server unreachable. What it gives up: until the informer is fresh,
	// WaitForCacheSync may return, and a reconciler read, the state of the
	// last stop (objects deleted or changed while the operator was down),
	// which the resumed watch then brings up to date. What it keeps: the
	// deletes made while down still reach the reconcilers, however late a
	// controller adds its handlers (see the package doc), for the informer
	// still finds out when it is fresh (as with FreshBookmarkWait) without
	// making the sync wait for it. That costs the apiserver, besides the
	// WATCH, one read of one object's metadata and, when no bookmark comes
	// within FreshBookmarkWait, one metadata list of the informer's scope
	// (at once, beside the bookmark wait, for an informer of at most
	// boltinformer.DefaultFreshListMax objects). With NoReplayDownDeletes
	// too, a warm start makes no read beyond its WATCH. The default is
	// SyncAfterFresh: WaitForCacheSync returns once the cache equals the
	// server's state (or after FreshTimeout without an answer from the
	// server, serving the cache as loaded).
	SyncAfterDiskLoad bool
	// FreshTimeout bounds the wait for Fresh; 0 means DefaultFreshTimeout,
	// negative waits as long as it takes. With SyncAfterDiskLoad nothing
	// waits: it bounds how long a warm start holds its commits so that a
	// kill -9 before fresh loses no replayed delete (see the package doc).
	FreshTimeout time.Duration
	// FreshBookmarkWait: a warm-started informer is fresh at the server's
	// first bookmark on its resumed watch at or after the server's
	// resourceVersion (1 to 2.25 s in when anything in the cluster was
	// written since, at almost no cost to the server) when one comes within
	// this long, else by a metadata list of its scope
	// (boltinformer.InformerOptions.FreshBookmarkWait, which says what a
	// bookmark cannot catch: a restored etcd backup written past the file).
	// An informer of at most boltinformer.DefaultFreshListMax objects also
	// lists metadata at once, fresh by whichever answers first. It applies
	// to both sync policies: with SyncAfterDiskLoad it decides which
	// deletes are replayed, not when the cache syncs (with
	// NoReplayDownDeletes too it is not used). 0 means
	// DefaultFreshBookmarkWait; negative lists metadata at once (a
	// consistent read, faster on small collections, but about as much of
	// the server's CPU as a cold start).
	FreshBookmarkWait time.Duration
	// FreshListMax: a warm-started informer of at most this many objects
	// also lists metadata at once, beside the wait for a bookmark
	// (boltinformer.InformerOptions.FreshListMax). 0 means
	// boltinformer.DefaultFreshListMax; negative waits for the bookmark
	// only.
	FreshListMax int
	// NoReplayDownDeletes turns off the delete requests for objects
	// deleted while the operator was down (see the package doc).
	NoReplayDownDeletes bool
	// NoChangedFirst turns off the order of a warm start's requests:
	// by default a controller gets the objects changed or created while
	// the operator was down first, as adds that are not in the initial
	// list (controller-runtime's priority queue reconciles them at
	// normal priority), then the unchanged ones as initial-list adds (at
	// handler.LowPriority). See the package doc and
	// boltinformer.InformerOptions.ChangedFirst.
	NoChangedFirst bool
	// PartialRelistRatio is the largest share of an informer's objects
	// that a relist after a 410 (the saved resourceVersion too old: an
	// operator down longer than the apiserver's watch history, or an
	// apiserver restart) reads one by one, each at the list's
	// resourceVersion, after a metadata-only list; above it the relist
	// lists every object. 0 means boltinformer.DefaultPartialRelistRatio
	// (5%, where the exact reads cost the apiserver about as much CPU as
	// a full list); negative turns partial relists off. Raise it when a
	// full list costs more than the reads (large objects, a loaded
	// apiserver, a slow link): see boltinformer.InformerOptions.
	PartialRelistRatio float64
	// Memory is boltinformer.FullMemory (the default) or BoundedMemory,
	// with CacheSize decoded objects.
	Memory    boltinformer.MemoryMode
	CacheSize int
	// Keyring, when set, returns the keyring that encrypts gvk's objects
	// at rest (nil: plaintext). See boltinformer.InformerOptions.Keyring.
	Keyring func(gvk schema.GroupVersionKind) *boltinformer.Keyring
	// InMemory, when set, names kinds that are not persisted: their
	// informers are client-go's.
	InMemory func(gvk schema.GroupVersionKind) bool
	// DropUnusedAfter, when positive, makes the cache's stop (Start's
	// return) drop from the file the controller-runtime informers (names
	// starting "controller-runtime/") that it did not use and that
	// committed nothing for this long (boltinformer.DB.DropUnused): a
	// namespace no longer in DefaultNamespaces or ByObject, a changed
	// selector, a kind no longer watched. Without it their data stays in
	// the file until dropped by hand (inspect drop, DB.DropInformers). An
	// informer the cache builds only now and then (a kind read once a
	// week) and not in this run is dropped too when older, and starts
	// cold when next built: choose a duration longer than such gaps (and
	// than any downtime after which the next run reads that kind only
	// later). 0 drops nothing.
	DropUnusedAfter time.Duration
	// Logger; default controller-runtime's logger named "boltinformer".
	Logger *logr.Logger
}

// NewCache returns controller-runtime's cache constructor for a manager
// (ctrl.Options.NewCache) or a cluster: controller-runtime's own cache,
// whose informers keep their objects in db. See the package doc. Close db
// after the manager has stopped (mgr.Start returned).
func NewCache(db *boltinformer.DB, opts *Options) cache.NewCacheFunc {
	return func(config *rest.Config, copts cache.Options) (cache.Cache, error) {
		return New(db, config, copts, opts)
	}
}

// Cache is controller-runtime's cache built with persistent informers
// (NewCache). Its Start flushes db once every informer has stopped, and
// its RemoveInformer waits for the removed informers to stop, so that they
// can be created again.
type Cache struct {
	cache.Cache
	db       *boltinformer.DB
	opts     Options
	logger   logr.Logger
	scheme   *runtime.Scheme
	mapper   meta.RESTMapper
	meta     metadata.Interface
	cluster  string
	freshFor time.Duration
	bookmark time.Duration // FreshBookmarkWait, 0 for none
	// failOnMissing is cache.Options.ReaderFailOnMissingInformer: a read
	// creates no informer.
	failOnMissing bool
	primed        sync.Map // primeKey -> true: informers created (prime.go)

	// failed is closed, with failErr set, when the file fails an informer.
	failOnce sync.Once
	failed   chan struct{}
	failErr  error

	// mu guards informers. Lock order: mu before an Informer's mu.
	mu        sync.Mutex
	informers []*Informer // live: not removed
}

// ErrNewInformerSet means cache.Options.NewInformer was set: NewCache sets
// it.
var ErrNewInformerSet = errors.New("boltcr: cache.Options.NewInformer is set; NewCache sets it")

// New builds the cache NewCache's function returns.
func New(db *boltinformer.DB, config *rest.Config, copts cache.Options, opts *Options) (*Cache, error) {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	if copts.NewInformer != nil {
		return nil, ErrNewInformerSet
	}
	logger := logf.Log.WithName("boltinformer")
	if o.Logger != nil {
		logger = *o.Logger
	}
	cfg := rest.CopyConfig(config)
	if cfg.UserAgent == "" {
		cfg.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	if copts.HTTPClient == nil {
		hc, err := rest.HTTPClientFor(cfg)
		if err != nil {
			return nil, fmt.Errorf("boltcr: HTTP client: %w", err)
		}
		copts.HTTPClient = hc
	}
	if copts.Scheme == nil {
		copts.Scheme = scheme.Scheme
	}
	if copts.Mapper == nil {
		m, err := apiutil.NewDynamicRESTMapper(cfg, copts.HTTPClient)
		if err != nil {
			return nil, fmt.Errorf("boltcr: REST mapper: %w", err)
		}
		copts.Mapper = m
	}
	// The cluster's identity, once for every informer of the cache.
	f, err := boltinformer.NewFactory(db, cfg, &boltinformer.FactoryOptions{ClusterID: o.ClusterID, Identity: o.Identity, LookupTimeout: o.LookupTimeout})
	if err != nil {
		return nil, fmt.Errorf("boltcr: %w", err)
	}
	metaCfg := rest.CopyConfig(cfg)
	metaCfg.NegotiatedSerializer = nil
	mc, err := metadata.NewForConfigAndClient(metaCfg, copts.HTTPClient)
	if err != nil {
		return nil, fmt.Errorf("boltcr: metadata client: %w", err)
	}
	c := &Cache{db: db, opts: o, logger: logger, scheme: copts.Scheme, mapper: copts.Mapper, meta: mc, cluster: f.ClusterID(),
		failed: make(chan struct{}), failOnMissing: copts.ReaderFailOnMissingInformer}
	switch {
	case o.FreshTimeout == 0:
		c.freshFor = DefaultFreshTimeout
	case o.FreshTimeout > 0:
		c.freshFor = o.FreshTimeout
	}
	switch {
	case o.FreshBookmarkWait == 0:
		c.bookmark = DefaultFreshBookmarkWait
	case o.FreshBookmarkWait > 0:
		c.bookmark = o.FreshBookmarkWait
	}
	// The informers' requests go through scopeTransport (scope.go).
	hc := *copts.HTTPClient
	base := hc.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	hc.Transport = &scopeTransport{base: base}
	copts.HTTPClient = &hc
	wrapTransforms(&copts)
	copts.NewInformer = c.newInformer
	inner, err := cache.New(cfg, copts)
	if err != nil {
		return nil, err
	}
	c.Cache = inner
	return c, nil
}

// wrapTransforms wraps every transform of copts (autoTransform), so that
// SetTransform can tell which one it was given. The maps are copied: the
// caller's options are not changed.
func wrapTransforms(copts *cache.Options) {
	copts.DefaultTransform = wrapTransform(copts.DefaultTransform)
	wrapConfigs := func(in map[string]cache.Config) map[string]cache.Config {
		if in == nil {
			return nil
		}
		out := maps.Clone(in)
		for ns, c := range out {
			c.Transform = wrapTransform(c.Transform)
			out[ns] = c
		}
		return out
	}
	copts.DefaultNamespaces = wrapConfigs(copts.DefaultNamespaces)
	if copts.ByObject != nil {
		by := make(map[client.Object]cache.ByObject, len(copts.ByObject))
		for obj, b := range copts.ByObject {
			b.Transform = wrapTransform(b.Transform)
			b.Namespaces = wrapConfigs(b.Namespaces)
			by[obj] = b
		}
		copts.ByObject = by
	}
}

// Start runs the informers until ctx is done, and returns once every one
// has stopped and db has committed what they applied.
//
// It returns an error, stopping the informers (and so the manager), when
// the file fails an informer: boltinformer.DB.NewInformer's errors other
// than a name in use (ErrEncryptionKey for a keyring that does not open
// the file, ErrClosed, a read error). controller-runtime's NewInformer
// cannot return one; that informer runs in memory until then.
func (c *Cache) Start(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- c.Cache.Start(ctx) }()
	var err error
	select {
	case err = <-errc:
	case <-c.failed:
		cancel()
		<-errc
		err = c.failErr
	}
	if ferr := c.db.Flush(context.Background()); ferr != nil {
		c.logger.Error(ferr, "Final flush of the cache file failed; the next start resumes from the last commit")
	}
	if err == nil && c.opts.DropUnusedAfter > 0 {
		c.dropUnused()
	}
	return err
}

// WaitForCacheSync waits until every informer of the cache has synced,
// as controller-runtime's cache does, without its 100 ms polls: it first
// waits on each running informer's own signal, then asks
// controller-runtime's cache (which then finds them synced at its first
// look).
func (c *Cache) WaitForCacheSync(ctx context.Context) bool {
	for _, inf := range c.Informers() {
		if inf.RunAt().IsZero() {
			continue // not started yet: controller-runtime's wait covers it
		}
		select {
		case <-inf.HasSyncedChecker().Done():
		case <-ctx.Done():
			return false
		}
	}
	return c.Cache.WaitForCacheSync(ctx)
}

// informerPrefix starts the name of every informer NewCache persists
// (informerName).
const informerPrefix = "controller-runtime/"

// dropUnused drops the controller-runtime informers of the file that this
// cache did not use and that committed nothing for DropUnusedAfter (the
// DB logs what it drops). A failure is logged: the cache has stopped, and
// it costs only disk until the next stop.
func (c *Cache) dropUnused() {
	_, err := c.db.DropUnused(c.opts.DropUnusedAfter, func(name string) bool { return strings.HasPrefix(name, informerPrefix) })
	if err != nil {
		c.logger.Error(err, "Dropping the unused informers from the cache file failed; they stay until the next stop", "dropUnusedAfter", c.opts.DropUnusedAfter)
	}
}

// fail records the first error that fails the cache (Start returns it).
func (c *Cache) fail(err error) {
	c.failOnce.Do(func() {
		c.failErr = err
		close(c.failed)
	})
}

// RemoveInformer removes the informers of obj's kind, as
// controller-runtime does, and waits (bounded by ctx and 30 s) until they
// have stopped, so that the same informer can be created again and resume
// from what they wrote. An informer that never ran gives its name back at
// once (boltinformer.DB.Release).
func (c *Cache) RemoveInformer(ctx context.Context, obj client.Object) error {
	gvk, err := apiutil.GVKForObject(obj, c.scheme)
	if err != nil {
		return err
	}
	kind := kindOf(obj)
	if err := c.Cache.RemoveInformer(ctx, obj); err != nil {
		return err
	}
	c.unprime(obj)
	c.mu.Lock()
	var removed []*Informer
	live := c.informers[:0]
	for _, inf := range c.informers {
		if inf.gvk == gvk && inf.kind == kind {
			removed = append(removed, inf)
		} else {
			live = append(live, inf)
		}
	}
	clear(c.informers[len(live):])
	c.informers = live
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, removeWait)
	defer cancel()
	var errs []error
	for _, inf := range removed {
		errs = append(errs, inf.removed(ctx))
	}
	return errors.Join(errs...)
}

// Informers returns the cache's informers (removed ones left out), by
// name: which are persisted, and why the others are not.
func (c *Cache) Informers() []*Informer {
	c.mu.Lock()
	out := append([]*Informer(nil), c.informers...)
	c.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out
}

// DB returns the cache file.
func (c *Cache) DB() *boltinformer.DB { return c.db }

// ClusterID returns the cluster identity the informers are saved under
// ("" when the server could not be reached to look it up).
func (c *Cache) ClusterID() string { return c.cluster }

func (c *Cache) track(inf *Informer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.informers = append(c.informers, inf)
}
