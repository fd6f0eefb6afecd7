package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/boltinformer/boltinformer/localapi"
)

// startServe runs `inspect serve` with args until the test ends; it
// returns a client config from the kubeconfig it wrote and a function
// that stops it and returns its output and exit code.
func startServe(t *testing.T, args ...string) (*rest.Config, func() (string, string, int)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan string, 1)
	oldCtx, oldStarted := serveContext, serveStarted
	serveContext = func() (context.Context, context.CancelFunc) { return ctx, cancel }
	serveStarted = func(kc string) { started <- kc }
	type result struct {
		stdout, stderr string
		code           int
	}
	done := make(chan result, 1)
	go func() {
		o, e, c := run(t, append([]string{"serve"}, args...)...)
		done <- result{o, e, c}
	}()
	var stop func() (string, string, int)
	var once bool
	var res result
	stop = func() (string, string, int) {
		if !once {
			once = true
			cancel()
			res = <-done
			serveContext, serveStarted = oldCtx, oldStarted
		}
		return res.stdout, res.stderr, res.code
	}
	t.Cleanup(func() { stop() })
	select {
	case kc := <-started:
		cfg, err := clientcmd.BuildConfigFromFlags("", kc)
		if err != nil {
			t.Fatal(err)
		}
		return cfg, stop
	case r := <-done:
		serveContext, serveStarted = oldCtx, oldStarted
		t.Fatalf("serve exited %d before serving:\n%s\n%s", r.code, r.stdout, r.stderr)
	case <-time.After(time.Minute):
		t.Fatal("serve did not start")
	}
	return nil, nil
}

func coreClient(t *testing.T, cfg *rest.Config) *rest.RESTClient {
	t.Helper()
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &schema.GroupVersion{Version: "v1"}
	c.APIPath = "/api"
	c.NegotiatedSerializer = scheme.Codecs.WithoutConversion()
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

// TestServe serves the fixture: Pods, the CRD's widgets and (with the key
// and --secrets) the Secrets, as of the file's resourceVersions; watches
// get the objects and a bookmark; the gadgets, whose type inspect cannot
// decode, are refused with the reason.
func TestServe(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "api.sock")
	cfg, stop := startServe(t, fixture(t), "--key-file", keyFile(t, testKey), "--secrets", "--socket", sock)
	rc := coreClient(t, cfg)
	var pods corev1.PodList
	if err := rc.Get().Resource("pods").Do(t.Context()).Into(&pods); err != nil || len(pods.Items) != 6 || pods.ResourceVersion != "120" {
		t.Fatalf("pods: %v, %d at %q", err, len(pods.Items), pods.ResourceVersion)
	}
	var secrets corev1.SecretList
	if err := rc.Get().Namespace("prod").Resource("secrets").Do(t.Context()).Into(&secrets); err != nil || len(secrets.Items) != 2 || string(secrets.Items[1].Data["password"]) != "hunter0" {
		t.Fatalf("secrets: %v, %+v", err, secrets.Items)
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	widgets, err := dc.Resource(schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}).List(t.Context(), metav1.ListOptions{})
	if err != nil || len(widgets.Items) != 3 || widgets.GetResourceVersion() != "220" {
		t.Fatalf("widgets: %v, %d at %q", err, len(widgets.Items), widgets.GetResourceVersion())
	}
	_, err = dc.Resource(schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "gadgets"}).Namespace("edge").Get(t.Context(), "gadget-0", metav1.GetOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "do not decode") {
		t.Fatalf("gadgets: %v, want 403 with the reason", err)
	}
	w, err := rc.Get().Namespace("ns-1").Resource("pods").VersionedParams(&metav1.ListOptions{Watch: true, SendInitialEvents: ptr.To(true),
		AllowWatchBookmarks: true, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan}, scheme.ParameterCodec).Watch(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var types []watch.EventType
	for e := range w.ResultChan() {
		types = append(types, e.Type)
		if e.Type == watch.Bookmark {
			break
		}
	}
	w.Stop()
	if strings.Join(eventTypes(types), ",") != "ADDED,ADDED,BOOKMARK" {
		t.Fatalf("watch: %v", types)
	}
	// The Unix socket needs no token.
	var one corev1.Pod
	if err := coreClient(t, localapi.UnixConfig(sock)).Get().Namespace("ns-0").Resource("pods").Name("pod-000003").Do(t.Context()).Into(&one); err != nil || one.Spec.NodeName != "node-1" {
		t.Fatalf("through the socket: %v %s", err, one.Spec.NodeName)
	}
	stdout, stderr, code := stop()
	if code != 0 || !strings.Contains(stdout, "informer v1/pods: 6 objects at resourceVersion 120") || !strings.Contains(stderr, `informer "example.com/v1/gadgets" not served`) {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}

func eventTypes(ts []watch.EventType) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = string(t)
	}
	return out
}

