package boltinformer

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"sort"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
)

// ClusterIdentity selects how NewFactory identifies the cluster whose
// objects an informer's file holds (FactoryOptions.Identity). A file saved
// under another identity is not resumed: the informer cold-starts with the
// reason "cluster-identity". See README.md, "Cluster identity", for what
// each one detects and misses.
type ClusterIdentity int

const (
	// IdentityNamespaceUID (the default) is the UID of the kube-system
	// namespace, read from the server at NewFactory (one GET, which needs
	// RBAC get on namespaces/kube-system). It tells apart clusters behind
	// the same URL and CA (a cluster rebuilt from scratch gets a new UID)
	// and survives URL and CA changes. When the server cannot be reached (a
	// connection error or a timeout, no HTTP answer), the start is offline:
	// the identity is not checked and the file is trusted. Any answer of
	// the server that is not the namespace (401, 403, 404, 5xx after
	// retries within LookupTimeout), a certificate the config does not
	// trust, or a TLS handshake the server ends with an alert, is
	// NewFactory's error wrapping ErrClusterIdentity.
	IdentityNamespaceUID ClusterIdentity = iota
	// IdentityEndpoint is a fingerprint of where the config points and whom
	// it trusts (EndpointIdentity): no API call, no RBAC, and the same
	// offline as online, so an offline start is checked too. It misses a
	// cluster rebuilt behind the same URL with the same CA, and changes
	// (a cold start, one relist) when the URL or the CA bundle changes.
	IdentityEndpoint
)

// String implements fmt.Stringer.
func (c ClusterIdentity) String() string {
	switch c {
	case IdentityNamespaceUID:
		return "namespace-uid"
	case IdentityEndpoint:
		return "endpoint"
	default:
		return fmt.Sprintf("ClusterIdentity(%d)", int(c))
	}
}

// endpointPrefix starts every EndpointIdentity (a namespace UID never
// contains a colon).
const endpointPrefix = "endpoint:"

// EndpointIdentity returns the endpoint identity of config: a fingerprint
// of the API server URL (scheme, host, port and path prefix, as client-go
// builds it from Host), the CA bundle it trusts (CAData, or the contents of
// CAFile: the certificates' SHA-256 digests, sorted, so that order and PEM
// formatting do not matter), TLS ServerName and Insecure. It makes no API
// call. It is what FactoryOptions.Identity IdentityEndpoint uses; give it
// as InformerOptions.ClusterID to informers built with DB.NewInformer.
func EndpointIdentity(config *rest.Config) (string, error) {
	u, _, err := rest.DefaultServerUrlFor(config)
	if err != nil {
		return "", fmt.Errorf("boltinformer: endpoint identity: %w", err)
	}
	ca := config.TLSClientConfig.CAData
	if len(ca) == 0 && config.TLSClientConfig.CAFile != "" {
		if ca, err = os.ReadFile(config.TLSClientConfig.CAFile); err != nil {
			return "", fmt.Errorf("boltinformer: endpoint identity: CA file: %w", err)
		}
	}
	var certs []string
	for remaining := ca; ; {
		var block *pem.Block
		block, remaining = pem.Decode(remaining)
		if block == nil {
			break
		}
		if block.Type == "CERTIFICATE" {
			sum := sha256.Sum256(block.Bytes)
			certs = append(certs, hex.EncodeToString(sum[:]))
		}
	}
	if len(certs) == 0 && len(ca) > 0 {
		sum := sha256.Sum256(ca)
		certs = append(certs, "raw:"+hex.EncodeToString(sum[:]))
	}
	sort.Strings(certs)
	s := fmt.Sprintf("server=%s://%s%s\x00ca=%s\x00servername=%s\x00insecure=%t",
		strings.ToLower(u.Scheme), strings.ToLower(u.Host), strings.TrimSuffix(u.Path, "/"),
		strings.Join(certs, ","), config.TLSClientConfig.ServerName, config.TLSClientConfig.Insecure)
	sum := sha256.Sum256([]byte(s))
	return endpointPrefix + hex.EncodeToString(sum[:16]), nil
}

