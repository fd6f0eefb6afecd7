package boltinformer_test

// The factory's cluster identity: only a server that cannot be reached
// makes an offline start (the file trusted unchecked); any answer of the
// server that is not the kube-system namespace, or a server the config
// does not trust, is NewFactory's error; the endpoint identity needs no
// API call.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/recovery"
	"github.com/boltinformer/boltinformer/recovery/crashtest"
)

// podsFileFor makes a file at path whose informer "v1/pods" (as the
// factory names it) is synced for cluster clusterID.
func podsFileFor(t *testing.T, path, clusterID string) {
	t.Helper()
	db, err := boltinformer.Open(path, &boltinformer.Options{Logger: &quietLogger, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	inf, err := db.NewInformer("v1/pods", podSource(t, 3), &corev1.Pod{}, 0, podIndexers(), &boltinformer.InformerOptions{
		ClusterID:   clusterID,
		Resource:    schema.GroupVersionResource{Version: "v1", Resource: "pods"}.String(),
		ListOptions: boltinformer.ListOptionsFingerprint("", metav1.ListOptions{}),
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := runInformer(t, inf)
	waitFor(t, "HasSynced", inf.HasSynced)
	stop()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// kubeSystemServer answers GET /api/v1/namespaces/kube-system with code
// (the namespace, of UID uid, for 200; a Status otherwise) and counts the
// requests.
type kubeSystemServer struct {
	*httptest.Server
	requests atomic.Int64
}

func newKubeSystemServer(t *testing.T, code int, uid string) *kubeSystemServer {
	t.Helper()
	s := &kubeSystemServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path != "/api/v1/namespaces/kube-system" {
			code := http.StatusNotFound
			w.WriteHeader(code)
			_ = json.NewEncoder(w).Encode(&metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure, Code: int32(code), Reason: metav1.StatusReasonNotFound})
			return
		}
		w.WriteHeader(code)
		if code == http.StatusOK {
			_ = json.NewEncoder(w).Encode(&corev1.Namespace{TypeMeta: metav1.TypeMeta{Kind: "Namespace", APIVersion: "v1"},
				ObjectMeta: metav1.ObjectMeta{Name: "kube-system", UID: types.UID(uid)}})
			return
		}
		_ = json.NewEncoder(w).Encode(&metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
			Status: metav1.StatusFailure, Code: int32(code), Message: http.StatusText(code)})
	}))
	t.Cleanup(s.Close)
	return s
}

// TestRegressionClusterIDAnswerIsNotOffline: every error of the
// kube-system lookup counted as "offline", so an agent whose RBAC forbids
// reading the namespace (403), or whose server answers otherwise, resumed
// a file of another cluster unchecked. An answer of the server is not
// offline: NewFactory fails with ErrClusterIdentity.
func TestRegressionClusterIDAnswerIsNotOffline(t *testing.T) {
	for _, code := range []int{http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound, http.StatusInternalServerError, http.StatusServiceUnavailable} {
		t.Run(http.StatusText(code), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "cache.db")
			podsFileFor(t, path, "uid-of-another-cluster")
			srv := newKubeSystemServer(t, code, "")
			db, err := boltinformer.Open(path, &boltinformer.Options{Logger: &quietLogger, NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			f, err := boltinformer.NewFactory(db, &rest.Config{Host: srv.URL}, &boltinformer.FactoryOptions{LookupTimeout: 300 * time.Millisecond})
			if err == nil {
				inf, ierr := f.PersistentInformer(&corev1.Pod{})
				if ierr == nil && inf.Decision().Warm {
					t.Fatalf("a %d answer was taken for offline: cluster %q, the file of another cluster resumed (%+v)", code, f.ClusterID(), inf.Decision())
				}
				t.Fatalf("NewFactory after a %d answer: no error", code)
			}
			if !errors.Is(err, boltinformer.ErrClusterIdentity) || !strings.Contains(err.Error(), "not offline") {
				t.Fatalf("NewFactory after a %d answer: %v, want ErrClusterIdentity", code, err)
			}
			if code >= 500 && srv.requests.Load() < 2 {
				t.Fatalf("a %d answer was not retried (%d requests)", code, srv.requests.Load())
			}
		})
	}
}

