// Package readmecheck holds the README's Go examples to code that
// compiles: it reads a function's body from a Go file and the first Go
// block of a README section, for tests to compare. It never writes files.
package readmecheck

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
)

// ErrNotFound is returned when the function, the section or its Go block
// is missing.
var ErrNotFound = errors.New("readmecheck: not found")

// FuncBody returns the body of the top-level function name in the Go file
// at path, without its braces and with one leading tab removed from each
// line: the text a README shows.
func FuncBody(path, name string) (string, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("readmecheck: %w", err)
	}
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, path, src, 0)
	if err != nil {
		return "", fmt.Errorf("readmecheck: %w", err)
	}
	for _, d := range file.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Name.Name != name || fn.Recv != nil {
			continue
		}
		start, end := fset.Position(fn.Body.Lbrace).Offset+2, fset.Position(fn.Body.Rbrace).Offset
		var b strings.Builder
		for _, l := range strings.SplitAfter(string(src[start:end]), "\n") {
			b.WriteString(strings.TrimPrefix(l, "\t"))
		}
		return b.String(), nil
	}
	return "", fmt.Errorf("%w: function %s in %s", ErrNotFound, name, path)
}

// GoBlock returns the first ```go block after the heading "## section" of
// the Markdown file at path, without its fences.
func GoBlock(path, section string) (string, error) {
	readme, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("readmecheck: %w", err)
	}
	_, rest, ok := strings.Cut(string(readme), "\n## "+section+"\n")
	if !ok {
		return "", fmt.Errorf("%w: section %q in %s", ErrNotFound, section, path)
	}
	_, rest, ok = strings.Cut(rest, "```go\n")
	block, _, ok2 := strings.Cut(rest, "```\n")
	if !ok || !ok2 {
		return "", fmt.Errorf("%w: a go block in section %q of %s", ErrNotFound, section, path)
	}
	return block, nil
}
