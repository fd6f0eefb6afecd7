package e2e

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/boltinformer/boltinformer/test/kas/harness"
)

// cluster is the package's shared cluster, started by TestMain.
var cluster *harness.Cluster

// compactionInterval is the shared cluster's --etcd-compaction-interval.
const compactionInterval = 5 * time.Second

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	c, err := harness.Start(nil, &harness.Options{
		CompactionInterval: compactionInterval,
		WatchCacheSizes:    []string{"secrets#0"},
		EtcdUnsafeNoFsync:  true, // the tests measure the apiserver, not etcd's disk
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
	if code == 0 {
		if err := harness.CheckLeaks(); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
			code = 1
		}
	}
	return code
}