// selfSignedCA returns a PEM CA certificate that signed nothing the test
// servers present.
func selfSignedCA(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "another-cluster-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// TestRegressionClusterIDUntrustedServerIsNotOffline: a server whose
// certificate the config's CA did not sign is not the configured cluster
// (another one at that address, or a rotated CA): it counted as offline,
// and the file was resumed unchecked.
func TestRegressionClusterIDUntrustedServerIsNotOffline(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache.db")
	podsFileFor(t, path, "uid-1")
	srv := httptest.NewUnstartedServer(http.NotFoundHandler())
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the client's failed handshakes
	srv.StartTLS()
	defer srv.Close()
	db, err := boltinformer.Open(path, &boltinformer.Options{Logger: &quietLogger, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	cfg := &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{CAData: selfSignedCA(t)}}
	f, err := boltinformer.NewFactory(db, cfg, &boltinformer.FactoryOptions{LookupTimeout: time.Second})
	if err == nil {
		t.Fatalf("NewFactory against an untrusted server: no error (cluster %q)", f.ClusterID())
	}
	if !errors.Is(err, boltinformer.ErrClusterIdentity) {
		t.Fatalf("NewFactory against an untrusted server: %v, want ErrClusterIdentity", err)
	}
}

// TestRegressionClusterIDTLSAlertIsNotOffline: a server that ends the TLS
// handshake with an alert (it requires a client certificate the config
// does not have, or speaks no TLS version the client accepts) answered:
// it counted as offline, and the file was resumed unchecked.
func TestRegressionClusterIDTLSAlertIsNotOffline(t *testing.T) {
	for name, cfg := range map[string]*tls.Config{
		"client certificate required": {ClientAuth: tls.RequireAnyClientCert},
		"no common TLS version":       {MaxVersion: tls.VersionTLS10, MinVersion: tls.VersionTLS10},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "cache.db")
			podsFileFor(t, path, "uid-1")
			srv := httptest.NewUnstartedServer(http.NotFoundHandler())
			srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the failed handshakes
			srv.TLS = cfg
			srv.StartTLS()
			defer srv.Close()
			db, err := boltinformer.Open(path, &boltinformer.Options{Logger: &quietLogger, NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
			rc := &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{CAData: ca}}
			f, err := boltinformer.NewFactory(db, rc, &boltinformer.FactoryOptions{LookupTimeout: time.Second})
			if err == nil {
				t.Fatalf("NewFactory against a server that ended the handshake with an alert: no error (cluster %q): taken for offline", f.ClusterID())
			}
			if !errors.Is(err, boltinformer.ErrClusterIdentity) {
				t.Fatalf("NewFactory: %v, want ErrClusterIdentity", err)
			}
		})
	}
}

// closingListener accepts connections on 127.0.0.1 and closes each at once
// (or, with hold, keeps it open without answering) until the test ends.
func closingListener(t *testing.T, hold bool) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var held []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			if hold {
				mu.Lock()
				held = append(held, c)
				mu.Unlock()
				continue
			}
			_ = c.Close()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		wg.Wait()
		mu.Lock()
		for _, c := range held {
			_ = c.Close()
		}
		mu.Unlock()
	})
	return "http://" + l.Addr().String()
}

// TestFactoryConnectionErrorIsOffline: what is still offline after the fix
// of TestRegressionClusterIDAnswerIsNotOffline (a guard against treating
// too much as an answer): a refused connection, one closed by the peer
// before an answer, and no answer within LookupTimeout. The identity is
// unchecked for this start and the file is resumed.
func TestFactoryConnectionErrorIsOffline(t *testing.T) {
	for name, host := range map[string]func(*testing.T) string{
		"refused": unreachable,
		"closed":  func(t *testing.T) string { return closingListener(t, false) },
		"timeout": func(t *testing.T) string { return closingListener(t, true) },
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "cache.db")
			podsFileFor(t, path, "uid-1")
			db, err := boltinformer.Open(path, &boltinformer.Options{Logger: &quietLogger, NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			f, err := boltinformer.NewFactory(db, &rest.Config{Host: host(t)}, &boltinformer.FactoryOptions{LookupTimeout: 300 * time.Millisecond})
			if err != nil {
				t.Fatalf("NewFactory offline: %v", err)
			}
			if f.ClusterID() != "" {
				t.Fatalf("cluster %q offline", f.ClusterID())
			}
			inf, err := f.PersistentInformer(&corev1.Pod{})
			if err != nil {
				t.Fatal(err)
			}
			if !inf.Decision().Warm {
				t.Fatalf("offline start did not resume: %+v", inf.Decision())
			}
		})
	}
}