// lookupNamespaceUID reads the kube-system namespace's UID with get. It
// returns "" and no error when the server cannot be reached (offline); an
// answer of the server that is not the namespace is an error wrapping
// ErrClusterIdentity. Answers that may pass (429 and 5xx) are retried
// until timeout.
func lookupNamespaceUID(logger klog.Logger, timeout time.Duration, get func(context.Context) (*corev1.Namespace, error)) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	wait := 100 * time.Millisecond
	var answered error // the last answer to retry, once the server has answered
	for {
		ns, err := get(ctx)
		if err == nil && ns == nil {
			ns = &corev1.Namespace{}
		}
		switch {
		case err == nil && ns.UID == "":
			return "", fmt.Errorf("%w: namespace %s has no UID", ErrClusterIdentity, metav1.NamespaceSystem)
		case err == nil:
			return string(ns.UID), nil
		case isOffline(err) && answered != nil:
			// The retry of an answer timed out or lost its connection: the
			// server was there a moment ago.
			return "", identityError(answered)
		case isOffline(err):
			logger.Info("Server unreachable: the cluster identity is not checked for this start (an offline agent trusts its file)", "err", err)
			return "", nil
		case transientStatus(err):
			answered = err
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return "", identityError(err)
			case <-t.C:
			}
			wait = min(2*wait, time.Second)
		default:
			return "", identityError(err)
		}
	}
}

func identityError(err error) error {
	return fmt.Errorf("%w: reading namespace %s: %w (the server answered, so this start is not offline: "+
		"grant get on namespaces/%s, set FactoryOptions.ClusterID, or choose Identity IdentityEndpoint)",
		ErrClusterIdentity, metav1.NamespaceSystem, err, metav1.NamespaceSystem)
}

// transientStatus reports an answer of the server that may pass: 429 and
// 5xx (an apiserver starting, overloaded, or a proxy without a backend).
func transientStatus(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	code := status.Status().Code
	return code == 429 || code >= 500
}

// isOffline reports whether err means that no server answered: a
// connection that could not be made or broke, a name that did not
// resolve, or a timeout. Any HTTP answer is not offline (the server is
// there, and may be another cluster's), nor is a certificate that the
// config does not trust (a server that is not the one configured), nor a
// TLS alert (a server that refused the handshake, e.g. our client
// certificate: it is there), nor an error this function does not know.
func isOffline(err error) bool {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return false
	}
	var (
		verify   *tls.CertificateVerificationError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		record   tls.RecordHeaderError
	)
	if errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &hostname) || errors.As(err, &invalid) || errors.As(err, &record) {
		return false
	}
	var (
		op  *net.OpError
		dns *net.DNSError
		ne  net.Error
	)
	if errors.As(err, &op) && isTLSAlert(op) {
		return false
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return true
	case errors.As(err, &ne) && ne.Timeout():
		return true
	case errors.As(err, &op), errors.As(err, &dns):
		return true
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EHOSTUNREACH),
		errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.ETIMEDOUT), errors.Is(err, syscall.EPIPE):
		return true
	case utilnet.IsConnectionRefused(err), utilnet.IsConnectionReset(err), utilnet.IsProbableEOF(err):
		return true
	case isServerClosedIdle(err):
		return true
	}
	return false
}

// serverClosedIdle is the text of net/http's errServerClosedIdle
// (unexported): the peer closed a new connection before the request was
// on it, which net/http does not retry on a fresh connection.
const serverClosedIdle = "http: server closed idle connection"

// isServerClosedIdle reports whether err is, or wraps, net/http's
// errServerClosedIdle: an error in err's chain whose whole text is it.
func isServerClosedIdle(err error) bool {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if e.Error() == serverClosedIdle {
			return true
		}
	}
	return false
}

// isTLSAlert reports whether op is a TLS alert that the peer sent
// ("remote error: tls: certificate required", "... bad certificate") or
// that crypto/tls sent it over a handshake the peer took part in ("local
// error: tls: ..."): a server answered, at the TLS layer.
func isTLSAlert(op *net.OpError) bool {
	return op.Op == "remote error" || op.Op == "local error"
}
