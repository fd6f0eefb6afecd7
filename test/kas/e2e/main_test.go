// Package e2e tests boltinformer end to end against a real kube-apiserver and
// etcd on 127.0.0.1 (the harness in test/kas/harness). Each test asserts on
// the API server's own evidence where it can: the requests the agent made
// (a recording http.RoundTripper on its rest.Config) and the apiserver's
// apiserver_request_total.
//
// One cluster serves the whole package (tests run one at a time, each in
// its own namespace). It runs with a 5 s etcd compaction interval and no
// watch cache for Secrets, so that a saved resourceVersion for Secrets
// becomes too old (410) within seconds; the other resources keep their
// watch cache. Tests that restart the apiserver leave it running.
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
