package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"

	"k8s.io/klog/v2"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/localapi"
)

// apiListeners are the local API's listeners, made before the cache file
// is opened (a bad path or a taken port fails before it is touched).
type apiListeners struct {
	sock, tcp  net.Listener
	sockPath   string
	token      string
	kubeconfig string
}

// listenAPI makes the local API's listeners: the Unix socket (mode 0600:
// only the agent's user may connect; no token), and with -api-listen a
// TLS listener on loopback whose clients need the token of -api-dir,
// with the kubeconfig written there. Off with -api=false.
func (c *config) listenAPI() (*apiListeners, error) {
	a := &apiListeners{}
	if !c.api {
		return a, nil
	}
	var err error
	if a.sock, err = localapi.ListenUnix(c.apiSocket); err != nil {
		return nil, fmt.Errorf("-api-socket: %w", err)
	}
	a.sockPath = c.apiSocket
	if c.apiListen == "" {
		return a, nil
	}
	fail := func(err error) (*apiListeners, error) {
		a.close()
		return nil, fmt.Errorf("-api-listen: %w", err)
	}
	if err := os.MkdirAll(c.apiDir, 0o700); err != nil {
		return fail(err)
	}
	if a.token, err = localapi.LoadOrCreateToken(filepath.Join(c.apiDir, "token")); err != nil {
		return fail(err)
	}
	cert, err := localapi.LoadOrCreateCert(filepath.Join(c.apiDir, "tls.crt"), filepath.Join(c.apiDir, "tls.key"))
	if err != nil {
		return fail(err)
	}
	// Port 0 takes the kubeconfig's port again: clients of the last run
	// reconnect.
	a.kubeconfig = filepath.Join(c.apiDir, "kubeconfig")
	if a.tcp, err = localapi.ListenLocalKubeconfig(a.kubeconfig, c.apiListen, a.token, cert); err != nil {
		return fail(err)
	}
	return a, nil
}

// close closes the listeners not served yet (serve's stop closes the
// others).
func (a *apiListeners) close() {
	for _, l := range []net.Listener{a.sock, a.tcp} {
		if l != nil {
			_ = l.Close()
		}
	}
}

// serve serves db's informers on the listeners until ctx ends; stop waits
// for the servers to end their watches and return, then closes the
// handler. With no listener it serves nothing.
func (a *apiListeners) serve(ctx context.Context, db *boltinformer.DB) (stop func(), err error) {
	if a.sock == nil {
		return func() {}, nil
	}
	h, err := localapi.New(db, &localapi.Options{Token: a.token})
	if err != nil {
		return nil, err
	}
	var wg sync.WaitGroup
	for _, l := range []net.Listener{a.sock, a.tcp} {
		if l == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := h.Serve(ctx, l); err != nil && !errors.Is(err, net.ErrClosed) {
				klog.ErrorS(err, "Local API stopped", "addr", l.Addr().String())
			}
		}()
	}
	klog.InfoS("Local API serving", "socket", a.sockPath, "tls", addrOf(a.tcp), "kubeconfig", a.kubeconfig)
	a.sock, a.tcp = nil, nil // Serve closes them
	return func() {
		wg.Wait()
		_ = h.Close()
	}, nil
}

func addrOf(l net.Listener) string {
	if l == nil {
		return ""
	}
	return l.Addr().String()
}
