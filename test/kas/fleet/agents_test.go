package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/test/kas/harness"
)

// meter counts what a group of agents asked for and received.
type meter struct {
	lists, watches atomic.Int64
	bytes          atomic.Int64 // decoded response body bytes read
	// Of lists: metadata-only (PartialObjectMetadataList) and exact reads
	// (resourceVersionMatch=Exact); the rest are full LISTs. metaOne
	// counts the metadata lists of one object (limit=1: a read of the
	// server's resourceVersion).
	metaLists, metaOne, exactLists atomic.Int64
	// fullListBytes counts the bytes of the full LISTs only;
	// fullListQuery is the query of the last one.
	fullListBytes atomic.Int64
	fullListQuery atomic.Pointer[string]
}

// transport is one agent's http.RoundTripper: it counts its requests and
// the decoded bytes of its responses into a meter (the apiserver gzips
// large responses; net/http has undone that below us), and notes when its
// first WATCH got its response headers.
type transport struct {
	next     http.RoundTripper
	m        *meter
	watching chan struct{}
	once     sync.Once
}

func newTransport(m *meter) *transport { return &transport{m: m, watching: make(chan struct{})} }

func (t *transport) wrap(rt http.RoundTripper) http.RoundTripper {
	t.next = rt
	return t
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	q := req.URL.Query()
	isWatch := q.Get("watch") == "true" || q.Get("watch") == "1"
	var also *atomic.Int64
	switch {
	case isWatch:
		t.m.watches.Add(1)
	case req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/pods"):
		t.m.lists.Add(1)
		switch {
		case strings.Contains(req.Header.Get("Accept"), "as=PartialObjectMetadataList"):
			t.m.metaLists.Add(1)
			if q.Get("limit") == "1" {
				t.m.metaOne.Add(1)
			}
		case q.Get("resourceVersionMatch") == "Exact":
			t.m.exactLists.Add(1)
		default:
			also = &t.m.fullListBytes
			rq := req.URL.RawQuery
			t.m.fullListQuery.Store(&rq)
		}
	}
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	resp.Body = &countingBody{ReadCloser: resp.Body, n: &t.m.bytes, also: also}
	if isWatch && resp.StatusCode == http.StatusOK {
		t.once.Do(func() { close(t.watching) })
	}
	return resp, nil
}

type countingBody struct {
	io.ReadCloser
	n, also *atomic.Int64 // also may be nil
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	if b.also != nil {
		b.also.Add(int64(n))
	}
	return n, err
}

// coreClient is a core/v1 RESTClient on cfg, as boltinformer's Factory and
// client-go's generated clients build it.
func coreClient(cfg *rest.Config) (*rest.RESTClient, error) {
	c := rest.CopyConfig(cfg)
	gv := corev1.SchemeGroupVersion
	c.GroupVersion = &gv
	c.APIPath = "/api"
	c.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	return rest.RESTClientFor(c)
}

// agentConfig is base with tr around its transport, and a connection of
// its own, as a separate process would have: client-go shares one
// transport (and so one HTTP/2 connection) among equal configs, but not
// among configs with a Proxy function.
func agentConfig(base *rest.Config, tr *transport) *rest.Config {
	cfg := rest.CopyConfig(base)
	cfg.Wrap(tr.wrap)
	cfg.Proxy = func(*http.Request) (*url.URL, error) { return nil, nil }
	return cfg
}

// podListWatch is the ListWatch every agent uses, whatever its informer:
// Pods in namespace ns ("" for all) with fieldSelector, through its own
// transport and connection.
func podListWatch(base *rest.Config, ns, fieldSelector string, tr *transport) (cache.ListerWatcher, error) {
	rc, err := coreClient(agentConfig(base, tr))
	if err != nil {
		return nil, err
	}
	tweak := func(o *metav1.ListOptions) { o.FieldSelector = fieldSelector }
	return cache.ToListWatcherWithWatchListSemantics(cache.NewFilteredListWatchFromClient(rc, "pods", ns, tweak), rc), nil
}

// kind of informer an agent runs.
type kind int

const (
	clientGo    kind = iota // cache.NewSharedIndexInformer, cold by nature
	bolt                    // boltinformer, cold or warm from its file
	connectOnly             // no informer: one GET /version on a new connection (the floor)
)

// agent is one informer process of the fleet (a goroutine here).
type agent struct {
	kind   kind
	tr     *transport
	inf    cache.SharedIndexInformer // nil for connectOnly
	db     *boltinformer.DB
	cancel context.CancelFunc
	done   chan struct{}
}

// synced is closed once the agent's informer has synced.
func (a *agent) synced() <-chan struct{} {
	if a.inf == nil {
		return a.done
	}
	return a.inf.HasSyncedChecker().Done()
}

