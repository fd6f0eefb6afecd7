package boltinformer

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// A connection the peer closes before an answer (an apiserver going
// down, a load balancer without a backend) reaches the client as
// net/http's "http: server closed idle connection" when the transport's
// reader sees the close before the request is registered on the new
// connection (net/http does not retry it on a fresh connection, nor
// client-go, for which it is not a probable EOF). isOffline took it for an
// answer: NewFactory failed with ErrClusterIdentity on a start that was
// offline, and TestFactoryConnectionErrorIsOffline/closed failed now and
// then under load with this very error. net/http's error is unexported:
// it is matched by its text, as apimachinery's IsProbableEOF matches
// net/http's others.
func TestRegressionServerClosedIdleIsOffline(t *testing.T) {
	closedIdle := &url.Error{Op: "Get", URL: "https://127.0.0.1:6443/api/v1/namespaces/kube-system", Err: errors.New("http: server closed idle connection")}
	if !isOffline(closedIdle) {
		t.Fatalf("isOffline(%v) = false, want true", closedIdle)
	}
	uid, err := lookupNamespaceUID(klog.Background(), time.Second, func(context.Context) (*corev1.Namespace, error) { return nil, closedIdle })
	if uid != "" || err != nil {
		t.Fatalf("lookup with the connection closed by the peer: %q, %v; want an offline start (\"\", nil)", uid, err)
	}
	// Only net/http's own text: an error that merely mentions it is not
	// (an answer's message can say anything).
	for _, e := range []error{
		errors.New("the server said: http: server closed idle connection"),
		&url.Error{Op: "Get", URL: "https://x", Err: errors.New("proxy: http: server closed idle connection, giving up")},
	} {
		if isOffline(e) {
			t.Errorf("isOffline(%v) = true", e)
		}
	}
}
