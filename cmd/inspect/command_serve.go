package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/boltinformer/boltinformer/internal/encryptionconfig"
	"github.com/boltinformer/boltinformer/internal/safefile"
	"github.com/boltinformer/boltinformer/localapi"
	"github.com/boltinformer/boltinformer/store"
)

type serveOptions struct {
	listen     string
	socket     string
	kubeconfig string
	stateDir   string
	secrets    bool
}

// Test hooks: the context serve runs under (default: until SIGINT or
// SIGTERM), and a call once it serves.
var (
	serveContext = func() (context.Context, context.CancelFunc) {
		return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	}
	serveStarted = func(kubeconfig string) {}
)

func (a *app) newServeCommand() *cobra.Command {
	var o serveOptions
	cmd := &cobra.Command{
		Use:   "serve FILE",
		Short: "Serve the cached objects as a read-only Kubernetes API (kubectl, client-go)",
		Long: `serve reads every informer of a closed cache file into memory and serves
them as a read-only Kubernetes API (the local API, see the README's "Local
API"): discovery, get, list and watch, as of the file's resourceVersions.
Watches get the objects and then bookmarks only: nothing changes. Writes get
405. The file is read once and not held open.

It listens with TLS on --listen (a loopback address only; the certificate
and the bearer token are made in --state-dir) and writes a kubeconfig for
kubectl and other clients; with port 0 (the default) a restart takes the
port of the kubeconfig it finds again (give --state-dir or --kubeconfig),
so long-running clients reconnect; --socket adds a Unix socket (mode 0600) for Go
clients. Secrets are served only with --secrets; encrypted payloads need
--key-file. An informer whose objects do not all decode is not served (its
requests get 403 with the reason), nor one whose file holds no complete
list. It runs until interrupted.`,
		Example: `  inspect serve cache.db --kubeconfig /tmp/cache.kubeconfig &
  kubectl --kubeconfig /tmp/cache.kubeconfig get pods -A`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			keys, err := readKeyFile(a.keyFile)
			if err != nil {
				return err
			}
			return a.serve(cmd, args[0], &o, keys)
		},
	}
	cmd.Flags().StringVar(&o.listen, "listen", "127.0.0.1:0", `loopback address to serve on with TLS ("" for none); port 0 takes the port of an existing --kubeconfig again, else a free one`)
	cmd.Flags().StringVar(&o.socket, "socket", "", "also serve on a Unix socket (mode 0600) at this path")
	cmd.Flags().StringVar(&o.kubeconfig, "kubeconfig", "", "write the clients' kubeconfig here (default: STATE-DIR/kubeconfig)")
	cmd.Flags().StringVar(&o.stateDir, "state-dir", "", "directory (0700) of the token, the TLS certificate and key (default: a new temporary one, removed at exit); an existing one must be yours (or root's) and writable by no one else")
	cmd.Flags().BoolVar(&o.secrets, "secrets", false, "serve Secrets (not served by default)")
	return cmd
}

