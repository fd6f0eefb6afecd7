package fleet

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"

	"github.com/boltinformer/boltinformer/test/kas/harness"
)

var (
	clusterOnce sync.Once
	cluster     *harness.Cluster
	clusterErr  error
)

// sharedCluster starts the package's cluster on first use.
func sharedCluster(tb testing.TB) *harness.Cluster {
	tb.Helper()
	clusterOnce.Do(func() {
		cluster, clusterErr = harness.Start(nil, &harness.Options{
			EtcdUnsafeNoFsync: true, // the measurements are of the apiserver, not etcd's disk
			Logf: func(format string, args ...any) {
				fmt.Fprintf(os.Stderr, format+"\n", args...)
			},
		})
	})
	if clusterErr != nil {
		tb.Fatalf("start cluster: %v", clusterErr)
	}
	return cluster
}

func TestMain(m *testing.M) {
	if os.Getenv("BOLTINFORMER_FLEET_LOGS") == "" {
		// Hundreds of informers log their starts: keep the results readable.
		klog.SetLogger(logr.Discard())
	}
	code := m.Run()
	if cluster != nil {
		if code != 0 {
			fmt.Fprintf(os.Stderr, "fleet: apiserver log: %s\n", cluster.APIServerLog())
		}
		if err := cluster.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "fleet: stop cluster: %v\n", err)
			code = 1
		}
	}
	if code == 0 {
		if err := harness.CheckLeaks(); err != nil {
			fmt.Fprintf(os.Stderr, "fleet: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
