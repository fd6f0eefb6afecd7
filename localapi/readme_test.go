package localapi_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/localapi"
	"github.com/boltinformer/boltinformer/recovery/crashtest"
)

// serveLocalAPI is README.md's Local API example, word for word (the root
// package's TestRegressionReadmeGoBlocksCompile keeps the two equal): the
// local API of an agent's factory, in the directory dir.
func serveLocalAPI(ctx context.Context, db *boltinformer.DB, factory *boltinformer.Factory, dir string) error {
	token, err := localapi.LoadOrCreateToken(filepath.Join(dir, "token")) // 0600, 256 random bits
	if err != nil {
		return err
	}
	cert, err := localapi.LoadOrCreateCert(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		return err
	}
	// Before factory.Start: the window then holds every event.
	h, err := localapi.New(db, &localapi.Options{Token: token})
	if err != nil {
		return err
	}
	defer h.Close()
	// TLS on loopback, with the token, for kubectl and every language's
	// client; the kubeconfig's port is taken again at the next start.
	tcp, err := localapi.ListenLocalKubeconfig(filepath.Join(dir, "kubeconfig"), "127.0.0.1:0", token, cert)
	if err != nil {
		return err
	}
	// A Unix socket, mode 0600, no token: Go clients (localapi.UnixConfig).
	sock, err := localapi.ListenUnix(filepath.Join(dir, "api.sock"))
	if err != nil {
		return err
	}
	errc := make(chan error, 2)
	go func() { errc <- h.Serve(ctx, tcp) }()
	go func() { errc <- h.Serve(ctx, sock) }()
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	return errors.Join(<-errc, <-errc) // each Serve returns once ctx is done
}

// TestReadmeLocalAPI runs the README's Local API example in an agent
// whose factory reads a fake API server: its kubeconfig and its socket
// both list the Pods.
func TestReadmeLocalAPI(t *testing.T) {
	pods := newPodSource(5)
	api := crashtest.NewHandler()
	api.Serve(corev1.SchemeGroupVersion.WithResource("pods"), pods)
	srv := httptest.NewServer(api)
	defer srv.Close()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	db, err := boltinformer.Open(filepath.Join(dir, "cache.db"), &boltinformer.Options{NoSync: true, Logger: &quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	factory, err := boltinformer.NewFactory(db, &rest.Config{Host: srv.URL}, &boltinformer.FactoryOptions{Informer: boltinformer.InformerOptions{Logger: &quietLogger}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := factory.PersistentInformer(&corev1.Pod{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serveLocalAPI(ctx, db, factory, dir) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	waitFor(t, "the kubeconfig", func() bool { _, err := os.Stat(filepath.Join(dir, "kubeconfig")); return err == nil })
	kc, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	for name, cfg := range map[string]*rest.Config{"kubeconfig": kc, "socket": localapi.UnixConfig(filepath.Join(dir, "api.sock"))} {
		rc := restClient(t, cfg, schema.GroupVersion{Version: "v1"})
		waitFor(t, "the "+name+" to list the 5 Pods", func() bool {
			list := &corev1.PodList{}
			err := rc.Get().Resource("pods").Timeout(10 * time.Second).Do(ctx).Into(list)
			return err == nil && len(list.Items) == 5
		})
	}
}
