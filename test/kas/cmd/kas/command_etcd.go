package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/boltinformer/boltinformer/test/kas/internal/etcdrun"
	"github.com/boltinformer/boltinformer/test/kas/internal/kasdir"
)

func newEtcdCommand() *cobra.Command {
	var (
		cfg     etcdrun.Config
		urlFile string
	)
	cmd := &cobra.Command{
		Use:   "etcd --data-dir D [--url-file F]",
		Short: "Run embedded etcd on random 127.0.0.1 ports until SIGTERM/SIGINT",
		Long: `Runs a single-member etcd on 127.0.0.1. When it serves, prints its client URL
on stdout and writes it to --url-file (atomically). Restarting on the same data
directory keeps the data and the revision, and the ports when they are free.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			return runEtcd(ctx, cfg, urlFile)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.DataDir, "data-dir", "", "etcd data directory (created if missing)")
	f.StringVar(&urlFile, "url-file", "", "file to write the client URL to once etcd serves")
	f.StringVar(&cfg.LogLevel, "log-level", "warn", "etcd log level: debug, info, warn, error")
	f.StringVar(&cfg.LogFile, "log-file", "", "file for etcd's log (default stderr)")
	f.BoolVar(&cfg.UnsafeNoFsync, "unsafe-no-fsync", false, "disable fsync in etcd (faster, unsafe on machine crash)")
	_ = cmd.MarkFlagRequired("data-dir")
	return cmd
}

func runEtcd(ctx context.Context, cfg etcdrun.Config, urlFile string) error {
	srv, err := etcdrun.Start(ctx, cfg)
	if err != nil {
		return err
	}
	defer srv.Close()
	if urlFile != "" {
		if err := kasdir.WriteFileAtomic(urlFile, []byte(srv.ClientURL+"\n"), 0o644); err != nil {
			return err
		}
		defer os.Remove(urlFile)
	}
	fmt.Println(srv.ClientURL)
	select {
	case <-ctx.Done():
		return nil
	case err := <-srv.Err():
		return errors.Join(errors.New("etcd failed"), err)
	}
}
