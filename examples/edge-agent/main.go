package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/boltinformer/boltinformer"
)

type config struct {
	kubeconfig, node, namespace, cachePath, listen, keyFile string
	report, once                                            bool
	duration                                                time.Duration
}

func main() {
	var c config
	flag.StringVar(&c.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the cluster")
	flag.StringVar(&c.node, "node", "node-1", "the node this agent runs on (Pods are selected by spec.nodeName)")
	flag.StringVar(&c.namespace, "namespace", "edge", "namespace of the ConfigMaps and Secrets the agent needs")
	flag.StringVar(&c.cachePath, "cache", "edge-agent.db", "the cache file")
	flag.StringVar(&c.listen, "listen", "127.0.0.1:0", "loopback address for /metrics, /healthz and /status")
	flag.StringVar(&c.keyFile, "secret-key-file", "", "file with a base64 AES key to encrypt cached Secrets (default: the demo's fixed key, not a secret)")
	flag.BoolVar(&c.report, "report", false, "print one JSON line with start timings and request counts once synced")
	flag.BoolVar(&c.once, "once", false, "exit after the report (with -report)")
	flag.DurationVar(&c.duration, "duration", 0, "run this long, then stop (0: until SIGTERM)")
	klog.InitFlags(nil)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if c.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, c.duration, errDurationElapsed)
		defer cancel()
	}
	err := run(ctx, c)
	switch {
	case errors.Is(err, errStoppedBeforeSync):
		// A signal (or -duration) is a requested stop, not a failure.
		fmt.Fprintln(os.Stderr, "edge-agent:", err)
	case err != nil:
		fmt.Fprintln(os.Stderr, "edge-agent:", err)
		os.Exit(1)
	}
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

func run(ctx context.Context, c config) error {
	start := time.Now()
	rc, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	counter := &requestCounter{}
	rc.Wrap(func(rt http.RoundTripper) http.RoundTripper { counter.next = rt; return counter })

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector())
	db, err := boltinformer.Open(c.cachePath, &boltinformer.Options{Registerer: reg})
	if err != nil {
		return err
	}
	defer db.Close()
	key, err := secretKey(c.keyFile)
	if err != nil {
		return err
	}
	nodeSelector := fields.OneTermEqualSelector("spec.nodeName", c.node).String()
	podFactory, err := boltinformer.NewFactory(db, rc, &boltinformer.FactoryOptions{
		TweakListOptions: func(o *metav1.ListOptions) { o.FieldSelector = nodeSelector },
		LookupTimeout:    2 * time.Second,
	})
	if err != nil {
		return err
	}
	nsFactory, err := boltinformer.NewFactory(db, rc, &boltinformer.FactoryOptions{
		Namespace:     c.namespace,
		ClusterID:     podFactory.ClusterID(),
		Keyrings:      map[string]*boltinformer.Keyring{"secrets": {Current: "k1", Keys: map[string][]byte{"k1": key}}},
		LookupTimeout: 2 * time.Second,
	})
	if err != nil {
		return err
	}
	pods, err := podFactory.InformerFor(&corev1.Pod{}, "pods", nil)
	if err != nil {
		return err
	}
	cms, err := nsFactory.InformerFor(&corev1.ConfigMap{}, "configmaps", nil)
	if err != nil {
		return err
	}
	secrets, err := nsFactory.InformerFor(&corev1.Secret{}, "secrets", nil)
	if err != nil {
		return err
	}
	a, err := newAgent(pods, cms, secrets)
	if err != nil {
		return err
	}

	// Listers serve at once, from disk on a warm start.
	first, _ := a.podLister.List(labels.Everything())
	firstAt := time.Since(start)

	srv, addr, err := serve(c.listen, reg, db, a.podLister, c.node)
	if err != nil {
		return err
	}
	defer srv.Close()
	klog.InfoS("Edge agent serving", "addr", addr, "node", c.node, "cache", c.cachePath)

	runCtx, cancel := context.WithCancel(ctx)
	podFactory.Start(runCtx)
	nsFactory.Start(runCtx)
	defer func() {
		cancel()
		podFactory.Shutdown()
		nsFactory.Shutdown()
	}()
	if !cache.WaitForCacheSync(ctx.Done(), a.synced) {
		// Only ctx ends the wait: a signal or -duration.
		return fmt.Errorf("%w (%v); not synced: %s", errStoppedBeforeSync, context.Cause(ctx), strings.Join(a.unsynced(), ", "))
	}
	syncedAt := time.Since(start)
	if c.report {
		// Let the resumed watches reach the server before counting.
		waitResumed(ctx, 10*time.Second, a.informers()...)
		podsNow, _ := a.podLister.List(labels.Everything())
		cmsNow, _ := a.configMapLister.List(labels.Everything())
		secretsNow, _ := a.secretLister.List(labels.Everything())
		r := Report{
			Start:           map[string]string{},
			FirstListerPods: len(first),
			FirstListerMS:   ms(firstAt),
			SyncedMS:        ms(syncedAt),
			Requests:        counter.snapshot(),
			PodsOnNode:      len(podsNow),
			ConfigMaps:      len(cmsNow),
			Secrets:         len(secretsNow),
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
		fmt.Println(string(b))
		if c.once {
			return nil
		}
	}
	<-ctx.Done()
	return nil
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

// secretKey reads a base64 AES key, or derives the demo's fixed one.
func secretKey(path string) ([]byte, error) {
	if path == "" {
		return []byte("boltinformer-demo-key-32-bytes!!"), nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return base64.StdEncoding.DecodeString(strings.TrimSpace(string(b)))
}

func serve(listen string, reg *prometheus.Registry, db *boltinformer.DB, pods corev1listers.PodLister, node string) (*http.Server, string, error) {
	host, _, err := net.SplitHostPort(listen)
	if err != nil || net.ParseIP(host) == nil || !net.ParseIP(host).IsLoopback() {
		return nil, "", fmt.Errorf("-listen %q: must be a loopback address", listen)
	}
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, "", err
	}
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
	go func() { _ = srv.Serve(l) }()
	return srv, l.Addr().String(), nil
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
