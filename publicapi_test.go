package boltinformer_test

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/boltinformer/boltinformer"
)

// The public API does not make users import internal layers: the root
// package's exported signatures, fields and aliases name only its own
// types and other modules' (indexer.Mode, recovery.Decision,
// reflector.Stats, store.CommitInfo and an alias of an internal Keyring
// were in them), but for the two accessors of the layers below kept on
// purpose; the packages users build on (recovery/crashtest, the kit for
// their restart tests, whose VerifyOptions.Keyring was the internal
// codec's; localapi) name no type of an internal/ package.
func TestRegressionPublicAPIUsesNoInternalTypes(t *testing.T) {
	const module = "github.com/boltinformer/boltinformer"
	layers := map[string]bool{
		module + "/indexer": true, module + "/processor": true, module + "/recovery": true,
		module + "/reflector": true, module + "/store": true,
	}
	allowed := map[string]bool{
		"Informer.Indexer": true, // *indexer.Indexer, for tools and tests (README, "What is public")
		"DB.Store":         true, // *store.DB, likewise
	}
	check := func(dir string, forbidden func(path string) bool) []string {
		fset := token.NewFileSet()
		names, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		files := map[string]*ast.File{}
		for _, name := range names {
			if strings.HasSuffix(name, "_test.go") {
				continue
			}
			if files[name], err = parser.ParseFile(fset, name, nil, 0); err != nil {
				t.Fatal(err)
			}
		}
		var bad []string
		for name, file := range files {
			imports := map[string]string{} // local name -> path
			for _, im := range file.Imports {
				p, _ := strconv.Unquote(im.Path.Value)
				local := p[strings.LastIndex(p, "/")+1:]
				if im.Name != nil {
					local = im.Name.Name
				}
				imports[local] = p
			}
			report := func(where string, n ast.Node) {
				if allowed[where] {
					return
				}
				ast.Inspect(n, func(n ast.Node) bool {
					sel, ok := n.(*ast.SelectorExpr)
					if !ok {
						return true
					}
					if id, ok := sel.X.(*ast.Ident); ok && forbidden(imports[id.Name]) {
						bad = append(bad, filepath.Base(name)+": "+where+" uses "+id.Name+"."+sel.Sel.Name)
					}
					return true
				})
			}
			for _, d := range file.Decls {
				switch d := d.(type) {
				case *ast.FuncDecl:
					if !d.Name.IsExported() {
						continue
					}
					where := d.Name.Name
					if d.Recv != nil {
						recv := d.Recv.List[0].Type
						if star, ok := recv.(*ast.StarExpr); ok {
							recv = star.X
						}
						id, ok := recv.(*ast.Ident)
						if !ok || !id.IsExported() {
							continue
						}
						where = id.Name + "." + where
					}
					report(where, d.Type)
				case *ast.GenDecl:
					for _, s := range d.Specs {
						switch s := s.(type) {
						case *ast.TypeSpec:
							if !s.Name.IsExported() {
								continue
							}
							if st, ok := s.Type.(*ast.StructType); ok {
								for _, f := range st.Fields.List {
									if len(f.Names) == 0 || f.Names[0].IsExported() {
										report(s.Name.Name+" field", f.Type)
									}
								}
								continue
							}
							report(s.Name.Name, s.Type)
						}
					}
				}
			}
		}
		sort.Strings(bad)
		return bad
	}
	if bad := check(".", func(p string) bool { return layers[p] || strings.HasPrefix(p, module+"/internal/") }); len(bad) > 0 {
		t.Errorf("the root package's API names internal layers' types:\n\t%s", strings.Join(bad, "\n\t"))
	}
	for _, dir := range []string{"recovery/crashtest", "localapi"} {
		if bad := check(dir, func(p string) bool { return strings.HasPrefix(p, module+"/internal/") }); len(bad) > 0 {
			t.Errorf("package %s's API names internal/ types:\n\t%s", dir, strings.Join(bad, "\n\t"))
		}
	}
}

// The errors the README tells callers to branch on are the root
// package's: Open's error for a damaged file with FailOnCorrupt (and the
// quarantine's cause without it) wrapped store.ErrCorrupt, and Flush's and
// Close's for objects an informer cannot persist indexer.ErrNotPersisted,
// with no root counterpart: errors.Is needed an import of the layers below
// (TestRegressionUnencodableTypeHoldsTheFile checks ErrNotPersisted).
func TestRegressionRootSentinelsForWhatCallersBranchOn(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cache.db")
	db, err := boltinformer.Open(path, &boltinformer.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// The meta pages alone: the high-water mark does not fit the file.
	if err := os.Truncate(path, 2*int64(os.Getpagesize())); err != nil {
		t.Fatal(err)
	}
	if _, err := boltinformer.Open(path, &boltinformer.Options{FailOnCorrupt: true, NoSync: true}); !errors.Is(err, boltinformer.ErrCorrupt) {
		t.Fatalf("Open of a truncated file with FailOnCorrupt: %v, want an error wrapping boltinformer.ErrCorrupt", err)
	}
	db, err = boltinformer.Open(path, &boltinformer.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if rep := db.Recovery(); rep.Quarantined == "" || !errors.Is(rep.Cause, boltinformer.ErrCorrupt) {
		t.Fatalf("Recovery of a truncated file: %+v, want it quarantined with a cause wrapping boltinformer.ErrCorrupt", rep)
	}
	// The README names no error of a layer below but in the table of
	// what was written before.
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	layerError := regexp.MustCompile(`\b(indexer|store|recovery|reflector|processor)\.(Err[A-Z]\w*|\*?\w+Error)\b`)
	oldNames := false // in the table of what was written before
	for i, line := range strings.Split(string(readme), "\n") {
		switch {
		case strings.HasPrefix(line, "| was | now |"):
			oldNames = true
		case !strings.HasPrefix(line, "|"):
			oldNames = false
		}
		if m := layerError.FindString(line); m != "" && !oldNames {
			t.Errorf("README.md:%d tells callers of %s, a layer below the root package: %s", i+1, m, line)
		}
	}
}
