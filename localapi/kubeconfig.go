package localapi

import (
	"context"
	"fmt"
	"net"
	"net/url"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ContextName is the context, cluster and user name of the kubeconfigs
// WriteKubeconfig writes.
const ContextName = "localapi"

// WriteKubeconfig writes a kubeconfig (mode 0600, replacing path
// atomically) for clients of a local API listening on the loopback
// address addr (host:port, ListenLocal) with the bearer token and the
// serving certificate. kubectl and the client libraries of other
// languages cannot dial a Unix socket from a kubeconfig: they use the TCP
// listener; Go clients of the socket use UnixConfig.
func WriteKubeconfig(path, addr, token string, cert *Cert) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[ContextName] = &clientcmdapi.Cluster{Server: "https://" + addr, CertificateAuthorityData: cert.PEM}
	cfg.AuthInfos[ContextName] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts[ContextName] = &clientcmdapi.Context{Cluster: ContextName, AuthInfo: ContextName}
	cfg.CurrentContext = ContextName
	b, err := clientcmd.Write(*cfg)
	if err != nil {
		return fmt.Errorf("localapi: kubeconfig: %w", err)
	}
	return writeFileAtomic(path, b, 0o600)
}

// ListenLocalKubeconfig listens as ListenLocal and writes the kubeconfig
// at path for the listener (WriteKubeconfig). With port 0 in addr (any
// free port), it first takes again the port of the kubeconfig already at
// path, written by an earlier run on the same host: a long-running client
// (kubectl -w, an informer, a Python watch) reconnects with the address it
// read, after a restart of the agent. When that port is taken by another
// program, it takes a free one and the kubeconfig changes.
func ListenLocalKubeconfig(path, addr, token string, cert *Cert) (net.Listener, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var l net.Listener
	if host, port, err := net.SplitHostPort(addr); err == nil && port == "0" {
		if kept := keptAddr(path, host); kept != "" {
			l, _ = ListenLocal(kept, cert) // taken: a free port below
		}
	}
	if l == nil {
		var err error
		if l, err = ListenLocal(addr, cert); err != nil {
			return nil, err
		}
	}
	if err := WriteKubeconfig(path, l.Addr().String(), token, cert); err != nil {
		_ = l.Close()
		return nil, err
	}
	return l, nil
}

// keptAddr is the address of the kubeconfig at path (ContextName's
// cluster) when it is https on host, or "".
func keptAddr(path, host string) string {
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return ""
	}
	c := cfg.Clusters[ContextName]
	if c == nil {
		return ""
	}
	u, err := url.Parse(c.Server)
	if err != nil || u.Scheme != "https" || u.Hostname() != host || u.Port() == "" || u.Port() == "0" {
		return ""
	}
	return net.JoinHostPort(host, u.Port())
}

// UnixConfig is a client-go rest.Config for a local API on the Unix socket
// at path.
func UnixConfig(path string) *rest.Config {
	return &rest.Config{
		Host: "http://localapi",
		Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		},
	}
}

// LocalConfig is a client-go rest.Config for a local API on the loopback
// address addr with the bearer token and the serving certificate.
func LocalConfig(addr, token string, cert *Cert) *rest.Config {
	return &rest.Config{Host: "https://" + addr, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: cert.PEM}}
}