func (a *app) serve(cmd *cobra.Command, path string, o *serveOptions, keys *encryptionconfig.Config) error {
	if o.listen == "" && o.socket == "" {
		return errors.New("nothing to serve on: give --listen or --socket")
	}
	snaps, err := a.snapshots(cmd, path, keys)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	logger := klog.Background().V(1)
	hopts := &localapi.Options{Secrets: o.secrets, Logger: &logger}
	var dir string
	var cert *localapi.Cert
	if o.listen != "" {
		dir = o.stateDir
		if dir == "" {
			if dir, err = os.MkdirTemp("", "inspect-serve-"); err != nil {
				return err
			}
			defer os.RemoveAll(dir)
		} else if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		} else if err := safefile.CheckDir(dir); err != nil {
			// Another user's, or one others may write: they could plant
			// the token, and read the cache with it.
			return fmt.Errorf("--state-dir: %w", err)
		}
		if hopts.Token, err = localapi.LoadOrCreateToken(filepath.Join(dir, "token")); err != nil {
			return err
		}
		if cert, err = localapi.LoadOrCreateCert(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")); err != nil {
			return err
		}
	}
	// The handler decides what it refuses (Secrets without --secrets,
	// whatever their informer is named): say so before serving.
	h, err := localapi.NewStatic(snaps, hopts)
	if err != nil {
		return err
	}
	defer h.Close()
	refused := h.Refused()
	for _, s := range snaps {
		if why, ok := refused[s.Informer]; ok {
			fmt.Fprintf(cmd.ErrOrStderr(), "warning: informer %q not served: %s\n", s.Informer, why)
			continue
		}
		fmt.Fprintf(out, "informer %s: %d objects at resourceVersion %s\n", s.Informer, len(s.Objects), s.ResourceVersion)
	}
	var listeners []net.Listener
	closeAll := func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}
	var kubeconfig string
	if o.listen != "" {
		kubeconfig = o.kubeconfig
		if kubeconfig == "" {
			kubeconfig = filepath.Join(dir, "kubeconfig")
		}
		// A port of 0 takes the kubeconfig's port again, when there is
		// one: clients of the last run reconnect.
		l, err := localapi.ListenLocalKubeconfig(kubeconfig, o.listen, hopts.Token, cert)
		if err != nil {
			return err
		}
		listeners = append(listeners, l)
		fmt.Fprintf(out, "serving https://%s\nkubeconfig: %s\n", l.Addr(), kubeconfig)
	}
	if o.socket != "" {
		l, err := localapi.ListenUnix(o.socket)
		if err != nil {
			closeAll()
			return err
		}
		listeners = append(listeners, l)
		fmt.Fprintf(out, "serving unix:%s\n", o.socket)
	}
	return serveAll(h, listeners, out, kubeconfig)
}

// serveAll serves h on every listener until serveContext ends.
func serveAll(h *localapi.Handler, listeners []net.Listener, out io.Writer, kubeconfig string) error {
	ctx, stop := serveContext()
	defer stop()
	errs := make([]error, len(listeners))
	var wg sync.WaitGroup
	for i, l := range listeners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = h.Serve(ctx, l)
			if errs[i] != nil {
				stop() // one listener failed: stop them all
			}
		}()
	}
	fmt.Fprintln(out, "ready (interrupt to stop)")
	serveStarted(kubeconfig)
	wg.Wait()
	return errors.Join(errs...)
}

// snapshots reads every informer of the file: its objects, state and kind.
// An informer that cannot be served whole is refused with the reason.
func (a *app) snapshots(cmd *cobra.Command, path string, keys *encryptionconfig.Config) ([]localapi.Snapshot, error) {
	var snaps []localapi.Snapshot
	err := a.view(path, func(_ *store.DB, tx *store.Tx) error {
		for _, inf := range tx.Informers() {
			st := informerState(cmd, tx, inf)
			d := newDecoder(inf, st, keys)
			s := localapi.Snapshot{Informer: inf, Kind: d.kind}
			if st == nil || !st.Synced {
				s.Refused = "the file holds no complete list of it"
				snaps = append(snaps, s)
				continue
			}
			s.Resource, s.ResourceVersion, s.ListOptions = st.Resource, st.ResourceVersion, st.ListOptions
			var bad int
			var reason string
			_, err := scanObjects(tx, inf, nil, d, func(string) bool { return true }, func(o *object) error {
				if o.keyErr != nil {
					return o.keyErr
				}
				if o.obj == nil {
					bad++
					reason = fmt.Sprintf("object %q: %s", o.key, o.reason)
					return nil
				}
				s.Objects = append(s.Objects, o.obj)
				return nil
			})
			var ee *exitError
			switch {
			case errors.As(err, &ee):
				s.Refused, s.Objects = ee.msg, nil // a key is missing or wrong
			case err != nil:
				return err
			case bad > 0:
				s.Refused, s.Objects = fmt.Sprintf("%d object(s) do not decode (%s)", bad, reason), nil
			}
			snaps = append(snaps, s)
		}
		return nil
	})
	return snaps, err
}
