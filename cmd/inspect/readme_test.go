package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// README.md's examples are generated, so they cannot drift from the code:
// a fenced block after a marker line
//
//	<!-- example: GOLDEN, GOLDEN, ... -->
//
// is a shell transcript whose "$ " lines are run, in order, in a directory
// holding the test fixture. Each "$ inspect ..." line takes the next
// GOLDEN: its stdout must be testdata/GOLDEN.golden (so the golden tests
// and the README show the same command's output), and "-" means an output
// that no golden holds (errors, compact). The block is the commands with
// their stdout (from the golden), stderr as a terminal shows it and
// "[exit status N]" when N is not 0. A block after
//
//	<!-- example-file: NAME -->
//
// is written to NAME before the commands run (the key file). The
// directory holds, besides: cache.db (the fixture: writeFixture),
// later.db (the fixture changed: writeLater),
// old-keys (a key file whose k1 is not the key the Secrets were sealed
// with) and garbage.db (cache.db with a value that is not a record in
// informers/v1/pods/objects).
//
// Commands: "inspect ARGS [| head -N]", with "# while the agent runs" to
// hold the write lock of the file while it runs; "cp FROM TO"; "truncate
// -s SIZE FILE". Arguments split on blanks, with single or double quotes.
//
// go test ./cmd/inspect -update rewrites the goldens and these blocks
// alike (a change of output, e.g. a new format version).
func TestRegressionReadmeExamples(t *testing.T) {
	pageSized(t)
	// This directory's README.md, and the repository's, whose section on
	// inspect shows the kubectl-style use.
	for _, readme := range []struct {
		path      string
		minBlocks int
	}{{"README.md", 10}, {filepath.Join("..", "..", "README.md"), 1}} {
		t.Run(readme.path, func(t *testing.T) { checkReadme(t, readme.path, readme.minBlocks) })
	}
}

