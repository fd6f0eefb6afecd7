package localapi

import (
	"context"
	"crypto/subtle"
	"fmt"
	"net/http"
	goruntime "runtime"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"

	"github.com/boltinformer/boltinformer"
)

// Options configure New and NewStatic. A nil *Options means the defaults.
type Options struct {
	// Resources override what is derived for the informers they name (a
	// CRD informer's scope, a resource name, Skip).
	Resources []Resource
	// Secrets serves core/v1 Secrets. Off by default: a resource of
	// Secrets is then answered with 403 Forbidden and left out of
	// discovery. Secrets are told by what the objects are (*v1.Secret, or
	// apiVersion v1 and kind Secret), whatever the informer or its
	// Resource is named; a resource that gets a Secret later is refused
	// from then on (its open watches end with 403).
	Secrets bool
	// WindowEvents bounds each resource's window of recent events, from
	// which watches resume (default DefaultWindowEvents). Each event holds
	// the object after the change and the one before: the window's memory
	// is at most about 2 x WindowEvents objects per resource, and the
	// event's encodings for watches (one per format watched). New keeps
	// the same number in the cache file (Informer.KeepWindow): after a
	// restart, a watch resumes from any resourceVersion the window held.
	WindowEvents int
	// WindowInMemory keeps the window in memory only: after a restart a
	// watch from before it gets 410 and its client relists. It saves what
	// keeping the window in the file costs each change: its object and
	// the one before it encoded and written once more (about 15 to 23 us
	// of CPU per change; docs/BENCHMARKS.md, "Local API").
	WindowInMemory bool
	// ListCacheBytes bounds the encodings of list items kept across
	// requests, all resources together (default DefaultListCacheBytes; a
	// negative value keeps none). A LIST encodes each object once per
	// format (JSON, protobuf) and keeps the bytes while the object is
	// current and the bound allows; a new version of the object starts
	// without, and its old version's bytes are freed. Objects listed once
	// the bound is reached are encoded for each request.
	ListCacheBytes int64
	// BookmarkInterval is how often a watch that asked for bookmarks gets
	// one (default 1 minute; besides, every bookmark the informer gets is
	// passed on).
	BookmarkInterval time.Duration
	// WaitForResourceVersion is how long a request for a resourceVersion
	// the cache has not reached waits for it before the apiserver's
	// "Too large resource version" (default 3 seconds).
	WaitForResourceVersion time.Duration
	// Token, when not empty, is the bearer token every request must carry
	// (listen on 127.0.0.1 with it; see LoadOrCreateToken), but for those
	// that Serve gets through a Unix socket.
	Token string
	// Version is what /version reports (default: the Kubernetes version of
	// the client-go this was built with, e.g. v1.37.2).
	Version *version.Info
	// Logger; default klog.Background().
	Logger *klog.Logger
}

// served is one resource as the handler serves it.
type served struct {
	res      Resource
	view     *view          // nil when refused
	stop     func()         // unregisters the observer (live), or nil
	refused  string         // why requests are refused (403), or ""
	protobuf bool           // the objects have a protobuf encoding
	example  runtime.Object // an empty object of the kind (bookmarks)
	scope    *scope         // what the informer lists, or nil (unknown, everything)
}

// Handler is the local API: an http.Handler over a DB's informers (New)
// or a snapshot (NewStatic). Close it to end its watches and unregister
// from the informers.
type Handler struct {
	opts    Options
	db      *boltinformer.DB
	logger  klog.Logger
	version version.Info
	// budget bounds the list encodings every view's items keep.
	budget *encBudget
	// ctx is cancelled by Close: every watch ends.
	ctx    context.Context
	cancel context.CancelFunc

	// mu guards served, byGVR and closed. Lock order: mu before an
	// informer's lock (Observe) before a view's mu.
	mu     sync.Mutex
	served map[string]*served // by informer name
	byGVR  map[schema.GroupVersionResource]*served
	closed bool

	// testHookSelecting, when set, is called before each object a LIST or
	// a watch's initial events match against the request's selectors
	// (tests: it holds a selection in progress).
	testHookSelecting func()
}

