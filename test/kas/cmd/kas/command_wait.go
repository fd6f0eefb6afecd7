package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/boltinformer/boltinformer/test/kas/internal/kasdir"
	"github.com/boltinformer/boltinformer/test/kas/internal/readyz"
)

func newWaitCommand() *cobra.Command {
	var (
		dir     string
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "wait --dir D [--timeout 2m]",
		Short: "Wait until the apiserver of D answers /readyz, then print D/kubeconfig",
		Long: `For scripts: "kas up --dir D &" then "KUBECONFIG=$(kas wait --dir D)".
Exits non-zero when the timeout passes first.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
			defer cancel()
			return runWait(ctx, kasdir.Layout{Dir: dir})
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "kas directory")
	cmd.Flags().DurationVar(&timeout, "timeout", 2*time.Minute, "how long to wait")
	_ = cmd.MarkFlagRequired("dir")
	return cmd
}

func runWait(ctx context.Context, l kasdir.Layout) error {
	tick := time.NewTicker(readyz.Interval)
	defer tick.Stop()
	for {
		if _, err := os.Stat(l.Kubeconfig()); err == nil {
			break
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no %s yet: %w", l.Kubeconfig(), ctx.Err())
		case <-tick.C:
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", l.Kubeconfig())
	if err != nil {
		return err
	}
	if err := readyz.Wait(ctx, cfg, nil); err != nil {
		return err
	}
	fmt.Println(l.Kubeconfig())
	return nil
}
