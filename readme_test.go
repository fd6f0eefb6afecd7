package boltinformer_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/internal/readmecheck"
)

// runNodeAgent is README.md's example ("Use"), word for word: compiled
// here, so the README cannot show code that does not build
// (TestRegressionReadmeGoExample keeps the two equal).
func runNodeAgent(ctx context.Context, restConfig *rest.Config, node string, handler cache.ResourceEventHandler) error {
	db, err := boltinformer.Open("/var/lib/agent/cache.db", &boltinformer.Options{
		Registerer: prometheus.DefaultRegisterer, // optional metrics
	})
	if err != nil {
		return err
	}
	defer db.Close() // runs after factory.Shutdown: flushes and closes the file

	factory, err := boltinformer.NewFactory(db, restConfig, &boltinformer.FactoryOptions{
		TweakListOptions: func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
		},
	})
	if err != nil {
		return err
	}
	// client-go's generated informers, persistent: the lister serves from
	// disk at once.
	pods := factory.Core().V1().Pods()
	lister := pods.Lister()
	if _, err := pods.Informer().AddEventHandler(handler); err != nil {
		return err
	}
	// Optional: fail rather than run in memory (and the *Informer, for
	// Health, Flush, Observe).
	if _, err := factory.PersistentInformer(&corev1.Pod{}); err != nil {
		return err
	}

	factory.Start(ctx.Done()) // the informers run until ctx is done
	defer factory.Shutdown()  // waits for them to stop
	// At once on a warm start: the file's objects are loaded.
	for typ, synced := range factory.WaitForCacheSync(ctx.Done()) {
		if !synced {
			return fmt.Errorf("%v not synced: %w", typ, ctx.Err())
		}
	}
	onNode, err := lister.List(labels.Everything())
	if err != nil {
		return err
	}
	fmt.Printf("%d Pods on %s\n", len(onNode), node)
	<-ctx.Done()
	return nil
}

// README.md's Go example is runNodeAgent's body, which compiles; it was a
// fragment with "if err != nil { ... }" and unchecked errors.
func TestRegressionReadmeGoExample(t *testing.T) {
	_ = runNodeAgent
	body, err := readmecheck.FuncBody("readme_test.go", "runNodeAgent")
	if err != nil {
		t.Fatal(err)
	}
	block, err := readmecheck.GoBlock("README.md", "Use")
	if err != nil {
		t.Fatal(err)
	}
	if block != body {
		t.Errorf("README.md's Go example is not runNodeAgent's body (readme_test.go); make them equal.\nREADME:\n%s\nrunNodeAgent:\n%s", block, body)
	}
}