// selecting calls testHookSelecting, when set.
func (h *Handler) selecting() {
	if h.testHookSelecting != nil {
		h.testHookSelecting()
	}
}

var _ http.Handler = (*Handler)(nil)

// New returns the local API of db's informers: those that exist now, and
// those created later (found at the first request that names them or asks
// for discovery). Each informer's window of events starts when it is
// first served. The handler never writes to db.
func New(db *boltinformer.DB, opts *Options) (*Handler, error) {
	h := newHandler(opts)
	h.db = db
	h.refresh()
	return h, nil
}

// Snapshot is one resource's objects for NewStatic.
type Snapshot struct {
	// Informer is the informer's name; Resource (InformerOptions.Resource,
	// as the file's state records it) and Kind describe its objects (see
	// Resource for how the served resource is derived).
	Informer string
	Resource string
	Kind     schema.GroupVersionKind
	// Objects and the ResourceVersion they are the state at.
	Objects         []runtime.Object
	ResourceVersion string
	// Refused, when not empty, is why the resource is not served (e.g. its
	// payloads are encrypted and no key was given): requests get 403
	// with it.
	Refused string
	// ListOptions is the informer's ListOptions fingerprint (the file's
	// state records it; boltinformer.ListOptionsFingerprint): a request
	// wider than its namespace and selectors gets a warning that the
	// answer holds only what the informer lists.
	ListOptions string
}

// NewStatic returns a local API serving fixed snapshots (a closed cache
// file): lists and gets as of each snapshot's resourceVersion, watches
// that get their initial events and bookmarks, never a change.
func NewStatic(snaps []Snapshot, opts *Options) (*Handler, error) {
	h := newHandler(opts)
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range snaps {
		r := h.override(s.Informer)
		if r.Skip {
			continue
		}
		var err error
		r, err = describeKind(r, s.Resource, s.Kind, s.Objects)
		if err != nil {
			h.logger.Info("Warning: not serving an informer", "informer", s.Informer, "err", err)
			continue
		}
		objs := make([]any, len(s.Objects))
		for i, o := range s.Objects {
			objs[i] = o
		}
		sv := &served{res: r, refused: s.Refused, scope: newScope(s.ListOptions)}
		if sv.refused == "" {
			sv.refused = h.refusal(&r, nil, s.Objects)
		}
		if sv.refused == "" {
			sv.view = newView(h.opts.WindowEvents, h.budget)
			sv.view.initLocked(boltinformer.ObservedState{Objects: objs, ResourceVersion: s.ResourceVersion, Synced: true})
		}
		h.addLocked(sv, s.Objects)
	}
	return h, nil
}

func newHandler(opts *Options) *Handler {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	if o.WindowEvents <= 0 {
		o.WindowEvents = DefaultWindowEvents
	}
	if o.BookmarkInterval <= 0 {
		o.BookmarkInterval = time.Minute
	}
	if o.ListCacheBytes == 0 {
		o.ListCacheBytes = DefaultListCacheBytes
	}
	if o.WaitForResourceVersion <= 0 {
		o.WaitForResourceVersion = 3 * time.Second
	}
	logger := klog.Background()
	if o.Logger != nil {
		logger = *o.Logger
	}
	h := &Handler{opts: o, logger: logger.WithName("localapi"), served: map[string]*served{}, byGVR: map[schema.GroupVersionResource]*served{},
		budget: &encBudget{limit: o.ListCacheBytes}}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	if o.Version != nil {
		h.version = *o.Version
	} else {
		h.version = defaultVersion()
	}
	return h
}

// clientGoKubernetesVersion is the Kubernetes version of the client-go in
// go.mod (client-go v0.X.Y is Kubernetes v1.X.Y): what /version reports
// when the binary carries no module information (tests). A test checks it
// against go.mod.
const clientGoKubernetesVersion = "v1.37.2"

