package localapi

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/boltinformer/boltinformer/internal/safefile"
)

// Cert is the serving certificate of a loopback listener: self-signed for
// 127.0.0.1, ::1 and localhost, and its own CA for clients (client-go,
// kubectl and other languages' clients send a kubeconfig's token only over
// TLS).
type Cert struct {
	TLS tls.Certificate
	// PEM is the certificate, for a kubeconfig's certificate-authority-data.
	PEM []byte
}

// certLifetime is how long a generated certificate is valid.
const certLifetime = 10 * 365 * 24 * time.Hour

// LoadOrCreateCert returns the certificate in certFile and keyFile,
// creating both (the key with mode 0600) when either is missing, the
// certificate has expired, or a pair this package generated does not
// match (a crash between the two renames that write it). A key or
// certificate file, or a directory of theirs, that LoadOrCreateToken would
// refuse (the certificate may be readable by all), or another pair that
// does not match, are ErrToken.
func LoadOrCreateCert(certFile, keyFile string) (*Cert, error) {
	for _, dir := range []string{filepath.Dir(keyFile), filepath.Dir(certFile)} {
		if err := safefile.CheckDir(dir); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrToken, err)
		}
	}
	c, err := loadCert(certFile, keyFile)
	if err == nil {
		return c, nil
	}
	if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, errExpired) && !errors.Is(err, errTornPair) {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("localapi: certificate: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("localapi: certificate: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: certCommonName},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(certLifetime),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:              []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("localapi: certificate: %w", err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("localapi: certificate: %w", err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	if err := writeFileAtomic(keyFile, keyPEM, 0o600); err != nil {
		return nil, err
	}
	if err := writeFileAtomic(certFile, certPEM, 0o644); err != nil {
		return nil, err
	}
	return loadCert(certFile, keyFile)
}

var errExpired = errors.New("localapi: certificate expired")

// errTornPair is a generated certificate whose key file holds another key.
var errTornPair = errors.New("localapi: generated certificate and key do not match")

// certCommonName names the certificates LoadOrCreateCert generates.
const certCommonName = "boltinformer local API"

func loadCert(certFile, keyFile string) (*Cert, error) {
	keyPEM, err := safefile.ReadTrusted(keyFile, true)
	if errors.Is(err, safefile.ErrUntrusted) {
		return nil, fmt.Errorf("%w: %w", ErrToken, err)
	}
	if err != nil {
		return nil, fmt.Errorf("localapi: certificate: %w", err)
	}
	certPEM, err := safefile.ReadTrusted(certFile, false)
	if errors.Is(err, safefile.ErrUntrusted) {
		return nil, fmt.Errorf("%w: %w", ErrToken, err)
	}
	if err != nil {
		return nil, fmt.Errorf("localapi: certificate: %w", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		if b, _ := pem.Decode(certPEM); b != nil {
			if c, cerr := x509.ParseCertificate(b.Bytes); cerr == nil && c.Subject.CommonName == certCommonName {
				return nil, fmt.Errorf("%w: %s and %s: %v", errTornPair, certFile, keyFile, err)
			}
		}
		return nil, fmt.Errorf("%w: %s and %s: %v", ErrToken, certFile, keyFile, err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrToken, certFile, err)
	}
	if time.Now().After(leaf.NotAfter.Add(-24 * time.Hour)) {
		return nil, errExpired
	}
	pair.Leaf = leaf
	return &Cert{TLS: pair, PEM: certPEM}, nil
}

// writeFileAtomic writes b to path through a temporary file and a rename.
func writeFileAtomic(path string, b []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".localapi-*")
	if err != nil {
		return fmt.Errorf("localapi: write %s: %w", path, err)
	}
	defer os.Remove(f.Name())
	_, werr := f.Write(b)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr, os.Chmod(f.Name(), mode)); err != nil {
		return fmt.Errorf("localapi: write %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("localapi: write %s: %w", path, err)
	}
	// The rename is durable only once the directory is synced.
	if err := safefile.SyncDir(filepath.Dir(path)); err != nil {
		return fmt.Errorf("localapi: write %s: %w", path, err)
	}
	return nil
}
