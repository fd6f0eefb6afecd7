package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/boltinformer/boltinformer"
)

// config is the agent's command line.
type config struct {
	kubeconfig, node, namespace, cachePath, listen, keyFile string
	secrets, keepManagedFields, report, once                bool
	duration                                                time.Duration
	// The local API: on (api) by default, on the Unix socket apiSocket;
	// with apiListen also with TLS on a loopback address, its token,
	// certificate and kubeconfig in apiDir.
	api                          bool
	apiSocket, apiListen, apiDir string
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := agentMain(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// agentMain is main without the signals: it parses and checks the command
// line, reads the key file and the kubeconfig, and only then opens the
// cache file and runs the agent until ctx ends (or -duration, or -once).
// It returns the exit status: 0, 1 on an error, 2 on a usage error.
func agentMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "edge-agent:", err)
		return 2
	}
	if c.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, c.duration, errDurationElapsed)
		defer cancel()
	}
	err = run(ctx, c, stdout)
	switch {
	case errors.Is(err, errStoppedBeforeSync):
		// A signal (or -duration) is a requested stop, not a failure.
		fmt.Fprintln(stderr, "edge-agent:", err)
	case err != nil:
		fmt.Fprintln(stderr, "edge-agent:", err)
		return 1
	}
	return 0
}

// parseFlags parses args into a config and checks every value that can be
// checked without reading a file.
func parseFlags(args []string, stderr io.Writer) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("edge-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the cluster")
	fs.StringVar(&c.node, "node", "node-1", "the node this agent runs on (Pods are selected by spec.nodeName)")
	fs.StringVar(&c.namespace, "namespace", "edge", "namespace of the ConfigMaps and Secrets the agent needs")
	fs.StringVar(&c.cachePath, "cache", "edge-agent.db", "the cache file")
	fs.StringVar(&c.listen, "listen", "127.0.0.1:0", `address of /metrics, /healthz and /status (":9090" for every interface; /status lists the node's Pods)`)
	fs.StringVar(&c.keyFile, "key-file", "", "keys that encrypt the cached Secrets at rest: a Kubernetes EncryptionConfiguration with an aesgcm provider for secrets (required with -secrets)")
	fs.BoolVar(&c.secrets, "secrets", true, "cache the namespace's Secrets (encrypted with -key-file)")
	fs.BoolVar(&c.keepManagedFields, "keep-managed-fields", false, "keep metadata.managedFields in the cache (by default a transform drops them: the agent never reads them)")
	fs.BoolVar(&c.report, "report", false, "print one JSON line with start timings and request counts once synced")
	fs.BoolVar(&c.once, "once", false, "exit after the report (with -report)")
	fs.DurationVar(&c.duration, "duration", 0, "run this long, then stop (0: until SIGTERM)")
	fs.BoolVar(&c.api, "api", true, "serve the node's cache as a read-only Kubernetes API (the local API) on -api-socket, and on -api-listen when given")
	fs.StringVar(&c.apiSocket, "api-socket", "", "the local API's Unix socket, mode 0600, no token (default: beside -cache, edge-agent.sock for edge-agent.db)")
	fs.StringVar(&c.apiListen, "api-listen", "", `also serve the local API with TLS and a bearer token on this loopback address, for kubectl and other languages' clients ("127.0.0.1:0": a free port, kept across restarts); writes -api-dir/kubeconfig`)
	fs.StringVar(&c.apiDir, "api-dir", "", "directory (0700) of the local API's token, TLS certificate and key, and kubeconfig (default: beside -cache, edge-agent-api for edge-agent.db)")
	klog.InitFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	base := strings.TrimSuffix(c.cachePath, filepath.Ext(c.cachePath))
	if c.apiSocket == "" {
		c.apiSocket = base + ".sock"
	}
	if c.apiDir == "" {
		c.apiDir = base + "-api"
	}
	return c, c.validate()
}

