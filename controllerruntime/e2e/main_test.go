package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	stopHeartbeat, err := heartbeat(c, heartbeatPeriod)
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

// heartbeat renews a Lease in kube-system every period until stopped, as
// a live cluster's leader elections and node leases do. The harness runs
// no controllers, so without it nothing moves etcd's revision between the
// tests' own writes, and kube-apiserver sends a resumed watch no bookmark
// (boltinformer.InformerOptions.FreshBookmarkWait: an informer waits for
// one, then lists metadata). Its requests are leases, never a resource
// the tests count.
func heartbeat(c *harness.Cluster, period time.Duration) (stop func(), err error) {
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		return nil, err
	}
	leases := cs.CoordinationV1().Leases("kube-system")
	ctx, cancel := context.WithCancel(context.Background())
	var l *coordinationv1.Lease
	for i := 0; ; i++ { // kube-system may not exist for a moment after the start
		l, err = leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "e2e-heartbeat"}}, metav1.CreateOptions{})
		if err == nil {
			break
		}
		if i == 50 {
			cancel()
			return nil, err
		}
		time.Sleep(200 * time.Millisecond)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(period):
			}
			now := metav1.NewMicroTime(time.Now())
			l.Spec.RenewTime = &now
			next, err := leases.Update(ctx, l, metav1.UpdateOptions{})
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				// The apiserver is down (a test restarts it) or the lease
				// changed: try again next period, quietly.
				if next, err = leases.Get(ctx, l.Name, metav1.GetOptions{}); err != nil {
					continue
				}
			}
			l = next
		}
	}()
	return func() { cancel(); <-done }, nil
}
