package e2e

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/kubernetes"
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
	stopHeartbeat, err := heartbeatCluster(c, heartbeatPeriod)
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: heartbeat: %v\n", err)
		_ = c.Stop()
		return 1
	}
	code := m.Run()
	stopHeartbeat()
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

// heartbeatPeriod is how often heartbeat renews its lease: as often as
// kube-controller-manager's and kube-scheduler's leader elections do.
const heartbeatPeriod = 2 * time.Second

// heartbeatCluster renews a Lease in kube-system every period
// (harness.Heartbeat); its requests are leases, never a resource the
// tests count.
func heartbeatCluster(c *harness.Cluster, period time.Duration) (stop func(), err error) {
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		return nil, err
	}
	return harness.Heartbeat(cs, "kube-system", "e2e-heartbeat", period)
}
