package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/boltinformer/boltinformer/test/kas/internal/child"
	"github.com/boltinformer/boltinformer/test/kas/internal/etcdrun"
	"github.com/boltinformer/boltinformer/test/kas/internal/kasdir"
)

// stopGrace is how long a child gets between SIGTERM and SIGKILL.
const stopGrace = 20 * time.Second

func newUpCommand() *cobra.Command {
	var (
		o       apiserverOptions
		etcdLog string
		noFsync bool
	)
	cmd := &cobra.Command{
		Use:   "up --dir D [flags] [-- kube-apiserver flags]",
		Short: "Run etcd (in-process) and kube-apiserver (a child) until SIGTERM/SIGINT",
		Long: `Runs embedded etcd on D/etcd in this process and "kas apiserver" as a child,
logging to D/etcd.log and D/apiserver.log. When the apiserver is ready, prints
the kubeconfig path (D/kubeconfig) on stdout. On SIGTERM or SIGINT, stops the
apiserver, then etcd, and exits 0. Running it again on the same D keeps the
data, the resourceVersions, the credentials and (when free) the port.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if n := cmd.ArgsLenAtDash(); n > 0 || (n < 0 && len(args) > 0) {
				return fmt.Errorf("unexpected arguments %q (kube-apiserver flags go after --)", args)
			} else if n == 0 {
				o.extra = args
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			return runUp(ctx, o, etcdrun.Config{LogLevel: etcdLog, UnsafeNoFsync: noFsync})
		},
	}
	o.addFlags(cmd, false)
	cmd.Flags().StringVar(&etcdLog, "etcd-log-level", "warn", "etcd log level: debug, info, warn, error")
	cmd.Flags().BoolVar(&noFsync, "etcd-unsafe-no-fsync", false, "disable fsync in etcd")
	return cmd
}

func runUp(ctx context.Context, o apiserverOptions, ecfg etcdrun.Config) (err error) {
	l := kasdir.Layout{Dir: o.dir}
	if err := os.MkdirAll(l.Dir, 0o700); err != nil {
		return err
	}
	ecfg.DataDir = l.EtcdDataDir()
	ecfg.LogFile = l.EtcdLog()
	etcd, err := etcdrun.Start(ctx, ecfg)
	if err != nil {
		return fmt.Errorf("%w (log: %s)", err, l.EtcdLog())
	}
	defer etcd.Close()
	if err := kasdir.WriteFileAtomic(l.EtcdURLFile(), []byte(etcd.ClientURL+"\n"), 0o644); err != nil {
		return err
	}
	defer os.Remove(l.EtcdURLFile())

	self, err := os.Executable()
	if err != nil {
		return err
	}
	logf, err := os.OpenFile(l.APIServerLog(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	args := []string{"apiserver", "--etcd", etcd.ClientURL, "--dir", l.Dir,
		"--ready-timeout", o.readyTimeout.String()}
	if o.compactionInterval > 0 {
		args = append(args, "--compaction-interval", o.compactionInterval.String())
	}
	if len(o.watchCacheSizes) > 0 {
		args = append(args, "--watch-cache-sizes", strings.Join(o.watchCacheSizes, ","))
	}
	if len(o.extra) > 0 {
		args = append(append(args, "--"), o.extra...)
	}
	pr, pw := io.Pipe()
	apiserver, err := child.Start(self, args, pw, logf, os.Environ())
	if err != nil {
		return err
	}
	defer func() {
		if serr := apiserver.Stop(stopGrace); serr != nil {
			err = errors.Join(err, fmt.Errorf("stop apiserver: %w", serr))
		}
		_ = pw.Close()
	}()
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if line := strings.TrimSpace(sc.Text()); line != "" {
				select {
				case ready <- line:
				default:
				}
			}
		}
	}()
	fmt.Fprintf(os.Stderr, "kas up: etcd %s; starting kube-apiserver (log: %s)\n", etcd.ClientURL, l.APIServerLog())
	start := time.Now()
	for {
		select {
		case path := <-ready:
			fmt.Fprintf(os.Stderr, "kas up: ready in %s; export KUBECONFIG=%s; SIGTERM or Ctrl-C stops\n",
				time.Since(start).Round(time.Millisecond), path)
			fmt.Println(path)
		case <-ctx.Done():
			fmt.Fprintln(os.Stderr, "kas up: stopping")
			return nil
		case <-apiserver.Done():
			return fmt.Errorf("kube-apiserver exited: %v (log: %s)", apiserver.Err(), l.APIServerLog())
		case err := <-etcd.Err():
			return fmt.Errorf("etcd failed: %w (log: %s)", err, l.EtcdLog())
		}
	}
}
