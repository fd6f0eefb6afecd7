package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/test/kas/harness"
)

// request is one request a recorder saw.
type request struct {
	At       time.Time
	Verb     string // LIST, LIST-METADATA, LIST-EXACT, WATCH, GET, or the HTTP method of a write
	Resource string // e.g. "configmaps"; "" for non-resource paths
	Path     string
	Query    url.Values
	Status   int // 0 until the response headers arrived (or on error)
	// Bytes counts the response body read so far, decoded (the transport
	// below undoes the apiserver's gzip).
	Bytes *atomic.Int64
}

func (r request) String() string {
	q := r.Query.Encode()
	if q != "" {
		q = "?" + q
	}
	return fmt.Sprintf("%s %s%s -> %d", r.Verb, r.Path, q, r.Status)
}

// recorder is an http.RoundTripper that records every request, and can hold
// the list and watch requests of one resource until released.
type recorder struct {
	next http.RoundTripper

	// mu guards reqs, hold, holdResource and held.
	mu           sync.Mutex
	reqs         []request
	hold         chan struct{}
	holdResource string
	held         chan struct{}
}

func (r *recorder) wrap(rt http.RoundTripper) http.RoundTripper {
	r.next = rt
	return r
}

// holdRequests makes the list and watch requests of resource wait until
// the returned release is called; held is closed when the first one waits.
func (r *recorder) holdRequests(resource string) (held <-chan struct{}, release func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hold, r.holdResource, r.held = make(chan struct{}), resource, make(chan struct{})
	hold := r.hold
	var once sync.Once
	return r.held, func() { once.Do(func() { close(hold) }) }
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	rec := classify(req)
	r.mu.Lock()
	i := len(r.reqs)
	r.reqs = append(r.reqs, rec)
	var hold chan struct{}
	if r.hold != nil && rec.Resource == r.holdResource && (rec.Verb == "LIST" || rec.Verb == "WATCH") {
		hold = r.hold
		select {
		case <-r.held:
		default:
			close(r.held)
		}
	}
	r.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-req.Context().Done():
			return nil, req.Context().Err()
		}
	}
	resp, err := r.next.RoundTrip(req)
	if err == nil {
		r.mu.Lock()
		r.reqs[i].Status = resp.StatusCode
		r.mu.Unlock()
		resp.Body = &countingBody{ReadCloser: resp.Body, n: rec.Bytes}
	}
	return resp, err
}

// countingBody counts the bytes read from a response body.
type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// bytes sums the response bytes of the requests of verb on resource.
func (r *recorder) bytes(verb, resource string) int64 {
	var n int64
	for _, q := range r.requests(resource) {
		if q.Verb == verb {
			n += q.Bytes.Load()
		}
	}
	return n
}

// classify names a request the way the apiserver's metrics do.
func classify(req *http.Request) request {
	rec := request{At: time.Now(), Verb: req.Method, Path: req.URL.Path, Query: req.URL.Query(), Bytes: new(atomic.Int64)}
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	var rest []string
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		rest = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		rest = parts[3:]
	default:
		return rec
	}
	if len(rest) >= 3 && rest[0] == "namespaces" {
		rest = rest[2:]
	}
	if len(rest) == 0 {
		return rec
	}
	rec.Resource = rest[0]
	if req.Method == http.MethodGet {
		switch {
		case rec.Query.Get("watch") == "true" || rec.Query.Get("watch") == "1":
			rec.Verb = "WATCH"
		case len(rest) == 1 && strings.Contains(req.Header.Get("Accept"), "as=PartialObjectMetadataList"):
			// A metadata-only list: what a fresh resume diffs.
			rec.Verb = "LIST-METADATA"
		case len(rest) == 1 && rec.Query.Get("resourceVersionMatch") == "Exact" && strings.Contains(rec.Query.Get("fieldSelector"), "metadata.name="):
			// One object at an exact resourceVersion: a partial relist's read.
			rec.Verb = "LIST-EXACT"
		case len(rest) == 1:
			rec.Verb = "LIST"
		default:
			rec.Verb = "GET"
		}
	}
	return rec
}

