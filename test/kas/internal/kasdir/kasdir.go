package kasdir

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"

	"github.com/boltinformer/boltinformer/test/kas/internal/loopback"
)

// User is the name of the token user; it is in group system:masters, so RBAC
// lets it do anything.
const User = "kas-admin"

// ContextName is the name of the cluster, user and context in the kubeconfig.
const ContextName = "kas"

// Layout names the files of a kas directory.
type Layout struct {
	Dir string
}

func (l Layout) path(name ...string) string {
	return filepath.Join(append([]string{l.Dir}, name...)...)
}

// EtcdDataDir is etcd's data directory.
func (l Layout) EtcdDataDir() string { return l.path("etcd") }

// EtcdURLFile holds the client URL of the running etcd.
func (l Layout) EtcdURLFile() string { return l.path("etcd-url") }

// Kubeconfig is the kubeconfig for the apiserver.
func (l Layout) Kubeconfig() string { return l.path("kubeconfig") }

// TokenFile is the apiserver's --token-auth-file.
func (l Layout) TokenFile() string { return l.path("token.csv") }

// ServiceAccountKey is the service-account signing (and verifying) key.
func (l Layout) ServiceAccountKey() string { return l.path("sa.key") }

// CertDir holds the apiserver's serving certificate.
func (l Layout) CertDir() string { return l.path("pki") }

// ServingCert is the apiserver's certificate, followed by the CA that signed
// it; clients trust it as their CA.
func (l Layout) ServingCert() string { return l.path("pki", "apiserver.crt") }

// ServingKey is the key of ServingCert.
func (l Layout) ServingKey() string { return l.path("pki", "apiserver.key") }

// PortFile holds the apiserver's secure port.
func (l Layout) PortFile() string { return l.path("secure-port") }

// EtcdLog is where the harness and `kas up` send etcd's output.
func (l Layout) EtcdLog() string { return l.path("etcd.log") }

// APIServerLog is where the harness and `kas up` send the apiserver's output.
func (l Layout) APIServerLog() string { return l.path("apiserver.log") }

// Credentials are what the apiserver needs before it starts.
type Credentials struct {
	// Token is the bearer token of User.
	Token string
	// Port is the secure port on 127.0.0.1.
	Port int
}

// Prepare creates (or reuses) the token, the service-account key, the serving
// certificate and the port, and writes the kubeconfig. It is called before
// every apiserver start.
func (l Layout) Prepare() (Credentials, error) {
	var c Credentials
	if err := os.MkdirAll(l.CertDir(), 0o700); err != nil {
		return c, fmt.Errorf("kasdir: %w", err)
	}
	var err error
	if c.Token, err = l.ensureToken(); err != nil {
		return c, err
	}
	if err := l.ensureServiceAccountKey(); err != nil {
		return c, err
	}
	if err := l.ensureServingCert(); err != nil {
		return c, err
	}
	if c.Port, err = l.ensurePort(); err != nil {
		return c, err
	}
	if err := l.writeKubeconfig(c); err != nil {
		return c, err
	}
	return c, nil
}

func (l Layout) ensureToken() (string, error) {
	if b, err := os.ReadFile(l.TokenFile()); err == nil {
		tok, _, ok := strings.Cut(string(b), ",")
		if ok && tok != "" {
			return tok, nil
		}
	}
	buf := make([]byte, 24)
	if _, err := rand.Read(buf); err != nil {
		return "", fmt.Errorf("kasdir: token: %w", err)
	}
	tok := hex.EncodeToString(buf)
	// token,user,uid,"group1,group2"
	line := fmt.Sprintf("%s,%s,%s,\"system:masters\"\n", tok, User, User)
	if err := WriteFileAtomic(l.TokenFile(), []byte(line), 0o600); err != nil {
		return "", err
	}
	return tok, nil
}

func (l Layout) ensureServiceAccountKey() error {
	if _, err := os.Stat(l.ServiceAccountKey()); err == nil {
		return nil
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return fmt.Errorf("kasdir: service-account key: %w", err)
	}
	b := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	return WriteFileAtomic(l.ServiceAccountKey(), b, 0o600)
}

func (l Layout) ensureServingCert() error {
	_, errCert := os.Stat(l.ServingCert())
	_, errKey := os.Stat(l.ServingKey())
	if errCert == nil && errKey == nil {
		return nil
	}
	// The same generator the apiserver uses for --cert-dir: a CA and a serving
	// certificate signed by it, both in the .crt file.
	cert, key, err := certutil.GenerateSelfSignedCertKey(loopback.Host,
		[]net.IP{net.ParseIP(loopback.Host)}, []string{"localhost"})
	if err != nil {
		return fmt.Errorf("kasdir: serving certificate: %w", err)
	}
	if err := WriteFileAtomic(l.ServingKey(), key, 0o600); err != nil {
		return err
	}
	return WriteFileAtomic(l.ServingCert(), cert, 0o644)
}

func (l Layout) ensurePort() (int, error) {
	if b, err := os.ReadFile(l.PortFile()); err == nil {
		if p, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && p > 0 && loopback.PortFree(p) {
			return p, nil
		}
	}
	p, err := loopback.FreePort()
	if err != nil {
		return 0, err
	}
	if err := WriteFileAtomic(l.PortFile(), []byte(strconv.Itoa(p)+"\n"), 0o644); err != nil {
		return 0, err
	}
	return p, nil
}

func (l Layout) writeKubeconfig(c Credentials) error {
	ca, err := os.ReadFile(l.ServingCert())
	if err != nil {
		return fmt.Errorf("kasdir: %w", err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[ContextName] = &clientcmdapi.Cluster{
		Server:                   "https://" + loopback.HostPort(c.Port),
		CertificateAuthorityData: ca,
	}
	cfg.AuthInfos[ContextName] = &clientcmdapi.AuthInfo{Token: c.Token}
	cfg.Contexts[ContextName] = &clientcmdapi.Context{Cluster: ContextName, AuthInfo: ContextName}
	cfg.CurrentContext = ContextName
	b, err := clientcmd.Write(*cfg)
	if err != nil {
		return fmt.Errorf("kasdir: kubeconfig: %w", err)
	}
	return WriteFileAtomic(l.Kubeconfig(), b, 0o600)
}

// ReadEtcdURL returns the URL in EtcdURLFile, or an error wrapping
// os.ErrNotExist while etcd has not written it.
func (l Layout) ReadEtcdURL() (string, error) {
	b, err := os.ReadFile(l.EtcdURLFile())
	if err != nil {
		return "", fmt.Errorf("kasdir: %w", err)
	}
	u := strings.TrimSpace(string(b))
	if u == "" {
		return "", fmt.Errorf("kasdir: %s is empty: %w", l.EtcdURLFile(), os.ErrNotExist)
	}
	return u, nil
}

// WriteFileAtomic writes data to a temporary file next to path and renames it
// over path, so readers never see a partial file.
func WriteFileAtomic(path string, data []byte, perm os.FileMode) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("kasdir: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.Remove(tmp.Name())
		}
	}()
	_, werr := tmp.Write(data)
	cerr := tmp.Chmod(perm)
	if err := errors.Join(werr, cerr, tmp.Close()); err != nil {
		return fmt.Errorf("kasdir: write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("kasdir: %w", err)
	}
	return nil
}
