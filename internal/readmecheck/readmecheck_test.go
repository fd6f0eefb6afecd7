package readmecheck_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/boltinformer/boltinformer/internal/readmecheck"
)

func TestGoBlocks(t *testing.T) {
	md := "# T\n\n## A\n\n```go\nx := 1\n```\n\n```sh\n```go\n```\n\n```go\ny := 2\nz := 3\n```\n\n### B c\n```go\n```\n"
	path := filepath.Join(t.TempDir(), "README.md")
	if err := os.WriteFile(path, []byte(md), 0o644); err != nil {
		t.Fatal(err)
	}
	blocks, err := readmecheck.GoBlocks(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []readmecheck.Block{
		{Section: "A", Index: 1, Line: 5, Text: "x := 1\n"},
		{Section: "A", Index: 2, Line: 13, Text: "y := 2\nz := 3\n"},
		{Section: "B c", Index: 1, Line: 19, Text: ""},
	}
	if len(blocks) != len(want) {
		t.Fatalf("got %+v, want %+v", blocks, want)
	}
	for i := range want {
		if blocks[i] != want[i] {
			t.Errorf("block %d: got %+v, want %+v", i, blocks[i], want[i])
		}
	}
	if err := os.WriteFile(path, []byte("## A\n```go\nx := 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readmecheck.GoBlocks(path); err == nil || !strings.Contains(err.Error(), "not closed") {
		t.Errorf("an unclosed block: %v", err)
	}
}

// Compile fails, with the compiler's message, on code that does not
// compile, and passes on code that does.
func TestCompile(t *testing.T) {
	if err := readmecheck.Compile("../..", t.TempDir(), "package p\n\nfunc f() { var x int }\n"); err == nil || !strings.Contains(err.Error(), "declared and not used") {
		t.Errorf("bad code: %v", err)
	}
	if err := readmecheck.Compile("../..", t.TempDir(), "package p\n\nimport \"github.com/boltinformer/boltinformer\"\n\nvar _ = boltinformer.Open\n"); err != nil {
		t.Error(err)
	}
}
