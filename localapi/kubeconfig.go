package localapi

import (
	"context"
	"fmt"
	"net"

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
