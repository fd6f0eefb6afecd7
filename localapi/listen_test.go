package localapi_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/boltinformer/boltinformer/localapi"
)

// TestListenUnix: the socket is 0600; a symlink, a file or a directory at
// its path is refused untouched; a socket in use is refused; a stale one
// is replaced.
func TestListenUnix(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "api.sock")
	l, err := localapi.ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Lstat(sock)
	if err != nil || st.Mode().Type() != os.ModeSocket || st.Mode().Perm() != 0o600 {
		t.Fatalf("socket %v, mode %v", err, st.Mode())
	}
	if _, err := localapi.ListenUnix(sock); !errors.Is(err, localapi.ErrInUse) {
		t.Fatalf("a second listener: %v, want ErrInUse", err)
	}
	l.Close()
	if _, err := os.Lstat(sock); err != nil {
		t.Fatalf("the socket went with Close: %v", err)
	}
	if _, err := net.Dial("unix", sock); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("dial a closed listener's socket: %v, want connection refused", err)
	}
	l, err = localapi.ListenUnix(sock) // the stale socket is replaced
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("left in the directory: %v", entries)
	}

	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.sock")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{link, target, sub} {
		if _, err := localapi.ListenUnix(p); !errors.Is(err, localapi.ErrUnsafePath) {
			t.Errorf("ListenUnix(%s): %v, want ErrUnsafePath", p, err)
		}
	}
	if b, _ := os.ReadFile(target); string(b) != "keep" {
		t.Fatalf("the symlink's target changed: %q", b)
	}
	if st, err := os.Lstat(link); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the symlink changed: %v", err)
	}
}

