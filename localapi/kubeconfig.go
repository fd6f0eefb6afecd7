package localapi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ContextName is the context, cluster and user name of the kubeconfigs
// WriteKubeconfig writes.
const ContextName = "localapi"

// WriteKubeconfig writes a kubeconfig (mode 0600, replacing path
// atomically) for clients of a local API listening on the loopback
// address addr (host:port) with the bearer token. kubectl and client
// libraries of other languages cannot dial a Unix socket from a
// kubeconfig: give them the TCP listener; Go clients of the socket use
// UnixConfig.
func WriteKubeconfig(path, addr, token string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[ContextName] = &clientcmdapi.Cluster{Server: "http://" + addr}
	cfg.AuthInfos[ContextName] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts[ContextName] = &clientcmdapi.Context{Cluster: ContextName, AuthInfo: ContextName}
	cfg.CurrentContext = ContextName
	b, err := clientcmd.Write(*cfg)
	if err != nil {
		return fmt.Errorf("localapi: kubeconfig: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".kubeconfig-*")
	if err != nil {
		return fmt.Errorf("localapi: kubeconfig: %w", err)
	}
	defer os.Remove(f.Name())
	_, werr := f.Write(b)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		return fmt.Errorf("localapi: kubeconfig %s: %w", path, err)
	}
	if err := os.Chmod(f.Name(), 0o600); err != nil {
		return fmt.Errorf("localapi: kubeconfig: %w", err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("localapi: kubeconfig: %w", err)
	}
	return nil
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
// address addr with the bearer token.
func LocalConfig(addr, token string) *rest.Config {
	return &rest.Config{Host: "http://" + addr, BearerToken: token}
}