// watching is closed once the agent's first WATCH was answered.
func (a *agent) watching() <-chan struct{} {
	if a.inf == nil {
		return a.done
	}
	return a.tr.watching
}

// startConnectOnly opens a connection like an agent and makes one cheap
// request: what any restart costs the apiserver before it lists or
// watches (TLS handshake, authentication).
func startConnectOnly(base *rest.Config, m *meter) (*agent, error) {
	tr := newTransport(m)
	rc, err := coreClient(agentConfig(base, tr))
	if err != nil {
		return nil, err
	}
	a := &agent{kind: connectOnly, tr: tr, done: make(chan struct{}), cancel: func() {}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := rc.Get().AbsPath("/version").Do(ctx).Error(); err != nil {
		return nil, err
	}
	close(a.done)
	return a, nil
}

// startAgent builds and runs an informer for Pods in ns matching
// fieldSelector; a bolt agent uses the cache file path.
func startAgent(base *rest.Config, k kind, ns, fieldSelector, path string, m *meter) (*agent, error) {
	tr := newTransport(m)
	lw, err := podListWatch(base, ns, fieldSelector, tr)
	if err != nil {
		return nil, err
	}
	a := &agent{kind: k, tr: tr, done: make(chan struct{})}
	indexers := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
	switch k {
	case clientGo:
		a.inf = cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, indexers)
	case bolt:
		db, err := boltinformer.Open(path, nil)
		if err != nil {
			return nil, err
		}
		inf, err := db.NewInformer("v1/pods", lw, &corev1.Pod{}, 0, indexers, &boltinformer.InformerOptions{
			ClusterID:   "fleet",
			Resource:    "/v1, Resource=pods",
			ListOptions: boltinformer.ListOptionsFingerprint(ns, metav1.ListOptions{FieldSelector: fieldSelector}),
		})
		if err != nil {
			_ = db.Close()
			return nil, err
		}
		a.db, a.inf = db, inf
	}
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	go func() {
		defer close(a.done)
		a.inf.RunWithContext(ctx)
	}()
	return a, nil
}

// stop stops the informer and closes its file.
func (a *agent) stop() error {
	a.cancel()
	<-a.done
	if a.db != nil {
		return a.db.Close()
	}
	return nil
}

// warm reports whether a bolt agent started from its file.
func (a *agent) warm() bool {
	inf, ok := a.inf.(*boltinformer.Informer)
	return ok && inf.Decision().Warm
}

// stormResult is what one simultaneous start of a fleet cost.
type stormResult struct {
	Name   string
	Agents int
	// Lists and Watches the agents sent; ServerLists the apiserver's
	// apiserver_request_total{verb="LIST",resource="pods"} delta.
	Lists, Watches int64
	ServerLists    float64
	// Bytes of response bodies (decoded) the agents read.
	Bytes int64
	// Synced: until every agent's HasSynced; Watching: until every agent's
	// first WATCH had its response.
	Synced, Watching time.Duration
	// APIServerCPU over the storm (start to all synced and watching, plus
	// settle); Net subtracts the idle rate over the same time.
	APIServerCPU, APIServerCPUNet, EtcdCPU, ClientCPU time.Duration
	Warm                                              int
}

func (r stormResult) String() string {
	return fmt.Sprintf("%-22s agents=%d LIST=%d (apiserver %.0f) WATCH=%d bytes=%s synced=%s watching=%s apiserverCPU=%s (net %s) etcdCPU=%s clientCPU=%s warm=%d",
		r.Name, r.Agents, r.Lists, r.ServerLists, r.Watches, mib(r.Bytes), r.Synced.Round(time.Millisecond), r.Watching.Round(time.Millisecond),
		r.APIServerCPU, r.APIServerCPUNet.Round(10*time.Millisecond), r.EtcdCPU, r.ClientCPU, r.Warm)
}

func mib(b int64) string {
	if b < 1<<20 {
		return fmt.Sprintf("%.1fKiB", float64(b)/1024)
	}
	return fmt.Sprintf("%.2fMiB", float64(b)/(1<<20))
}

// settle is how long a storm's measurement window extends past the last
// agent's sync, for the apiserver to finish what it started.
const settle = time.Second

// idleRate measures the apiserver's CPU per second with no agents
// starting.
func idleRate(tb testing.TB, c *harness.Cluster, d time.Duration) float64 {
	tb.Helper()
	cpu0, err := c.APIServerCPU()
	if err != nil {
		tb.Fatal(err)
	}
	time.Sleep(d)
	cpu1, err := c.APIServerCPU()
	if err != nil {
		tb.Fatal(err)
	}
	return float64(cpu1-cpu0) / float64(d)
}