// validate checks the flags that need no file.
func (c *config) validate() error {
	var errs []error
	if errs1 := validation.IsDNS1123Subdomain(c.node); len(errs1) > 0 {
		errs = append(errs, fmt.Errorf("-node %q: %s", c.node, strings.Join(errs1, "; ")))
	}
	if errs1 := validation.IsDNS1123Label(c.namespace); len(errs1) > 0 {
		errs = append(errs, fmt.Errorf("-namespace %q: %s", c.namespace, strings.Join(errs1, "; ")))
	}
	if c.cachePath == "" {
		errs = append(errs, errors.New("-cache: give the cache file"))
	}
	if _, port, err := net.SplitHostPort(c.listen); err != nil {
		errs = append(errs, fmt.Errorf(`-listen %q: want host:port, e.g. 127.0.0.1:9090 or ":9090" (every interface)`, c.listen))
	} else if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		errs = append(errs, fmt.Errorf("-listen %q: port %q is not a port number", c.listen, port))
	}
	if c.secrets && c.keyFile == "" {
		errs = append(errs, errors.New("-key-file: required to cache Secrets, which are encrypted at rest: "+
			"give an EncryptionConfiguration with an aesgcm key for secrets, or -secrets=false"))
	}
	if c.once && !c.report {
		errs = append(errs, errors.New("-once: only with -report"))
	}
	if c.duration < 0 {
		errs = append(errs, fmt.Errorf("-duration %s is negative", c.duration))
	}
	if c.apiListen != "" {
		host, _, err := net.SplitHostPort(c.apiListen)
		if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
			errs = append(errs, fmt.Errorf("-api-listen %q: want a loopback address and port, e.g. 127.0.0.1:6443 (its only authentication is the token)", c.apiListen))
		}
		if !c.api {
			errs = append(errs, errors.New("-api-listen: the local API is off (-api=false)"))
		}
	}
	return errors.Join(errs...)
}

// secretsKeyring is the Keyrings entry of the core group's Secrets in
// what boltinformer.ReadEncryptionConfiguration returns.
const secretsKeyring = "secrets.v1."

// readKeys reads -key-file, which must seal Secrets when they are cached.
func (c *config) readKeys() (map[string]*boltinformer.Keyring, error) {
	if c.keyFile == "" {
		return nil, nil
	}
	keyrings, err := boltinformer.ReadEncryptionConfiguration(c.keyFile)
	if err != nil {
		return nil, fmt.Errorf("-key-file: %w", err)
	}
	if c.secrets {
		k := keyrings[secretsKeyring]
		switch {
		case k == nil:
			return nil, fmt.Errorf("-key-file %s: no aesgcm key for secrets: Secrets would be cached in plaintext", c.keyFile)
		case k.Current == "":
			return nil, fmt.Errorf("-key-file %s: the first provider for secrets is identity: Secrets would be cached in plaintext", c.keyFile)
		}
	}
	return keyrings, nil
}

var (
	// errStoppedBeforeSync is run's error when the agent is told to stop
	// (SIGTERM, SIGINT or -duration) before its caches have synced, e.g.
	// during a cold start against a slow or unreachable server. main exits
	// 0 after it: the stop was asked for.
	errStoppedBeforeSync = errors.New("stopped before the caches synced")
	// errDurationElapsed is the cause of the stop after -duration.
	errDurationElapsed = errors.New("-duration elapsed")
)

// Report is what -report prints.
type Report struct {
	Start            map[string]string `json:"start"` // informer -> warm/cold: reason
	FirstListerPods  int               `json:"firstListerPods"`
	FirstListerMS    float64           `json:"firstListerMs"`
	SyncedMS         float64           `json:"syncedMs"`
	Requests         map[string]int64  `json:"requests"` // LIST, WATCH, GET
	PodsOnNode       int               `json:"podsOnNode"`
	ConfigMaps       int               `json:"configMaps"`
	Secrets          int               `json:"secrets"`
	FirstRequestVerb string            `json:"firstRequestVerb"`
}

// testHookSynced, when set, is called once the caches have synced (the
// restart test's hook into main's own wiring); its error ends run.
var testHookSynced func(ctx context.Context, a *agent) error