// TestFactoryEndpointIdentity: IdentityEndpoint makes no API call, is
// checked offline too, and tells apart servers and CAs.
func TestFactoryEndpointIdentity(t *testing.T) {
	caA, caB := selfSignedCA(t), selfSignedCA(t)
	cfg := func(host string, ca []byte) *rest.Config {
		return &rest.Config{Host: host, TLSClientConfig: rest.TLSClientConfig{CAData: ca}}
	}
	id := func(c *rest.Config) string {
		t.Helper()
		s, err := boltinformer.EndpointIdentity(c)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a := id(cfg("https://10.0.0.1:6443", caA))
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, append(append([]byte("# bundle\n"), caB...), caA...), 0o600); err != nil {
		t.Fatal(err)
	}
	both := id(cfg("https://10.0.0.1:6443", append(append([]byte(nil), caA...), caB...)))
	for name, c := range map[string]struct {
		got  string
		same bool
	}{
		"same":                {id(cfg("https://10.0.0.1:6443/", caA)), true},
		"host without scheme": {id(cfg("10.0.0.1:6443", caA)), true}, // a CA makes client-go use https
		"upper-case host":     {id(cfg("HTTPS://10.0.0.1:6443", caA)), true},
		"CA file, reordered":  {id(&rest.Config{Host: "https://10.0.0.1:6443", TLSClientConfig: rest.TLSClientConfig{CAFile: caFile}}), false},
		"another host":        {id(cfg("https://10.0.0.2:6443", caA)), false},
		"another port":        {id(cfg("https://10.0.0.1:443", caA)), false},
		"another path":        {id(cfg("https://10.0.0.1:6443/k8s/clusters/c-2", caA)), false},
		"another CA":          {id(cfg("https://10.0.0.1:6443", caB)), false},
		"no CA":               {id(cfg("https://10.0.0.1:6443", nil)), false},
		"server name":         {id(&rest.Config{Host: "https://10.0.0.1:6443", TLSClientConfig: rest.TLSClientConfig{CAData: caA, ServerName: "kubernetes"}}), false},
	} {
		if (c.got == a) != c.same {
			t.Errorf("%s: identity %q, %q the first: want same %v", name, c.got, a, c.same)
		}
	}
	if file := id(&rest.Config{Host: "https://10.0.0.1:6443", TLSClientConfig: rest.TLSClientConfig{CAFile: caFile}}); file != both {
		t.Errorf("the same CA bundle in a file, in another order: %q, %q", file, both)
	}
	if !strings.HasPrefix(a, "endpoint:") {
		t.Errorf("identity %q", a)
	}
	if _, err := boltinformer.EndpointIdentity(&rest.Config{Host: "https://h", TLSClientConfig: rest.TLSClientConfig{CAFile: filepath.Join(t.TempDir(), "absent")}}); err == nil {
		t.Error("an unreadable CA file: no error")
	}

	// A file written for server A resumes offline, without a request, and
	// cold-starts for server B.
	srvA := newKubeSystemServer(t, http.StatusForbidden, "")
	srvB := newKubeSystemServer(t, http.StatusForbidden, "")
	path := filepath.Join(t.TempDir(), "cache.db")
	podsFileFor(t, path, id(&rest.Config{Host: srvA.URL}))
	for _, c := range []struct {
		host string
		warm bool
	}{{srvA.URL, true}, {srvB.URL, false}} {
		db, err := boltinformer.Open(path, &boltinformer.Options{Logger: &quietLogger, NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		f, err := boltinformer.NewFactory(db, &rest.Config{Host: c.host}, &boltinformer.FactoryOptions{Identity: boltinformer.IdentityEndpoint})
		if err != nil {
			t.Fatal(err)
		}
		inf, err := f.PersistentInformer(&corev1.Pod{})
		if err != nil {
			t.Fatal(err)
		}
		if d := inf.Decision(); d.Warm != c.warm || (!c.warm && d.Reason != recovery.ReasonCluster) {
			t.Errorf("server %s: decision %+v, want warm %v", c.host, d, c.warm)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if n := srvA.requests.Load() + srvB.requests.Load(); n != 0 {
		t.Errorf("IdentityEndpoint made %d requests", n)
	}
}

func TestFactoryIdentityOptions(t *testing.T) {
	db, err := boltinformer.Open(filepath.Join(t.TempDir(), "cache.db"), &boltinformer.Options{Logger: &quietLogger, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for name, o := range map[string]*boltinformer.FactoryOptions{
		"negative LookupTimeout": {LookupTimeout: -time.Second},
		"unknown Identity":       {Identity: boltinformer.ClusterIdentity(7)},
	} {
		if _, err := boltinformer.NewFactory(db, &rest.Config{Host: unreachable(t)}, o); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestRegressionFactoryInformerIdentityIgnored: FactoryOptions.Informer's
// ClusterID, Resource and ListOptions were overwritten for every informer
// without a word (a ClusterID given there was not the identity used).
func TestRegressionFactoryInformerIdentityIgnored(t *testing.T) {
	db, err := boltinformer.Open(filepath.Join(t.TempDir(), "cache.db"), &boltinformer.Options{Logger: &quietLogger, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for name, o := range map[string]*boltinformer.FactoryOptions{
		"Informer.ClusterID":   {Informer: boltinformer.InformerOptions{ClusterID: "mine"}},
		"Informer.Resource":    {ClusterID: "c", Informer: boltinformer.InformerOptions{Resource: "pods"}},
		"Informer.ListOptions": {ClusterID: "c", Informer: boltinformer.InformerOptions{ListOptions: "x"}},
	} {
		if _, err := boltinformer.NewFactory(db, &rest.Config{Host: unreachable(t)}, o); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestFactoryClusterID(t *testing.T) {
	db, err := boltinformer.Open(filepath.Join(t.TempDir(), "cache.db"), &boltinformer.Options{Logger: &quietLogger, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// A ClusterID given is used as is, with no lookup.
	srv := newKubeSystemServer(t, http.StatusForbidden, "")
	f, err := boltinformer.NewFactory(db, &rest.Config{Host: srv.URL}, &boltinformer.FactoryOptions{ClusterID: "mine"})
	if err != nil || f.ClusterID() != "mine" || srv.requests.Load() != 0 {
		t.Fatalf("NewFactory with ClusterID: %v, %q, %d requests", err, f.ClusterID(), srv.requests.Load())
	}
	// The namespace's UID.
	ok := newKubeSystemServer(t, http.StatusOK, "uid-42")
	f, err = boltinformer.NewFactory(db, &rest.Config{Host: ok.URL}, nil)
	if err != nil || f.ClusterID() != "uid-42" {
		t.Fatalf("NewFactory: %v, cluster %q", err, f.ClusterID())
	}
}

// TestRegressionOfflineColdStartFileNotResumedElsewhere: a cold start
// whose kube-system lookup got no answer (LookupTimeout) saved its file
// without a cluster identity once its list succeeded; any cluster then
// resumed that file unchecked, at its next start online (a saved identity
// of "" matched every one). Now that start is cold, with the reason.
func TestRegressionOfflineColdStartFileNotResumedElsewhere(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache.db")
	pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}

	// Cluster A: lists answer, the kube-system lookup does not in time.
	a := crashtest.NewHandler()
	a.Serve(pods, podSource(t, 3))
	srvA := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/namespaces/kube-system") {
			<-r.Context().Done() // no answer within LookupTimeout
			return
		}
		a.ServeHTTP(w, r)
	}))
	defer srvA.Close()
	db, err := boltinformer.Open(path, &boltinformer.Options{Logger: &quietLogger, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	f, err := boltinformer.NewFactory(db, &rest.Config{Host: srvA.URL}, &boltinformer.FactoryOptions{LookupTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if f.ClusterID() != "" {
		t.Fatalf("cluster %q: want an offline start", f.ClusterID())
	}
	inf, err := f.PersistentInformer(&corev1.Pod{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.StartWithContext(ctx)
	waitFor(t, "the list of cluster A", inf.HasSynced)
	if err := inf.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	cancel()
	f.Shutdown()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	// Cluster B answers: the file of A is not resumed.
	b := crashtest.NewHandler()
	b.ClusterUID = "uid-B"
	b.Serve(pods, newPodSource())
	srvB := httptest.NewServer(b)
	defer srvB.Close()
	db, err = boltinformer.Open(path, &boltinformer.Options{Logger: &quietLogger, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	f, err = boltinformer.NewFactory(db, &rest.Config{Host: srvB.URL}, &boltinformer.FactoryOptions{LookupTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	inf, err = f.PersistentInformer(&corev1.Pod{})
	if err != nil {
		t.Fatal(err)
	}
	if d := inf.Decision(); d.Warm || d.Reason != boltinformer.ReasonCluster {
		t.Fatalf("cluster B: decision %+v over a file filled without an identity: want a cold start (%s)", d, boltinformer.ReasonCluster)
	}
	if n := len(inf.GetIndexer().ListKeys()); n != 0 {
		t.Fatalf("cluster B serves %d objects of cluster A", n)
	}
}
