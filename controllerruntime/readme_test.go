package boltcr_test

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/boltinformer/boltinformer"
	boltcr "github.com/boltinformer/boltinformer/controllerruntime"
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
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == "runOperator" {
			start, end := fset.Position(fn.Body.Lbrace).Offset+2, fset.Position(fn.Body.Rbrace).Offset
			var lines []string
			for _, l := range strings.SplitAfter(string(src[start:end]), "\n") {
				lines = append(lines, strings.TrimPrefix(l, "\t"))
			}
			body = strings.Join(lines, "")
		}
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "\n## controller-runtime\n")
	if !ok {
		t.Fatal(`README.md has no "## controller-runtime" section`)
	}
	_, rest, ok = strings.Cut(rest, "```go\n")
	block, _, ok2 := strings.Cut(rest, "```\n")
	if !ok || !ok2 {
		t.Fatal(`README.md's "controller-runtime" section has no go block`)
	}
	if body == "" || block != body {
		t.Errorf("README.md's controller-runtime example is not runOperator's body (readme_test.go); make them equal.\nREADME:\n%s\nrunOperator:\n%s", block, body)
	}
}