// storm starts n agents at once with start and measures until every one
// has synced and its first WATCH has been answered. It returns the running
// agents.
func storm(tb testing.TB, c *harness.Cluster, name string, n int, idle float64, start func(i int, m *meter) (*agent, error)) (stormResult, []*agent) {
	tb.Helper()
	ctx := context.Background()
	m := &meter{}
	lists0, err := c.RequestCount(ctx, "LIST", "pods")
	if err != nil {
		tb.Fatal(err)
	}
	cpu0, _ := c.APIServerCPU()
	etcd0, _ := harness.ProcessCPU(c.EtcdPID())
	self0, _ := harness.ProcessCPU(os.Getpid())
	agents := make([]*agent, n)
	synced := make([]time.Duration, n)
	watching := make([]time.Duration, n)
	errs := make([]error, n)
	t0 := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, err := start(i, m)
			if err != nil {
				errs[i] = err
				return
			}
			agents[i] = a
			timeout := time.After(5 * time.Minute)
			for _, w := range []struct {
				ch <-chan struct{}
				at *time.Duration
			}{{a.synced(), &synced[i]}, {a.watching(), &watching[i]}} {
				select {
				case <-w.ch:
					*w.at = time.Since(t0)
				case <-timeout:
					errs[i] = errors.New("not synced and watching within 5 minutes")
					return
				}
			}
		}()
	}
	wg.Wait()
	end := time.Since(t0)
	time.Sleep(settle)
	cpu1, _ := c.APIServerCPU()
	etcd1, _ := harness.ProcessCPU(c.EtcdPID())
	self1, _ := harness.ProcessCPU(os.Getpid())
	lists1, err := c.RequestCount(ctx, "LIST", "pods")
	if err != nil {
		tb.Fatal(err)
	}
	r := stormResult{Name: name, Agents: n, Lists: m.lists.Load(), Watches: m.watches.Load(), ServerLists: lists1 - lists0,
		Bytes: m.bytes.Load(), APIServerCPU: cpu1 - cpu0, EtcdCPU: etcd1 - etcd0, ClientCPU: self1 - self0}
	r.APIServerCPUNet = r.APIServerCPU - time.Duration(idle*float64(end+settle))
	for i := range n {
		r.Synced = max(r.Synced, synced[i])
		r.Watching = max(r.Watching, watching[i])
		if agents[i] != nil && agents[i].warm() {
			r.Warm++
		}
	}
	if err := errors.Join(errs...); err != nil {
		stopAll(tb, agents)
		tb.Fatalf("%s: %v", name, err)
	}
	return r, agents
}

// stopAll stops agents in parallel.
func stopAll(tb testing.TB, agents []*agent) {
	tb.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(agents))
	for i, a := range agents {
		if a == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = a.stop()
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		tb.Error(err)
	}
}

// fleetPod is a Pod of about 2 KB (as JSON), bound to node.
func fleetPod(ns, name, node string, gen int) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name,
			Labels: map[string]string{"app": "fleet-workload", "tier": "backend", "gen": fmt.Sprint(gen),
				"app.kubernetes.io/part-of": "boltinformer-fleet", "pod-template-hash": "5d8f9c7b6d"},
			Annotations: map[string]string{"boltinformer.io/note": strings.Repeat("x", 200)},
		},
		Spec: corev1.PodSpec{
			NodeName: node,
			Containers: []corev1.Container{{
				Name:    "app",
				Image:   "registry.k8s.io/pause:3.10",
				Command: []string{"/pause"},
				Args:    []string{"--listen=:8080", "--log-level=info"},
				Env: []corev1.EnvVar{{Name: "NODE", Value: node}, {Name: "GEN", Value: fmt.Sprint(gen)},
					{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("64Mi")},
				},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}}},
			}},
			Tolerations: []corev1.Toleration{{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}},
		},
	}
}

// parallel runs f(0..n-1) on workers goroutines and returns the first
// error.
func parallel(ctx context.Context, n, workers int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n && ctx.Err() == nil; i = int(next.Add(1) - 1) {
				if err := f(ctx, i); err != nil {
					once.Do(func() { first = fmt.Errorf("item %d: %w", i, err); cancel() })
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// createPods creates n Pods in ns, name(i) on node(i).
func createPods(ctx context.Context, cs kubernetes.Interface, ns string, n int, name, node func(int) string) error {
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	return parallel(ctx, n, 16, func(ctx context.Context, i int) error {
		_, err := cs.CoreV1().Pods(ns).Create(ctx, fleetPod(ns, name(i), node(i), 0), metav1.CreateOptions{})
		return err
	})
}

func nodeSelector(node string) string {
	return fields.OneTermEqualSelector("spec.nodeName", node).String()
}

func cachePath(dir string, i int) string { return filepath.Join(dir, fmt.Sprintf("agent-%04d.db", i)) }
