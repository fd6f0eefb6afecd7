// Command kas runs a real kube-apiserver with embedded etcd on 127.0.0.1, for
// boltinformer's end-to-end tests, benchmarks and demo.
//
//	kas etcd --data-dir D [--url-file F]        embedded etcd, prints its client URL
//	kas apiserver --etcd URL --dir D [flags]    in-process kube-apiserver, prints D/kubeconfig
//	kas up --dir D [flags]                      both; stops cleanly on SIGTERM/SIGINT
//	kas wait --dir D                            waits until D's apiserver is ready
//
// Every listener is on 127.0.0.1. See test/kas/README.md.
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
