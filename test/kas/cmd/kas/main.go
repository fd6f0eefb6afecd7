package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	if err := newRootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "kas:", err)
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "kas",
		Short:         "A real kube-apiserver and etcd on 127.0.0.1 for tests",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newEtcdCommand(), newAPIServerCommand(), newUpCommand(), newWaitCommand())
	return root
}