// requests returns the recorded requests for resource ("" for all).
func (r *recorder) requests(resource string) []request {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []request
	for _, q := range r.reqs {
		if resource == "" || q.Resource == resource {
			out = append(out, q)
		}
	}
	return out
}

// count returns how many requests of verb on resource were recorded.
func (r *recorder) count(verb, resource string) int {
	n := 0
	for _, q := range r.requests(resource) {
		if q.Verb == verb {
			n++
		}
	}
	return n
}

// listWatch returns the list and watch requests of resource, in order.
func (r *recorder) listWatch(resource string) []request {
	var out []request
	for _, q := range r.requests(resource) {
		if q.Verb == "LIST" || q.Verb == "WATCH" {
			out = append(out, q)
		}
	}
	return out
}

// checker is the test's own client (seeding, changes, reference lists),
// with its own recorder so its LISTs can be told from the agent's in the
// apiserver's counters.
type checker struct {
	cs  kubernetes.Interface
	dyn dynamic.Interface
	rec *recorder
	cfg *rest.Config
}

func newChecker(t *testing.T) *checker { return newCheckerOn(t, cluster) }

// newCheckerOn is newChecker for another cluster than the shared one.
func newCheckerOn(t *testing.T, cl *harness.Cluster) *checker {
	t.Helper()
	cfg := cl.RESTConfig()
	rec := &recorder{}
	cfg.Wrap(rec.wrap)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &checker{cs: cs, dyn: dyn, rec: rec, cfg: cfg}
}

// namespace creates a namespace named prefix-<random>.
func (c *checker) namespace(t *testing.T, prefix string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: prefix + "-" + rand.String(5)}}
	if _, err := c.cs.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// agent is one run of an informer process: a DB, a factory and a recorder
// on its rest.Config.
type agent struct {
	t       *testing.T
	path    string
	rec     *recorder
	db      *boltinformer.DB
	factory *boltinformer.Factory
	cancel  context.CancelFunc
	stopped bool
}

// newAgent opens the cache file path and builds a factory on a recorded
// rest.Config. It is stopped at the end of the test if not before.
func newAgent(t *testing.T, path string, fopts *boltinformer.FactoryOptions) *agent {
	t.Helper()
	return newAgentOn(t, cluster, path, fopts)
}

// newAgentOn is newAgent for another cluster than the shared one.
func newAgentOn(t *testing.T, cl *harness.Cluster, path string, fopts *boltinformer.FactoryOptions) *agent {
	t.Helper()
	cfg := cl.RESTConfig()
	rec := &recorder{}
	cfg.Wrap(rec.wrap)
	db, err := boltinformer.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	f, err := boltinformer.NewFactory(db, cfg, fopts)
	if err != nil {
		_ = db.Close()
		t.Fatal(err)
	}
	a := &agent{t: t, path: path, rec: rec, db: db, factory: f}
	t.Cleanup(a.stop)
	return a
}

func (a *agent) start() {
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	a.factory.StartWithContext(ctx)
}

// stop cancels the informers, waits for them and closes the file.
func (a *agent) stop() {
	if a.stopped {
		return
	}
	a.stopped = true
	if a.cancel != nil {
		a.cancel()
	}
	a.factory.Shutdown()
	if err := a.db.Close(); err != nil {
		a.t.Errorf("close %s: %v", a.path, err)
	}
}

// waitSynced waits for the factory's started informers to sync.
func (a *agent) waitSynced(timeout time.Duration) {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for typ, ok := range a.factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			a.t.Fatalf("informer of %v did not sync within %s", typ, timeout)
		}
	}
}

func cachePath(t *testing.T) string { return filepath.Join(t.TempDir(), "cache.db") }

// state maps namespace/name to resourceVersion.
type state map[string]string

// stateOf returns the state of a list object (typed or unstructured).
func stateOf(list runtime.Object) (state, error) {
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil, err
	}
	out := state{}
	for _, it := range items {
		m, err := meta.Accessor(it)
		if err != nil {
			return nil, err
		}
		key := m.GetName()
		if m.GetNamespace() != "" {
			key = m.GetNamespace() + "/" + key
		}
		out[key] = m.GetResourceVersion()
	}
	return out, nil
}

