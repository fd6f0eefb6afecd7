package boltinformer_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
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

// readmeBody is a README Go block that is the body of a function, word
// for word: the function compiles where it is (its package's tests).
type readmeBody struct{ file, fn string }

// readmeSnippet is a README Go block compiled as the body of a function
// with these parameters, after the block's text the tail (what uses the
// variables it declares), with these imports; eachLine compiles each
// line as a body of its own (alternatives, such as "before" and "after").
type readmeSnippet struct {
	imports  []string // "path", or "name path"
	params   string
	tail     string
	eachLine bool
	module   string // the module it compiles in ("": this one)
}

// readmeBlocks says how each Go block of README.md is compiled, by its
// section and its index among the section's Go blocks.
var readmeBlocks = map[string]any{
	"Use#1": readmeBody{"readme_test.go", "runNodeAgent"},
	"Use#2": readmeSnippet{
		imports:  []string{"time", "k8s.io/client-go/informers", "k8s.io/client-go/kubernetes", "github.com/boltinformer/boltinformer"},
		params:   "db *boltinformer.DB, client kubernetes.Interface, resync time.Duration",
		tail:     "factory.Start(nil)",
		eachLine: true,
	},
	"In your own agent#1":  readmeBody{"localapi/readme_test.go", "serveLocalAPI"},
	"controller-runtime#1": readmeBody{"controllerruntime/readme_test.go", "runOperator"},
	"controller-runtime#2": readmeSnippet{
		imports: []string{"sigs.k8s.io/controller-runtime/pkg/reconcile", "sigs.k8s.io/controller-runtime/pkg/controller",
			"ctrl sigs.k8s.io/controller-runtime", "corev1 k8s.io/api/core/v1", "github.com/boltinformer/boltinformer",
			"boltcr github.com/boltinformer/boltinformer/controllerruntime"},
		params: "mgr ctrl.Manager, db *boltinformer.DB, r reconcile.Reconciler",
		module: "controllerruntime",
	},
}

// Every Go block of README.md compiles (issue 26 item 2): the Local API
// snippet called f.Start(ctx), and Factory.Start takes a stop channel. A
// block is a function's body, word for word, or a snippet compiled here
// with `go build` inside a function of the parameters it needs; a new
// block with neither fails the test.
func TestRegressionReadmeGoBlocksCompile(t *testing.T) {
	blocks, err := readmecheck.GoBlocks("README.md")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	imports := map[string]map[string]bool{} // by module
	funcs := map[string]*strings.Builder{}
	for _, b := range blocks {
		key := fmt.Sprintf("%s#%d", b.Section, b.Index)
		seen[key] = true
		switch how := readmeBlocks[key].(type) {
		case readmeBody:
			body, err := readmecheck.FuncBody(how.file, how.fn)
			if err != nil {
				t.Fatal(err)
			}
			if body != b.Text {
				t.Errorf("README.md:%d (%s) is not the body of %s in %s; make them equal.\nREADME:\n%s\n%s:\n%s", b.Line, key, how.fn, how.file, b.Text, how.fn, body)
			}
		case readmeSnippet:
			mod := how.module
			if mod == "" {
				mod = "."
			}
			if imports[mod] == nil {
				imports[mod], funcs[mod] = map[string]bool{}, &strings.Builder{}
			}
			for _, imp := range how.imports {
				imports[mod][imp] = true
			}
			bodies := []string{b.Text}
			if how.eachLine {
				bodies = strings.Split(strings.TrimSpace(b.Text), "\n")
			}
			for i, body := range bodies {
				fmt.Fprintf(funcs[mod], "\n// README.md:%d\nfunc snippet%d_%d(%s) {\n%s\n%s\n}\n", b.Line, b.Line, i, how.params, body, how.tail)
			}
		default:
			t.Errorf("README.md:%d: the Go block %s is compiled by no test: add it to readmeBlocks", b.Line, key)
		}
	}
	for key := range readmeBlocks {
		if !seen[key] {
			t.Errorf("readmeBlocks names %s, which README.md does not have", key)
		}
	}
	for _, mod := range slices.Sorted(maps.Keys(imports)) {
		var src strings.Builder
		src.WriteString("package snippet\n\nimport (\n")
		for _, imp := range slices.Sorted(maps.Keys(imports[mod])) {
			if name, path, ok := strings.Cut(imp, " "); ok {
				fmt.Fprintf(&src, "\t%s %q\n", name, path)
			} else {
				fmt.Fprintf(&src, "\t%q\n", imp)
			}
		}
		src.WriteString(")\n")
		src.WriteString(funcs[mod].String())
		if err := readmecheck.Compile(mod, t.TempDir(), src.String()); err != nil {
			t.Errorf("README.md's Go snippets do not compile in module %s: %v\nthe file compiled:\n%s", mod, err, src.String())
		}
	}
}
