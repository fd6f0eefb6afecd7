package boltinformer_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
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
		pkgs, err := parser.ParseDir(fset, dir, func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
		if err != nil {
			t.Fatal(err)
		}
		var bad []string
		for _, pkg := range pkgs {
			for name, file := range pkg.Files {
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
