package e2e

// The factory's cluster identity against the real kube-apiserver with
// RBAC: a user who may not read namespace kube-system gets a 403, which is
// an answer (NewFactory's ErrClusterIdentity), not an offline start; the
// endpoint identity needs no read at all.

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"

	"github.com/boltinformer/boltinformer"
)

func TestRegressionKubeSystemForbiddenIsNotOffline(t *testing.T) {
	ensureAPIServer(t)
	// A user with no RBAC binding at all.
	cfg := cluster.RESTConfig()
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "edge-agent-without-rbac"}

	db, err := boltinformer.Open(cachePath(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	f, err := boltinformer.NewFactory(db, cfg, nil)
	if err == nil {
		t.Fatalf("NewFactory as a user who may not read kube-system: no error (cluster %q: an offline start)", f.ClusterID())
	}
	if !errors.Is(err, boltinformer.ErrClusterIdentity) || !apierrors.IsForbidden(err) {
		t.Fatalf("NewFactory as a user who may not read kube-system: %v, want ErrClusterIdentity and a 403", err)
	}

	// The endpoint identity makes no request and does not depend on the
	// user: the same as the admin's.
	f, err = boltinformer.NewFactory(db, cfg, &boltinformer.FactoryOptions{Identity: boltinformer.IdentityEndpoint})
	if err != nil {
		t.Fatal(err)
	}
	want, err := boltinformer.EndpointIdentity(cluster.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	if f.ClusterID() != want {
		t.Fatalf("endpoint identity %q, the admin's %q", f.ClusterID(), want)
	}
	if _, err := f.PersistentInformer(&corev1.ConfigMap{}); err != nil {
		t.Fatal(err)
	}
}