// defaultVersion is the Kubernetes version matching the client-go this was
// built with.
func defaultVersion() version.Info {
	gv := clientGoKubernetesVersion
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if _, rest, ok := strings.Cut(d.Version, "v0."); ok && d.Path == "k8s.io/client-go" {
				gv = "v1." + strings.SplitN(rest, "-", 2)[0]
			}
		}
	}
	v := version.Info{GitVersion: gv, Major: "1", Compiler: "gc", Platform: "localapi", GoVersion: goruntime.Version()}
	if parts := strings.SplitN(strings.TrimPrefix(gv, "v"), ".", 3); len(parts) >= 2 {
		v.Minor = parts[1]
	}
	return v
}

// override is the Options.Resources entry of an informer (or one naming
// only it).
func (h *Handler) override(name string) Resource {
	for _, r := range h.opts.Resources {
		if r.Informer == name {
			return r
		}
	}
	return Resource{Informer: name}
}

// refusal says why a resource is not served, or "": Secrets without
// Options.Secrets, by the resource's description and by what its objects
// are (an example of the informer's type, the objects it holds), never by
// its name alone.
func (h *Handler) refusal(r *Resource, example runtime.Object, objs []runtime.Object) string {
	if h.opts.Secrets {
		return ""
	}
	if secretResource(r) {
		return secretsRefused
	}
	if why := holdsSecrets(example, objs); why != "" {
		return fmt.Sprintf("informer %q: %s: %s", r.Informer, why, secretsRefused)
	}
	return ""
}

// addLocked records sv, unless another informer already serves its
// resource. Caller holds mu.
func (h *Handler) addLocked(sv *served, objs []runtime.Object) {
	h.served[sv.res.Informer] = sv
	gvr := sv.res.GroupVersionResource
	if other := h.byGVR[gvr]; other != nil {
		h.logger.Info("Warning: two informers of one resource; serving the first", "resource", gvr.String(), "serving", other.res.Informer, "ignored", sv.res.Informer)
		if sv.stop != nil {
			sv.stop()
		}
		return
	}
	h.byGVR[gvr] = sv
	gvk := sv.res.gvk()
	if ex, err := scheme.Scheme.New(gvk); err == nil {
		sv.example = ex
	} else {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvk)
		sv.example = u
	}
	if len(objs) > 0 {
		if _, isU := objs[0].(*unstructured.Unstructured); isU {
			// A dynamic informer of a built-in kind: its objects are
			// unstructured (JSON only).
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(gvk)
			sv.example = u
		}
	}
	sv.protobuf = hasProtobuf(sv.example)
}

// refresh serves the DB's informers not served yet.
func (h *Handler) refresh() {
	if h.db == nil {
		return
	}
	infs := h.db.Informers()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	for _, inf := range infs {
		if _, ok := h.served[inf.Name()]; ok {
			continue
		}
		h.attachLocked(inf)
	}
}

// attachLocked starts serving inf. Caller holds mu.
func (h *Handler) attachLocked(inf *boltinformer.Informer) {
	r := h.override(inf.Name())
	if r.Skip {
		h.served[inf.Name()] = &served{res: r, refused: "skipped"}
		return
	}
	desc, err := describe(r, inf.Resource(), inf.ObjectType(), nil)
	if err == nil {
		if why := h.refusal(&desc, inf.ObjectType(), nil); why != "" {
			sv := &served{res: desc, refused: why}
			h.addLocked(sv, nil)
			return
		}
	}
	// The observer may be called as soon as Observe has registered it:
	// hold the view until it holds the state Observe returns.
	v := newView(h.opts.WindowEvents, h.budget)
	v.refuseSecrets = !h.opts.Secrets
	v.mu.Lock()
	// The window is kept in the file: after a restart the watches resume
	// from any resourceVersion it held (Informer.KeepWindow).
	if !h.opts.WindowInMemory {
		inf.KeepWindow(h.opts.WindowEvents)
	}
	st, stop := inf.Observe(v.apply)
	v.initLocked(st)
	objs := make([]runtime.Object, 0, len(st.Objects))
	for _, o := range st.Objects {
		if ro, ok := o.(runtime.Object); ok {
			objs = append(objs, ro)
		}
	}
	v.mu.Unlock()
	desc, err = describe(r, inf.Resource(), inf.ObjectType(), objs)
	if err != nil {
		stop()
		h.logger.Info("Warning: not serving an informer", "informer", inf.Name(), "err", err)
		h.served[inf.Name()] = &served{res: r, refused: err.Error()}
		return
	}
	if why := h.refusal(&desc, inf.ObjectType(), objs); why != "" {
		stop()
		h.addLocked(&served{res: desc, refused: why}, nil)
		return
	}
	h.addLocked(&served{res: desc, view: v, stop: stop, scope: newScope(inf.Indexer().Identity().ListOptions)}, objs)
}