// run is the agent: everything that needs no file has been checked
// (parseFlags); it reads the key file and the kubeconfig, then opens the
// cache file, builds the informers from one factory and runs them until
// ctx ends.
func run(ctx context.Context, c *config, stdout io.Writer) error {
	start := time.Now()
	keyrings, err := c.readKeys()
	if err != nil {
		return err
	}
	rc, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	counter := &requestCounter{}
	rc.Wrap(func(rt http.RoundTripper) http.RoundTripper { counter.next = rt; return counter })
	// The listeners before the file, too: a taken port fails here.
	l, err := net.Listen("tcp", c.listen)
	if err != nil {
		return fmt.Errorf("-listen: %w", err)
	}
	defer l.Close()
	api, err := c.listenAPI()
	if err != nil {
		return err
	}
	defer api.close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector())
	db, err := boltinformer.Open(c.cachePath, &boltinformer.Options{Registerer: reg})
	if err != nil {
		return err
	}
	defer db.Close()
	f, a, err := newAgentFromFactory(db, rc, c, keyrings)
	if err != nil {
		return err
	}

	// The informers start first: a warm start resumes its watches and is
	// synced (its file loaded) while the lister below decodes. The local
	// API just before them: its window then holds every event. It stops
	// (its watches end) before the informers do.
	runCtx, cancel := context.WithCancel(ctx)
	stopAPI, err := api.serve(runCtx, db)
	if err != nil {
		cancel()
		return err
	}
	f.StartWithContext(runCtx)
	defer func() {
		cancel()
		stopAPI()
		f.Shutdown() // before db.Close: the informers stop, then the file is flushed
	}()
	// Synced is watched beside the lister's first answer: on a warm start
	// the file is loaded (synced) while the lister decodes. It waits on the
	// informers' sync channels: cache.WaitForCacheSync polls every 100 ms,
	// which would be most of a warm start.
	syncedCh := make(chan time.Duration, 1)
	go func() {
		if cache.WaitFor(ctx, "edge agent", a.syncedCheckers()...) {
			syncedCh <- time.Since(start)
		}
		close(syncedCh)
	}()
	// Listers serve at once, from disk on a warm start.
	first, _ := a.podLister.List(labels.Everything())
	firstAt := time.Since(start)

	srv := serve(l, reg, db, a.podLister, c.node)
	defer srv.Close()
	klog.InfoS("Edge agent serving", "addr", l.Addr().String(), "node", c.node, "cache", c.cachePath)
	syncedAt, ok := <-syncedCh
	if !ok {
		// Only ctx ends the wait: a signal or -duration.
		return fmt.Errorf("%w (%v); not synced: %s", errStoppedBeforeSync, context.Cause(ctx), strings.Join(a.unsynced(), ", "))
	}
	if testHookSynced != nil {
		if err := testHookSynced(ctx, a); err != nil {
			return err
		}
	}
	if c.report {
		// Let the resumed watches reach the server before counting.
		waitResumed(ctx, 10*time.Second, a.informers()...)
		r := Report{
			Start:           map[string]string{},
			FirstListerPods: len(first),
			FirstListerMS:   ms(firstAt),
			SyncedMS:        ms(syncedAt),
			Requests:        counter.snapshot(),
		}
		podsNow, _ := a.podLister.List(labels.Everything())
		cmsNow, _ := a.configMapLister.List(labels.Everything())
		r.PodsOnNode, r.ConfigMaps = len(podsNow), len(cmsNow)
		if a.secretLister != nil {
			secretsNow, _ := a.secretLister.List(labels.Everything())
			r.Secrets = len(secretsNow)
		}
		r.FirstRequestVerb = counter.firstVerb()
		for _, inf := range a.informers() {
			d := inf.Decision()
			mode := "cold"
			if d.Warm {
				mode = "warm"
			}
			r.Start[inf.Name()] = mode + ": " + d.Reason
		}
		b, _ := json.Marshal(r)
		fmt.Fprintln(stdout, string(b))
		if c.once {
			return nil
		}
	}
	<-ctx.Done()
	return nil
}

// stripManagedFieldsID is the TransformID of stripManagedFields: a file
// written with another transform (or none) is not resumed, but relisted.
const stripManagedFieldsID = "edge-agent/strip-managed-fields/v1"

// stripManagedFields drops metadata.managedFields, which the agent never
// reads and which are a large part of every object (server-side apply
// bookkeeping), before objects are stored and written to disk.
func stripManagedFields(obj any) (any, error) {
	if m, err := meta.Accessor(obj); err == nil {
		m.SetManagedFields(nil)
	}
	return obj, nil // DeletedFinalStateUnknown and others: as they are
}

