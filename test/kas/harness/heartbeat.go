package harness

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Heartbeat renews the Lease name in namespace ns every period until stop
// is called, as a live cluster's leader elections and node leases do
// (kube-controller-manager and kube-scheduler renew theirs every 2 s).
// The harness runs no controllers, so without it nothing moves etcd's
// revision between a test's own writes, and kube-apiserver sends a
// resumed watch no bookmark (boltinformer.InformerOptions.FreshBookmarkWait
// then waits, and lists metadata). It creates the Lease first, retrying
// for up to 10 s while the namespace may not exist yet (kube-system just
// after the start). A failed renewal (the apiserver restarted, or the
// Lease changed) reads the Lease again and tries next period. stop waits
// for the goroutine it starts.
func Heartbeat(cs kubernetes.Interface, ns, name string, period time.Duration) (stop func(), err error) {
	leases := cs.CoordinationV1().Leases(ns)
	ctx, cancel := context.WithCancel(context.Background())
	var l *coordinationv1.Lease
	for i := 0; ; i++ {
		l, err = leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		if err == nil {
			break
		}
		if i == 50 {
			cancel()
			return nil, fmt.Errorf("heartbeat: creating lease %s/%s: %w", ns, name, err)
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
				if next, err = leases.Get(ctx, l.Name, metav1.GetOptions{}); err != nil {
					continue
				}
			}
			l = next
		}
	}()
	return func() { cancel(); <-done }, nil
}
