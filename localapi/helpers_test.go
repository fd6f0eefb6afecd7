package localapi_test

import (
	"context"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/internal/testobj"
	"github.com/boltinformer/boltinformer/localapi"
	"github.com/boltinformer/boltinformer/recovery/crashtest"
)

// waitTimeout bounds every wait: a deadline for a hang, not a threshold.
const waitTimeout = 60 * time.Second

var quietLogger = klog.Background().V(5)

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", waitTimeout, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// agent is a DB with a Pods informer fed by a fake API server, running.
type agent struct {
	path string
	src  *crashtest.Source
	db   *boltinformer.DB
	pods *boltinformer.Informer
	stop func()
}

func newPodSource(n int) *crashtest.Source {
	src := crashtest.NewSource(func() runtime.Object { return &corev1.PodList{} })
	for i := range n {
		if _, err := src.Create(testobj.Pod(i, 3, 2, "")); err != nil {
			panic(err)
		}
	}
	return src
}

// startAgent opens path (a new file in a temp dir when "") and runs a pods
// informer named "v1/pods" on src, with handlers registered before Run,
// until the test ends or stop is called.
func startAgent(t testing.TB, path string, src *crashtest.Source, handlers ...cache.ResourceEventHandler) *agent {
	t.Helper()
	return startAgentWith(t, path, src, nil, handlers...)
}

// startAgentWith is startAgent calling beforeRun (when not nil) with the
// agent whose informer is built but not running yet.
func startAgentWith(t testing.TB, path string, src *crashtest.Source, beforeRun func(*agent), handlers ...cache.ResourceEventHandler) *agent {
	t.Helper()
	if path == "" {
		path = filepath.Join(t.TempDir(), "cache.db")
	}
	db, err := boltinformer.Open(path, &boltinformer.Options{NoSync: true, Logger: &quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	pods, err := db.NewInformer("v1/pods", src, &corev1.Pod{}, 0, nil, &boltinformer.InformerOptions{Resource: "/v1, Resource=pods"})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range handlers {
		if _, err := pods.AddEventHandler(h); err != nil {
			t.Fatal(err)
		}
	}
	a := &agent{path: path, src: src, db: db, pods: pods}
	if beforeRun != nil {
		beforeRun(a)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		pods.RunWithContext(ctx)
	}()
	var once sync.Once
	a.stop = func() {
		once.Do(func() {
			cancel()
			<-done
			if err := db.Close(); err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(a.stop)
	waitFor(t, "the informer to sync", pods.HasSynced)
	return a
}

// caughtUp waits until the informer has applied the source's last event,
// and commits it: the local API serves what is on disk only.
func (a *agent) caughtUp(t testing.TB) {
	t.Helper()
	waitFor(t, "the informer to catch up with "+a.src.ResourceVersion(), func() bool {
		return a.pods.Indexer().ResourceVersion() == a.src.ResourceVersion()
	})
	if err := a.db.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// serve serves h on 127.0.0.1 until the test ends and returns a config
// for it.
func serve(t testing.TB, h *localapi.Handler, token string) *rest.Config {
	t.Helper()
	dir := t.TempDir()
	cert, err := localapi.LoadOrCreateCert(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	l, err := localapi.ListenLocal("", cert)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
		_ = h.Close()
	})
	cfg := localapi.LocalConfig(l.Addr().String(), token, cert)
	cfg.QPS = -1
	return cfg
}

// serveAgent serves a's DB with opts; it returns the handler, its config
// and a REST client of core/v1.
func serveAgent(t testing.TB, a *agent, opts *localapi.Options) (*localapi.Handler, *rest.Config, *rest.RESTClient) {
	t.Helper()
	if opts == nil {
		opts = &localapi.Options{}
	}
	if opts.Logger == nil {
		opts.Logger = &quietLogger
	}
	h, err := localapi.New(a.db, opts)
	if err != nil {
		t.Fatal(err)
	}
	cfg := serve(t, h, opts.Token)
	return h, cfg, restClient(t, cfg, schema.GroupVersion{Version: "v1"})
}

// restClient is client-go's REST client of gv, with the typed scheme
// (the library's tests use no typed clientset: it would pull OpenAPI
// modules into go.mod).
func restClient(t testing.TB, cfg *rest.Config, gv schema.GroupVersion) *rest.RESTClient {
	t.Helper()
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &gv
	c.APIPath = "/apis"
	if gv.Group == "" {
		c.APIPath = "/api"
	}
	c.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

// httpClient is an HTTP client for cfg (its CA and token).
func httpClient(t testing.TB, cfg *rest.Config) *http.Client {
	t.Helper()
	c, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