// Close ends every watch, unregisters from the informers and makes every
// later request fail with 503. It does not close the DB.
func (h *Handler) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	svs := make([]*served, 0, len(h.served))
	for _, sv := range h.served {
		svs = append(svs, sv)
	}
	h.mu.Unlock()
	h.cancel()
	for _, sv := range svs {
		if sv.stop != nil {
			sv.stop()
		}
		if sv.view != nil {
			sv.view.close()
		}
	}
	return nil
}

// lookup returns the served resource of gvr, refreshing from the DB once
// when it is not known.
func (h *Handler) lookup(gvr schema.GroupVersionResource) (*served, error) {
	for i := 0; i < 2; i++ {
		h.mu.Lock()
		closed, sv := h.closed, h.byGVR[gvr]
		h.mu.Unlock()
		if closed {
			return nil, apierrors.NewServiceUnavailable(ErrClosed.Error())
		}
		if sv != nil {
			return sv, nil
		}
		if i == 0 {
			h.refresh()
		}
	}
	return nil, nil
}

// resources returns the served resources (not refused), sorted by group,
// version and resource.
func (h *Handler) resources() []*served {
	h.refresh()
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*served, 0, len(h.byGVR))
	for _, sv := range h.byGVR {
		if sv.refused == "" && sv.view.refused() == "" {
			out = append(out, sv)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].res.GroupVersionResource, out[j].res.GroupVersionResource
		if a.Group != b.Group {
			return a.Group < b.Group
		}
		if a.Version != b.Version {
			return a.Version < b.Version
		}
		return a.Resource < b.Resource
	})
	return out
}

// Refused returns the informers the handler does not serve, by name, with
// the reason their requests get (403): Secrets without Options.Secrets
// (also those that arrived since), a Snapshot's Refused, an informer that
// cannot be described, one skipped by Options.Resources.
func (h *Handler) Refused() map[string]string {
	h.refresh()
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]string{}
	for name, sv := range h.served {
		if sv.refused != "" {
			out[name] = sv.refused
		} else if why := sv.view.refused(); why != "" {
			out[name] = why
		}
	}
	return out
}

// ServeHTTP answers one request. It never panics: a failure is a Status.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			h.logger.Error(fmt.Errorf("%v", p), "Request panicked", "path", r.URL.Path, "stack", string(debug.Stack()))
			h.writeError(w, r, apierrors.NewInternalError(fmt.Errorf("local API: %v", p)))
		}
	}()
	if h.opts.Token != "" && r.Context().Value(socketConn{}) == nil && !publicPath(r.URL.Path) && !h.authorized(r) {
		h.writeError(w, r, apierrors.NewUnauthorized("Unauthorized"))
		return
	}
	path := r.URL.Path
	if h.serveReview(w, r) {
		return
	}
	if h.serveDiscovery(w, r, path) {
		return
	}
	h.serveResource(w, r)
}

// publicPath reports whether path is served without credentials, as
// kube-apiserver serves it to anyone (its system:public-info-viewer role):
// the health checks and /version, for probes.
func publicPath(path string) bool {
	switch strings.TrimSuffix(path, "/") {
	case "/healthz", "/livez", "/readyz", "/version":
		return true
	}
	return false
}

// authorized reads the bearer token as kube-apiserver does: the scheme's
// name in any case, the token the next word.
func (h *Handler) authorized(r *http.Request) bool {
	parts := strings.SplitN(strings.TrimSpace(r.Header.Get("Authorization")), " ", 3)
	if len(parts) < 2 || !strings.EqualFold(parts[0], "bearer") || parts[1] == "" {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(parts[1]), []byte(h.opts.Token)) == 1
}
