package e2e

import (
	"fmt"
	"os"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/boltinformer/boltinformer/test/kas/harness"
)

// cluster is the package's shared cluster, started by TestMain.
var cluster *harness.Cluster

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(runChild(mode))
	}
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	// controller-runtime's logs: BOLTCR_E2E_LOG=1 shows them (klog, -v=0).
	if os.Getenv("BOLTCR_E2E_LOG") != "" {
		ctrl.SetLogger(klog.NewKlogr())
	} else {
		ctrl.SetLogger(logr.Discard())
	}
	c, err := harness.Start(nil, &harness.Options{
		EtcdUnsafeNoFsync: true, // the tests measure the apiserver, not etcd's disk
		Logf: func(format string, args ...any) {
			fmt.Fprintf(os.Stderr, format+"\n", args...)
		},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: start cluster: %v\n", err)
		return 1
	}
	cluster = c
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "e2e: apiserver log: %s\n", c.APIServerLog())
	}
	if err := c.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: stop cluster: %v\n", err)
		code = 1
	}
	cleanupBuilds()
	return code
}