// checkReadme runs the examples of the README at path (relative to this
// directory) and compares, or with -update rewrites, its blocks.
func checkReadme(t *testing.T, path string, minBlocks int) {
	readmePath, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	readme := path
	blocks, err := parseExamples(string(src))
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) < minBlocks {
		t.Fatalf("%s: %d example blocks; the markers are gone?", readme, len(blocks))
	}
	goldenDir, err := filepath.Abs("testdata")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, from := range map[string]string{"cache.db": fixture(t), "garbage.db": withGarbageRecord(t), "later.db": later(t)} {
		copyFile(t, from, filepath.Join(dir, name))
	}
	copyFile(t, keyFile(t, wrongKey), filepath.Join(dir, "old-keys"))
	t.Chdir(dir)
	for _, b := range blocks {
		if b.file != "" {
			if err := os.WriteFile(b.file, []byte(b.body), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	out := string(src)
	for i := len(blocks) - 1; i >= 0; i-- {
		b := blocks[i]
		if b.file != "" {
			continue
		}
		body := runExample(t, b, goldenDir)
		out = out[:b.start] + body + out[b.end:]
	}
	if out == string(src) {
		return
	}
	if *update {
		if err := os.WriteFile(readmePath, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s is stale: its examples are not what the commands print; "+
		"go test ./cmd/inspect -update rewrites them (and the goldens).\n%s",
		readme, firstDiff(string(src), out))
}

// exampleBlock is a fenced block of README.md after a marker: body is
// between the fences, at src[start:end].
type exampleBlock struct {
	line       int
	goldens    []string
	file       string
	body       string
	start, end int
}

var exampleMarker = regexp.MustCompile(`(?m)^<!-- example(-file)?: ([^>]*) -->\n` + "```" + `[a-z]*\n`)

// parseExamples finds the marked blocks of src.
func parseExamples(src string) ([]exampleBlock, error) {
	var blocks []exampleBlock
	for _, m := range exampleMarker.FindAllStringSubmatchIndex(src, -1) {
		b := exampleBlock{line: strings.Count(src[:m[0]], "\n") + 1, start: m[1]}
		end := strings.Index(src[b.start:], "```\n")
		if end < 0 || (end > 0 && src[b.start+end-1] != '\n') {
			return nil, fmt.Errorf("README.md:%d: the example block has no closing fence", b.line)
		}
		b.end = b.start + end
		b.body = src[b.start:b.end]
		arg := strings.TrimSpace(src[m[4]:m[5]])
		if m[2] >= 0 {
			b.file = arg
		} else {
			for _, g := range strings.Split(arg, ",") {
				b.goldens = append(b.goldens, strings.TrimSpace(g))
			}
		}
		blocks = append(blocks, b)
	}
	return blocks, nil
}

var headPipe = regexp.MustCompile(`\s*\|\s*head -(\d+)$`)

// runExample runs the commands of b and returns its new body.
func runExample(t *testing.T, b exampleBlock, goldenDir string) string {
	t.Helper()
	var out strings.Builder
	goldens := b.goldens
	var cmds []string
	for _, line := range strings.Split(b.body, "\n") {
		if cmd, ok := strings.CutPrefix(line, "$ "); ok {
			cmds = append(cmds, cmd)
		}
	}
	if len(cmds) == 0 {
		t.Fatalf("README.md:%d: an example without a \"$ \" command", b.line)
	}
	printed := false // the previous command printed something
	for _, line := range cmds {
		if printed {
			out.WriteString("\n")
		}
		printed = false
		fmt.Fprintf(&out, "$ %s\n", line)
		cmd, comment, _ := strings.Cut(line, " # ")
		cmd = strings.TrimSpace(cmd)
		head := 0
		if m := headPipe.FindStringSubmatch(cmd); m != nil {
			head, _ = strconv.Atoi(m[1])
			cmd = cmd[:len(cmd)-len(m[0])]
		}
		args, err := splitArgs(cmd)
		if err != nil || len(args) == 0 {
			t.Fatalf("README.md:%d: %q: %v", b.line, line, err)
		}
		switch args[0] {
		case "cp":
			if len(args) != 3 {
				t.Fatalf("README.md:%d: %q: cp FROM TO", b.line, line)
			}
			copyFile(t, args[1], args[2])
			continue
		case "truncate":
			if len(args) != 4 || args[1] != "-s" {
				t.Fatalf("README.md:%d: %q: truncate -s SIZE FILE", b.line, line)
			}
			n, err := strconv.ParseInt(args[2], 10, 64)
			if err != nil {
				t.Fatalf("README.md:%d: %q: %v", b.line, line, err)
			}
			if err := os.Truncate(args[3], n); err != nil {
				t.Fatal(err)
			}
			continue
		case "inspect":
		default:
			t.Fatalf("README.md:%d: %q: only inspect, cp and truncate run here", b.line, line)
		}
		if len(goldens) == 0 {
			t.Fatalf("README.md:%d: more inspect commands than goldens in the marker", b.line)
		}
		g := goldens[0]
		goldens = goldens[1:]
		release := func() {}
		switch comment {
		case "":
		case "while the agent runs":
			release = lockFile(t, mustAbs(t, args[2]))
		default:
			t.Fatalf("README.md:%d: %q: unknown comment", b.line, line)
		}
		stdout, stderr, code := run(t, args[1:]...)
		release()
		if g != "-" && !*update { // -update rewrites the goldens too
			want, err := os.ReadFile(filepath.Join(goldenDir, g+".golden"))
			if err != nil {
				t.Fatalf("README.md:%d: %v", b.line, err)
			}
			// The goldens name the fixture $DIR/cache.db and a damaged
			// copy $FILE; here they are the command's FILE.
			w := strings.ReplaceAll(string(want), "$DIR/", "")
			w = strings.ReplaceAll(w, "$FILE", args[2])
			if stdout != w {
				t.Errorf("README.md:%d: %q prints other than testdata/%s.golden (is it the command of that golden?):\n%s",
					b.line, line, g, firstDiff(w, stdout))
			}
			stdout = w
		}
		if head > 0 {
			lines := strings.SplitAfter(stdout, "\n")
			if len(lines) > head {
				stdout = strings.Join(lines[:head], "")
			}
		}
		out.WriteString(stdout)
		if stdout != "" && !strings.HasSuffix(stdout, "\n") {
			out.WriteString("\n") // a shell's prompt would follow on this line
		}
		out.WriteString(terminal(stderr))
		if code != 0 {
			fmt.Fprintf(&out, "[exit status %d]\n", code)
		}
		printed = stdout != "" || stderr != "" || code != 0
	}
	if len(goldens) != 0 {
		t.Fatalf("README.md:%d: goldens %v left over: fewer inspect commands than goldens", b.line, goldens)
	}
	return out.String()
}

// terminal is what a terminal shows of s: each line's text after its
// last carriage return (a progress bar redraws itself).
func terminal(s string) string {
	lines := strings.SplitAfter(s, "\n")
	for i, l := range lines {
		if j := strings.LastIndexByte(l, '\r'); j >= 0 {
			lines[i] = l[j+1:]
		}
	}
	return strings.Join(lines, "")
}

// splitArgs splits a command line on blanks, with single or double quotes.
func splitArgs(s string) ([]string, error) {
	var args []string
	var cur strings.Builder
	in, quote := false, byte(0)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
			cur.WriteByte(c)
		case c == '\'' || c == '"':
			quote, in = c, true
		case c == ' ' || c == '\t':
			if in {
				args = append(args, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteByte(c)
			in = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unclosed %c quote", quote)
	}
	if in {
		args = append(args, cur.String())
	}
	return args, nil
}

// firstDiff shows where got first differs from want, with some context.
func firstDiff(want, got string) string {
	wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(wl) || i < len(gl); i++ {
		var w, g string
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if w != g || i >= len(wl) || i >= len(gl) {
			return fmt.Sprintf("line %d:\n- %s\n+ %s", i+1, w, g)
		}
	}
	return "(no difference)"
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func mustAbs(t *testing.T, path string) string {
	t.Helper()
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// The parser finds the markers and their blocks, and a stale block fails.
func TestReadmeExampleParser(t *testing.T) {
	src := "text\n<!-- example-file: keys -->\n```\nk1:AAAA\n```\n\n<!-- example: ls, - -->\n```\n$ inspect ls cache.db\nold\n```\n"
	blocks, err := parseExamples(src)
	if err != nil || len(blocks) != 2 {
		t.Fatalf("%v: %+v", err, blocks)
	}
	if blocks[0].file != "keys" || blocks[0].body != "k1:AAAA\n" || blocks[1].body != "$ inspect ls cache.db\nold\n" ||
		fmt.Sprint(blocks[1].goldens) != "[ls -]" || src[blocks[1].start:blocks[1].end] != blocks[1].body {
		t.Fatalf("%+v", blocks)
	}
	if _, err := parseExamples("<!-- example: ls -->\n```\n$ inspect ls cache.db\n"); err == nil {
		t.Fatal("no error for a block without its closing fence")
	}
	for in, want := range map[string]string{
		`ls cache.db -l 'tier in (web,cache)'`: "[ls cache.db -l tier in (web,cache)]",
		`a "b c"  d`:                           "[a b c d]",
	} {
		if got, err := splitArgs(in); err != nil || fmt.Sprint(got) != want {
			t.Errorf("splitArgs(%q) = %q, %v; want %s", in, got, err, want)
		}
	}
	if got := terminal("\rx: 1/2\rx: 2/2\nwarning\n"); got != "x: 2/2\nwarning\n" {
		t.Errorf("terminal: %q", got)
	}
	if !bytes.Equal([]byte(firstDiff("a\nb", "a\nc")), []byte("line 2:\n- b\n+ c")) {
		t.Errorf("firstDiff: %q", firstDiff("a\nb", "a\nc"))
	}
}
