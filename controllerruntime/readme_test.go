package boltcr_test

import (
	"context"
	"testing"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/boltinformer/boltinformer"
	boltcr "github.com/boltinformer/boltinformer/controllerruntime"
	"github.com/boltinformer/boltinformer/internal/readmecheck"
)

// runOperator is the README's controller-runtime example, word for word:
// compiled here (TestReadmeGoExample keeps the two equal).
func runOperator(ctx context.Context, cfg *rest.Config) error {
	db, err := boltinformer.Open("/var/lib/operator/cache.db", &boltinformer.Options{
		Registerer: metrics.Registry, // the file's metrics on the manager's /metrics
	})
	if err != nil {
		return err
	}
	defer db.Close() // after mgr.Start has returned: every informer has stopped

	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		NewCache: boltcr.NewCache(db, nil), // the one option
	})
	if err != nil {
		return err
	}
	// Add controllers as usual (ctrl.NewControllerManagedBy(mgr)...).
	return mgr.Start(ctx)
}

// TestReadmeGoExample: README.md's "controller-runtime" Go block is
// runOperator's body, which compiles.
func TestReadmeGoExample(t *testing.T) {
	_ = runOperator
	body, err := readmecheck.FuncBody("readme_test.go", "runOperator")
	if err != nil {
		t.Fatal(err)
	}
	block, err := readmecheck.GoBlock("../README.md", "controller-runtime")
	if err != nil {
		t.Fatal(err)
	}
	if block != body {
		t.Errorf("README.md's controller-runtime example is not runOperator's body (readme_test.go); make them equal.\nREADME:\n%s\nrunOperator:\n%s", block, body)
	}
}
