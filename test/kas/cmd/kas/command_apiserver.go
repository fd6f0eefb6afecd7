package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // as in kube-apiserver's main
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics, as in kube-apiserver's main
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric, as in kube-apiserver's main
	"k8s.io/kubernetes/cmd/kube-apiserver/app"

	"github.com/boltinformer/boltinformer/test/kas/internal/kasdir"
	"github.com/boltinformer/boltinformer/test/kas/internal/loopback"
	"github.com/boltinformer/boltinformer/test/kas/internal/readyz"
)

// apiserverOptions are the knobs of `kas apiserver` (and `kas up`).
type apiserverOptions struct {
	etcd               string
	dir                string
	compactionInterval time.Duration
	watchCacheSizes    []string
	readyTimeout       time.Duration
	extra              []string // after "--", passed to kube-apiserver as is
}

func (o *apiserverOptions) addFlags(cmd *cobra.Command, withEtcd bool) {
	f := cmd.Flags()
	if withEtcd {
		f.StringVar(&o.etcd, "etcd", "", "etcd client URL (http://127.0.0.1:PORT)")
		_ = cmd.MarkFlagRequired("etcd")
	}
	f.StringVar(&o.dir, "dir", "", "kas directory: credentials, kubeconfig, logs (created if missing)")
	_ = cmd.MarkFlagRequired("dir")
	f.DurationVar(&o.compactionInterval, "compaction-interval", 0,
		"kube-apiserver --etcd-compaction-interval (0: its default, 5m)")
	f.StringSliceVar(&o.watchCacheSizes, "watch-cache-sizes", nil,
		"kube-apiserver --watch-cache-sizes, e.g. secrets#0 turns the watch cache off for secrets")
	f.DurationVar(&o.readyTimeout, "ready-timeout", 2*time.Minute, "how long to wait for /readyz")
}

func newAPIServerCommand() *cobra.Command {
	var o apiserverOptions
	cmd := &cobra.Command{
		Use:   "apiserver --etcd URL --dir D [flags] [-- kube-apiserver flags]",
		Short: "Run kube-apiserver in-process on 127.0.0.1 until SIGTERM/SIGINT",
		Long: `Prepares D (token, service-account key, serving certificate, port), writes
D/kubeconfig (token of a system:masters user, the serving CA), runs the real
kube-apiserver in this process and, once /readyz answers ok, prints the
kubeconfig path on stdout. Flags after "--" go to kube-apiserver unchanged.
Restarting on the same D reuses the port when it is free, so clients keep working.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if n := cmd.ArgsLenAtDash(); n >= 0 {
				if n > 0 {
					return fmt.Errorf("unexpected arguments %q (kube-apiserver flags go after --)", args[:n])
				}
				o.extra = args
			} else if len(args) > 0 {
				return fmt.Errorf("unexpected arguments %q (kube-apiserver flags go after --)", args)
			}
			return runAPIServer(o)
		},
	}
	o.addFlags(cmd, true)
	return cmd
}

// apiserverArgs returns kube-apiserver's flags for a directory prepared by
// kasdir.Layout.Prepare.
func apiserverArgs(o apiserverOptions, l kasdir.Layout, c kasdir.Credentials) []string {
	args := []string{
		"--etcd-servers=" + o.etcd,
		"--bind-address=" + loopback.Host,
		"--advertise-address=" + loopback.Host,
		fmt.Sprintf("--secure-port=%d", c.Port),
		"--cert-dir=" + l.CertDir(),
		"--tls-cert-file=" + l.ServingCert(),
		"--tls-private-key-file=" + l.ServingKey(),
		// Only an allocation range for Service objects; nothing listens or
		// dials there (no kube-proxy, no endpoints).
		"--service-cluster-ip-range=10.96.0.0/24",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + l.ServiceAccountKey(),
		"--service-account-signing-key-file=" + l.ServiceAccountKey(),
		"--token-auth-file=" + l.TokenFile(),
		"--authorization-mode=RBAC",
		"--endpoint-reconciler-type=none",
		"--enable-priority-and-fairness=false",
		// No controller-manager creates the "default" ServiceAccount, so the
		// admission plugin would reject every Pod.
		"--disable-admission-plugins=ServiceAccount",
	}
	if o.compactionInterval > 0 {
		args = append(args, "--etcd-compaction-interval="+o.compactionInterval.String())
	}
	if len(o.watchCacheSizes) > 0 {
		args = append(args, "--watch-cache-sizes="+strings.Join(o.watchCacheSizes, ","))
	}
	return append(args, o.extra...)
}

func runAPIServer(o apiserverOptions) error {
	if !strings.HasPrefix(o.etcd, "http://"+loopback.Host+":") {
		return fmt.Errorf("--etcd %q: only http://%s:PORT is allowed", o.etcd, loopback.Host)
	}
	l := kasdir.Layout{Dir: o.dir}
	creds, err := l.Prepare()
	if err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", l.Kubeconfig())
	if err != nil {
		return err
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), o.readyTimeout)
		defer cancel()
		if err := readyz.Wait(ctx, cfg, nil); err != nil {
			fmt.Fprintln(os.Stderr, "kas apiserver:", err)
			os.Exit(1)
		}
		fmt.Println(l.Kubeconfig())
	}()

	// NewAPIServerCommand installs the SIGTERM/SIGINT handler (graceful stop;
	// a second signal exits at once), so it is built only here.
	server := app.NewAPIServerCommand()
	server.SetArgs(apiserverArgs(o, l, creds))
	if code := cli.Run(server); code != 0 {
		return errors.New("kube-apiserver exited with code " + fmt.Sprint(code))
	}
	return nil
}