// TestListenLocalTokenAndKubeconfig: only loopback addresses; without the
// bearer token a request is 401; a kubeconfig written for the listener
// works with client-go's clientcmd; a token file others may read is
// refused.
func TestListenLocalTokenAndKubeconfig(t *testing.T) {
	cdir := t.TempDir()
	cert, err := localapi.LoadOrCreateCert(filepath.Join(cdir, "tls.crt"), filepath.Join(cdir, "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(filepath.Join(cdir, "tls.key")); st.Mode().Perm() != 0o600 {
		t.Fatalf("key mode %v", st.Mode())
	}
	if again, err := localapi.LoadOrCreateCert(filepath.Join(cdir, "tls.crt"), filepath.Join(cdir, "tls.key")); err != nil || string(again.PEM) != string(cert.PEM) {
		t.Fatalf("certificate read back: %v", err)
	}
	for _, addr := range []string{"0.0.0.0:0", "192.0.2.1:80", ":0", "localhost:0"} {
		if _, err := localapi.ListenLocal(addr, cert); !errors.Is(err, localapi.ErrUnsafePath) {
			t.Errorf("ListenLocal(%q): %v, want ErrUnsafePath", addr, err)
		}
	}
	dir := t.TempDir()
	tokFile := filepath.Join(dir, "token")
	tok, err := localapi.LoadOrCreateToken(tokFile)
	if err != nil || len(tok) < 40 {
		t.Fatalf("token %q: %v", tok, err)
	}
	if st, _ := os.Stat(tokFile); st.Mode().Perm() != 0o600 {
		t.Fatalf("token file mode %v", st.Mode())
	}
	if again, err := localapi.LoadOrCreateToken(tokFile); err != nil || again != tok {
		t.Fatalf("token read back %q, %v", again, err)
	}
	loose := filepath.Join(dir, "loose")
	if err := os.WriteFile(loose, []byte("secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(tokFile, link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{loose, empty, link} {
		if _, err := localapi.LoadOrCreateToken(p); !errors.Is(err, localapi.ErrToken) {
			t.Errorf("LoadOrCreateToken(%s): %v, want ErrToken", p, err)
		}
	}

	a := startAgent(t, "", newPodSource(3))
	h, err := localapi.New(a.db, &localapi.Options{Token: tok, Logger: &quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	cfg := serve(t, h, tok)
	anon := rest.CopyConfig(cfg)
	anon.BearerToken = ""
	resp, err := httpClient(t, anon).Get(cfg.Host + "/api/v1/pods")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no token: %d", resp.StatusCode)
	}
	serverCert := &localapi.Cert{PEM: cfg.CAData}
	bad := restClient(t, localapi.LocalConfig(strings.TrimPrefix(cfg.Host, "https://"), "wrong", serverCert), schema.GroupVersion{Version: "v1"})
	if err := bad.Get().Resource("pods").Do(t.Context()).Error(); !apierrors.IsUnauthorized(err) {
		t.Fatalf("a wrong token: %v", err)
	}
	kc := filepath.Join(dir, "kubeconfig")
	if err := localapi.WriteKubeconfig(kc, strings.TrimPrefix(cfg.Host, "https://"), tok, serverCert); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(kc); st.Mode().Perm() != 0o600 {
		t.Fatalf("kubeconfig mode %v", st.Mode())
	}
	kcfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	var pods corev1.PodList
	if err := restClient(t, kcfg, schema.GroupVersion{Version: "v1"}).Get().Resource("pods").Do(context.Background()).Into(&pods); err != nil || len(pods.Items) != 3 {
		t.Fatalf("through the kubeconfig: %v, %d pods", err, len(pods.Items))
	}
}

// TestRegressionTornCertPairRegenerated: a crash between the two renames
// that write a generated certificate and its key leaves a pair that does
// not match; the next start generates a new pair instead of failing with
// ErrToken until someone deletes the files. A pair that is not ours and
// does not match is still ErrToken.
func TestRegressionTornCertPairRegenerated(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	cert := func(d string) string { return filepath.Join(d, "tls.crt") }
	key := func(d string) string { return filepath.Join(d, "tls.key") }
	for _, d := range []string{a, b} {
		if _, err := localapi.LoadOrCreateCert(cert(d), key(d)); err != nil {
			t.Fatal(err)
		}
	}
	other, err := os.ReadFile(key(b))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key(a), other, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := localapi.LoadOrCreateCert(cert(a), key(a))
	if err != nil {
		t.Fatalf("a torn generated pair: %v", err)
	}
	if _, err := localapi.LoadOrCreateCert(cert(a), key(a)); err != nil || c.TLS.Leaf == nil {
		t.Fatalf("the regenerated pair does not load: %v", err)
	}
	// Someone else's certificate with our key: not ours to replace.
	foreign := []byte("-----BEGIN CERTIFICATE-----\nMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA\n-----END CERTIFICATE-----\n")
	if err := os.WriteFile(cert(b), foreign, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := localapi.LoadOrCreateCert(cert(b), key(b)); !errors.Is(err, localapi.ErrToken) {
		t.Fatalf("a foreign pair that does not match: %v, want ErrToken", err)
	}
}

// ListenLocalKubeconfig with port 0 takes the port of the kubeconfig it
// wrote before (issue 26 item 6), and a free one when that port is taken.
func TestListenLocalKubeconfigKeepsPort(t *testing.T) {
	dir := t.TempDir()
	cert, err := localapi.LoadOrCreateCert(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	kc := filepath.Join(dir, "kubeconfig")
	l, err := localapi.ListenLocalKubeconfig(kc, "127.0.0.1:0", "tok", cert)
	if err != nil {
		t.Fatal(err)
	}
	first := l.Addr().String()
	l.Close()
	l, err = localapi.ListenLocalKubeconfig(kc, "127.0.0.1:0", "tok", cert)
	if err != nil {
		t.Fatal(err)
	}
	if l.Addr().String() != first {
		t.Fatalf("second listener on %s, the first on %s", l.Addr(), first)
	}
	// Taken (by the listener still open): another port, and the
	// kubeconfig names it.
	l2, err := localapi.ListenLocalKubeconfig(kc, "127.0.0.1:0", "tok", cert)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	l.Close()
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	if l2.Addr().String() == first || cfg.Host != "https://"+l2.Addr().String() {
		t.Fatalf("with the port taken: %s, kubeconfig %s", l2.Addr(), cfg.Host)
	}
}
