package boltinformer_test

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer"
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
	defer db.Close() // runs after f.Shutdown: flushes and closes the file

	f, err := boltinformer.NewFactory(db, restConfig, &boltinformer.FactoryOptions{
		TweakListOptions: func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
		},
	})
	if err != nil {
		return err
	}
	pods, err := f.InformerFor(&corev1.Pod{}, "pods", nil)
	if err != nil {
		return err
	}
	lister := corev1listers.NewPodLister(pods.GetIndexer()) // serves from disk at once
	if _, err := pods.AddEventHandler(handler); err != nil {
		return err
	}

	f.Start(ctx)       // the informers run until ctx is done
	defer f.Shutdown() // waits for them to stop
	// At once on a warm start: the file's objects are loaded.
	if !cache.WaitForCacheSync(ctx.Done(), pods.HasSynced) {
		return ctx.Err()
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
	src, err := os.ReadFile("readme_test.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "readme_test.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	var body string
	for _, d := range file.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == "runNodeAgent" {
			start, end := fset.Position(fn.Body.Lbrace).Offset+2, fset.Position(fn.Body.Rbrace).Offset
			var lines []string
			for _, l := range strings.SplitAfter(string(src[start:end]), "\n") {
				lines = append(lines, strings.TrimPrefix(l, "\t"))
			}
			body = strings.Join(lines, "")
		}
	}
	if body == "" {
		t.Fatal("runNodeAgent not found")
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "\n## Use\n")
	if !ok {
		t.Fatal(`README.md has no "## Use" section`)
	}
	_, rest, ok = strings.Cut(rest, "```go\n")
	block, _, ok2 := strings.Cut(rest, "```\n")
	if !ok || !ok2 {
		t.Fatal(`README.md's "Use" section has no go block`)
	}
	if block != body {
		t.Errorf("README.md's Go example is not runNodeAgent's body (readme_test.go); make them equal.\nREADME:\n%s\nrunNodeAgent:\n%s", block, body)
	}
}