// cacheState returns the state of an informer's cache.
func cacheState(inf cache.SharedIndexInformer) state {
	out := state{}
	for _, obj := range inf.GetIndexer().List() {
		m, err := meta.Accessor(obj)
		if err != nil {
			continue
		}
		key, _ := cache.MetaNamespaceKeyFunc(obj)
		out[key] = m.GetResourceVersion()
	}
	return out
}

// diff describes how got differs from want ("" when equal).
func (s state) diff(want state) string {
	var missing, extra, stale []string
	for k, rv := range want {
		switch got, ok := s[k]; {
		case !ok:
			missing = append(missing, k)
		case got != rv:
			stale = append(stale, fmt.Sprintf("%s (rv %s, want %s)", k, got, rv))
		}
	}
	for k := range s {
		if _, ok := want[k]; !ok {
			extra = append(extra, k)
		}
	}
	if len(missing)+len(extra)+len(stale) == 0 {
		return ""
	}
	first := func(xs []string) []string {
		sort.Strings(xs)
		return xs[:min(len(xs), 5)]
	}
	return fmt.Sprintf("%d objects, want %d: %d missing %v, %d extra %v, %d stale %v",
		len(s), len(want), len(missing), first(missing), len(extra), first(extra), len(stale), first(stale))
}

// waitConverged waits until inf's cache equals the server's state, as one
// list by the checker returns it after every change was acknowledged.
func waitConverged(t *testing.T, inf cache.SharedIndexInformer, serverList func(context.Context) (runtime.Object, error), timeout time.Duration) state {
	t.Helper()
	list, err := serverList(t.Context())
	if err != nil {
		t.Fatalf("reference list: %v", err)
	}
	want, err := stateOf(list)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(timeout)
	for {
		d := cacheState(inf).diff(want)
		if d == "" {
			return want
		}
		if time.Now().After(deadline) {
			t.Fatalf("cache did not converge to the server's state within %s: %s", timeout, d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// parallel runs f(0..n-1) on workers goroutines and returns the first
// error.
func parallel(ctx context.Context, n, workers int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next atomic.Int64
	var wg sync.WaitGroup
	var firstErr error
	var errMu sync.Mutex
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := f(ctx, i); err != nil {
					errMu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("item %d: %w", i, err)
					}
					errMu.Unlock()
					cancel()
					return
				}
			}
		}()
	}
	wg.Wait()
	return firstErr
}

// apiserverLists returns apiserver_request_total{verb="LIST"} for resource.
func apiserverLists(t *testing.T, resource string) float64 {
	t.Helper()
	n, err := cluster.RequestCount(t.Context(), "LIST", resource)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// events records what a handler received.
type events struct {
	mu                    sync.Mutex
	adds, updates, dels   []string
	initialAdds           int
	changedUpdates        int // updates whose resourceVersion changed
	finalStateUnknownDels int
}

func (e *events) handler() cache.ResourceEventHandler {
	key := func(obj any) string {
		k, _ := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
		return k
	}
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.adds = append(e.adds, key(obj))
			if initial {
				e.initialAdds++
			}
		},
		UpdateFunc: func(old, obj any) {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.updates = append(e.updates, key(obj))
			o, err1 := meta.Accessor(old)
			n, err2 := meta.Accessor(obj)
			if err1 == nil && err2 == nil && o.GetResourceVersion() != n.GetResourceVersion() {
				e.changedUpdates++
			}
		},
		DeleteFunc: func(obj any) {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.dels = append(e.dels, key(obj))
			if _, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				e.finalStateUnknownDels++
			}
		},
	}
}

// eventCounts is a snapshot of what a handler received.
type eventCounts struct {
	adds, updates, dels                   []string
	initialAdds, changedUpdates, unknowns int
}

func (e *events) snapshot() eventCounts {
	e.mu.Lock()
	defer e.mu.Unlock()
	return eventCounts{
		adds:           append([]string(nil), e.adds...),
		updates:        append([]string(nil), e.updates...),
		dels:           append([]string(nil), e.dels...),
		initialAdds:    e.initialAdds,
		changedUpdates: e.changedUpdates,
		unknowns:       e.finalStateUnknownDels,
	}
}

// eventually polls cond every 50 ms until it holds or timeout passes.
func eventually(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
	return true
}
