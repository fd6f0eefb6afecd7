package localapi

import (
	"fmt"
	"os"
	"testing"

	"github.com/boltinformer/boltinformer/test/kas/harness"
)

// cluster is the package's shared cluster, started by TestMain.
var cluster *harness.Cluster

func TestMain(m *testing.M) {
	if os.Getenv(agentEnv) != "" {
		os.Exit(agentMain())
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	c, err := harness.Start(nil, &harness.Options{
		EtcdUnsafeNoFsync: true,
		Logf:              func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) },
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "localapi e2e: start cluster: %v\n", err)
		return 1
	}
	cluster = c
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "localapi e2e: apiserver log: %s\n", c.APIServerLog())
	}
	if err := c.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "localapi e2e: stop cluster: %v\n", err)
		code = 1
	}
	if code == 0 {
		if err := harness.CheckLeaks(); err != nil {
			fmt.Fprintf(os.Stderr, "localapi e2e: %v\n", err)
			code = 1
		}
	}
	return code
}