// newAgentFromFactory builds the agent's informers from one factory over
// db: the Pods bound to the node in every namespace, the ConfigMaps and
// (with -secrets) the Secrets of the namespace, Secrets sealed with the
// key file's keys, managedFields dropped unless -keep-managed-fields. The
// caller starts the factory.
func newAgentFromFactory(db *boltinformer.DB, rc *rest.Config, c *config, keyrings map[string]*boltinformer.Keyring) (*boltinformer.Factory, *agent, error) {
	nodeSelector := fields.OneTermEqualSelector("spec.nodeName", c.node).String()
	opts := &boltinformer.FactoryOptions{
		Scopes: map[string]boltinformer.Scope{
			"pods":       {TweakListOptions: func(o *metav1.ListOptions) { o.FieldSelector = nodeSelector }},
			"configmaps": {Namespace: c.namespace},
			"secrets":    {Namespace: c.namespace},
		},
		Keyrings:      keyrings,
		LookupTimeout: 2 * time.Second,
	}
	if !c.keepManagedFields {
		opts.Informer.TransformID = stripManagedFieldsID
	}
	f, err := boltinformer.NewFactory(db, rc, opts)
	if err != nil {
		return nil, nil, err
	}
	informer := func(example runtime.Object) (*boltinformer.Informer, error) {
		inf, err := f.PersistentInformer(example)
		if err != nil {
			return nil, err
		}
		if !c.keepManagedFields {
			if err := inf.SetTransform(stripManagedFields); err != nil {
				return nil, err
			}
		}
		return inf, nil
	}
	pods, err := informer(&corev1.Pod{})
	if err != nil {
		return nil, nil, err
	}
	cms, err := informer(&corev1.ConfigMap{})
	if err != nil {
		return nil, nil, err
	}
	var secrets *boltinformer.Informer
	if c.secrets {
		if secrets, err = informer(&corev1.Secret{}); err != nil {
			return nil, nil, err
		}
	}
	a, err := newAgent(pods, cms, secrets)
	if err != nil {
		return nil, nil, err
	}
	return f, a, nil
}

func waitResumed(ctx context.Context, d time.Duration, infs ...*boltinformer.Informer) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for _, inf := range infs {
		for !inf.WatchStats().Resumed && inf.WatchStats().Watches == 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// serve serves /metrics, /healthz and /status on l until Close.
func serve(l net.Listener, reg *prometheus.Registry, db *boltinformer.DB, pods corev1listers.PodLister, node string) *http.Server {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/healthz", db.HealthHandler())
	mux.HandleFunc("/status", func(w http.ResponseWriter, _ *http.Request) {
		list, _ := pods.List(labels.Everything())
		sort.Slice(list, func(i, j int) bool { return list[i].Namespace+list[i].Name < list[j].Namespace+list[j].Name })
		fmt.Fprintf(w, "node %s: %d pods\n", node, len(list))
		for _, p := range list {
			fmt.Fprintf(w, "%s/%s\t%s\trv=%s\n", p.Namespace, p.Name, p.Status.Phase, p.ResourceVersion)
		}
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }() // ends with srv.Close
	return srv
}

// requestCounter counts the agent's requests by verb: LIST, WATCH, GET.
type requestCounter struct {
	next                 http.RoundTripper
	lists, watches, gets atomic.Int64
	first                atomic.Value
}

func (c *requestCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	verb := "GET"
	q := r.URL.Query()
	switch {
	case q.Get("watch") == "true" || q.Get("watch") == "1":
		verb = "WATCH"
		c.watches.Add(1)
	case isCollection(r.URL.Path):
		verb = "LIST"
		c.lists.Add(1)
	default:
		c.gets.Add(1)
	}
	c.first.CompareAndSwap(nil, verb)
	return c.next.RoundTrip(r)
}

// isCollection tells /api/v1/pods and /api/v1/namespaces/x/pods (LIST)
// from /api/v1/namespaces/x (GET).
func isCollection(path string) bool {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	i := 2 // after api/v1
	if len(parts) > 0 && parts[0] == "apis" {
		i = 3
	}
	rest := parts[min(i, len(parts)):]
	if len(rest) >= 2 && rest[0] == "namespaces" {
		rest = rest[2:]
	}
	return len(rest) == 1
}

func (c *requestCounter) snapshot() map[string]int64 {
	return map[string]int64{"LIST": c.lists.Load(), "WATCH": c.watches.Load(), "GET": c.gets.Load()}
}

func (c *requestCounter) firstVerb() string {
	v, _ := c.first.Load().(string)
	return v
}
