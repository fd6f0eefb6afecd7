// Package readmecheck holds the README's Go examples to code that
// compiles: it reads a function's body from a Go file and the Go blocks of
// a README, for tests to compare, and compiles snippets (Compile). It
// never writes into the source tree.
package readmecheck

import (
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
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

// Block is one fenced Go block of a Markdown file.
type Block struct {
	// Section is the nearest heading above the block, without its "#"s.
	Section string
	// Index counts the Go blocks of the section, from 1.
	Index int
	// Line is the line of the opening fence, from 1.
	Line int
	// Text is the block without its fences.
	Text string
}

// GoBlocks returns every ```go block of the Markdown file at path, in
// order. An unclosed block is an error.
func GoBlocks(path string) ([]Block, error) {
	md, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("readmecheck: %w", err)
	}
	var out []Block
	lines := strings.SplitAfter(string(md), "\n")
	section, index := "", 0
	fenced := false // inside a block of another language
	for i := 0; i < len(lines); i++ {
		l := strings.TrimRight(lines[i], "\n")
		switch {
		case fenced:
			// A closing fence has no info string.
			if strings.TrimSpace(l) == "```" {
				fenced = false
			}
		case strings.HasPrefix(l, "#"):
			section, index = strings.TrimSpace(strings.TrimLeft(l, "#")), 0
		case l == "```go":
			b := Block{Section: section, Line: i + 1}
			var text strings.Builder
			j := i + 1
			for ; j < len(lines) && strings.TrimRight(lines[j], "\n") != "```"; j++ {
				text.WriteString(lines[j])
			}
			if j == len(lines) {
				return nil, fmt.Errorf("readmecheck: %s:%d: the Go block is not closed", path, b.Line)
			}
			index++
			b.Index, b.Text = index, text.String()
			out = append(out, b)
			i = j
		case strings.HasPrefix(l, "```"):
			fenced = true
		}
	}
	return out, nil
}

// Compile compiles src, the text of one Go file (its package clause
// included), as a package of its own inside the module at moduleDir, with
// `go build -overlay`: the file is placed in a directory that does not
// exist, so nothing is written into the source tree. tmpDir holds the
// overlay's files. The error holds the compiler's output.
func Compile(moduleDir, tmpDir, src string) error {
	abs, err := filepath.Abs(moduleDir)
	if err != nil {
		return fmt.Errorf("readmecheck: %w", err)
	}
	file := filepath.Join(tmpDir, "snippet.go")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		return fmt.Errorf("readmecheck: %w", err)
	}
	pkgDir := filepath.Join(abs, "internal", "readmecheck", "zz_snippet_not_a_directory")
	overlay := filepath.Join(tmpDir, "overlay.json")
	ov := fmt.Sprintf(`{"Replace":{%q:%q}}`, filepath.Join(pkgDir, "snippet.go"), file)
	if err := os.WriteFile(overlay, []byte(ov), 0o644); err != nil {
		return fmt.Errorf("readmecheck: %w", err)
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("readmecheck: the go command: %w", err)
	}
	cmd := exec.Command(goBin, "build", "-overlay", overlay, "./internal/readmecheck/zz_snippet_not_a_directory")
	cmd.Dir = abs
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("readmecheck: go build: %w\n%s", err, out.String())
	}
	return nil
}