// TestServeRefusals: without the key, the encrypted Secrets are refused
// with the key's message; without --secrets, Secrets are refused anyway;
// a locked or missing file is the usual error.
func TestServeRefusals(t *testing.T) {
	cfg, stop := startServe(t, fixture(t))
	rc := coreClient(t, cfg)
	err := rc.Get().Namespace("prod").Resource("secrets").Do(t.Context()).Error()
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "--key-file") {
		t.Fatalf("encrypted secrets without a key: %v", err)
	}
	if err := rc.Post().Namespace("ns-0").Resource("pods").Body([]byte("{}")).Do(t.Context()).Error(); !apierrors.IsMethodNotSupported(err) {
		t.Fatalf("create: %v, want 405", err)
	}
	if _, _, code := stop(); code != 0 {
		t.Fatalf("exit %d", code)
	}
	cfg, stop = startServe(t, fixture(t), "--key-file", keyFile(t, testKey))
	if err := coreClient(t, cfg).Get().Namespace("prod").Resource("secrets").Do(t.Context()).Error(); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "--secrets") {
		t.Fatalf("secrets without --secrets: %v", err)
	}
	stop()
	if _, stderr, code := run(t, "serve", filepath.Join(t.TempDir(), "missing.db")); code != exitFailure || !strings.Contains(stderr, "no such file") {
		t.Fatalf("missing file: %d %s", code, stderr)
	}
	if _, stderr, code := run(t, "serve", fixture(t), "--listen", ""); code != exitFailure || !strings.Contains(stderr, "nothing to serve on") {
		t.Fatalf("no listener: %d %s", code, stderr)
	}
	if _, stderr, code := run(t, "serve", fixture(t), "--listen", "0.0.0.0:0"); code != exitFailure || !strings.Contains(stderr, "not a loopback address") {
		t.Fatalf("a public address: %d %s", code, stderr)
	}
}

// A restart of `inspect serve` with the same --state-dir (or --kubeconfig)
// and the default --listen 127.0.0.1:0 serves on the same port, so that a
// long-running client (kubectl -w, an informer) reconnects with the
// kubeconfig it read (issue 26 item 6: each start took a new port and
// rewrote the kubeconfig).
func TestRegressionServeKeepsPort(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	cfg, stop := startServe(t, fixture(t), "--state-dir", state)
	first := cfg.Host
	if _, _, code := stop(); code != 0 {
		t.Fatalf("exit %d", code)
	}
	cfg, stop = startServe(t, fixture(t), "--state-dir", state)
	defer stop()
	if cfg.Host != first {
		t.Fatalf("the second start serves on %s, the first on %s", cfg.Host, first)
	}
	var pods corev1.PodList
	if err := coreClient(t, cfg).Get().Resource("pods").Do(t.Context()).Into(&pods); err != nil || len(pods.Items) != 6 {
		t.Fatalf("pods: %v, %d", err, len(pods.Items))
	}
}
