package powerloss_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/boltinformer/boltinformer/internal/powerloss"
)

var files = powerloss.Files{Data: "/d/cache.db", Marks: "/d/marks"}

// hexq quotes s as strace -xx does.
func hexq(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		fmt.Fprintf(&b, "\\x%02x", s[i])
	}
	b.WriteByte('"')
	return b.String()
}

func parse(t *testing.T, lines ...string) *powerloss.Trace {
	t.Helper()
	tr, err := powerloss.Parse(strings.NewReader(strings.Join(lines, "\n")+"\n"), files)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// summary renders ops compactly: kind, and what matters of each.
func summary(tr *powerloss.Trace) []string {
	var out []string
	for _, op := range tr.Ops {
		switch op.Kind {
		case powerloss.OpWrite:
			out = append(out, fmt.Sprintf("write %d %q", op.Off, op.Data))
		case powerloss.OpTruncate, powerloss.OpExtend:
			out = append(out, fmt.Sprintf("%s %d", op.Kind, op.Size))
		case powerloss.OpMark:
			out = append(out, "mark "+op.Text)
		default:
			out = append(out, fmt.Sprintf("%s %s", op.Kind, op.Name))
		}
	}
	return out
}

func TestParse(t *testing.T) {
	tr := parse(t,
		`100 openat(-100, `+hexq("/etc/ld.so.cache")+`, 0x80000) = 3`,
		`100 close(3)                          = 0`,
		`100 openat(-100, `+hexq("/d/marks")+`, 0x80441, 0600) = 5`,
		`100 openat(-100, `+hexq("/d/cache.db")+`, 0x80042, 0600) = 3`,
		`100 pwrite64(3, `+hexq("meta")+`, 4, 0) = 4`,
		`101 fdatasync(3 <unfinished ...>`,
		`100 write(5, `+hexq("ack 1\nack")+`, 9 <unfinished ...>`,
		`101 <... fdatasync resumed>)          = 0`,
		`100 <... write resumed>)              = 9`,
		`100 write(5, `+hexq(" 2\n")+`, 3) = 3`,
		`100 pwrite64(3, `+hexq("abcdef")+`, 6, 8192) = 4`,
		`100 ftruncate(3, 16777216) = 0`,
		`100 fallocate(3, 0, 0, 33554432) = 0`,
		`100 fallocate(3, 0x1, 0, 67108864) = 0`,
		`100 fsync(3) = 0`,
		`100 pwrite64(3, "x", 1, 0) = -1 EIO (Input/output error)`,
		`100 openat(-100, `+hexq("/d")+`, 0x90000) = 7`,
		`100 fsync(7) = 0`,
		`100 mmap(NULL, 1073741824, 0x1, 0x1, 3, 0) = 0x7f0000000000`,
		`100 dup(3) = 9`,
		`100 close(3) = 0`,
		`100 pwrite64(9, "z", 1, 4096) = 1`,
		`100 close(9) = 0`,
		`100 pwrite64(9, "ignored: another file now", 25, 0) = 25`,
		`100 +++ exited with 0 +++`,
	)
	want := []string{
		"create openat",
		`write 0 "meta"`,
		"sync fdatasync",
		"mark ack 1",
		"mark ack 2",
		`write 8192 "abcd"`,
		"truncate 16777216",
		"extend 33554432",
		"sync fsync",
		"dirsync fsync",
		`write 4096 "z"`,
	}
	if got := summary(tr); !reflect.DeepEqual(got, want) {
		t.Fatalf("ops:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if tr.Ops[1].Line != 5 {
		t.Errorf("line of the first write: %d, want 5", tr.Ops[1].Line)
	}
	if n := tr.Epochs(); n != 3 {
		t.Errorf("%d epochs, want 3", n)
	}
}

// TestParseForms: symbolic constants (no -X raw), plain strings (no
// -xx), [pid N] prefixes, timestamps, no pid column, O_TRUNC, O_DSYNC,
// sync(2), creat(2), a relative path under a followed directory.
func TestParseForms(t *testing.T) {
	tr := parse(t,
		`[pid  7] 14:40:22.757657 openat(AT_FDCWD, "/d/cache.db", O_RDWR|O_CREAT|O_TRUNC|O_CLOEXEC, 0600) = 3`,
		`1700000000.123456 pwrite64(3, "a\n\t\\\"\0\177b", 8, 0) = 8`,
		`openat(AT_FDCWD, "/d/", O_RDONLY|O_DIRECTORY) = 4`,
		`openat(4, "cache.db", O_WRONLY|O_DSYNC) = 5`,
		`pwrite64(5, "s", 1, 10) = 1`,
		`sync() = 0`,
		`creat("/d/cache.db", 0600) = 6`,
		`truncate("/d/cache.db", 100) = 0`,
		`--- SIGURG {si_signo=SIGURG, si_code=SI_TKILL} ---`,
	)
	want := []string{
		"create openat",
		"truncate 0",
		`write 0 "a\n\t\\\"\x00\x7fb"`,
		`write 10 "s"`,
		"sync O_DSYNC",
		"sync sync",
		"dirsync sync",
		"create creat",
		"truncate 0",
		"truncate 100",
	}
	if got := summary(tr); !reflect.DeepEqual(got, want) {
		t.Fatalf("ops:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestParseRefuses(t *testing.T) {
	open := `1 openat(-100, "/d/cache.db", 0x2) = 3`
	for _, tc := range []struct {
		name  string
		lines []string
		want  error
	}{
		{"truncated string", []string{open, `1 pwrite64(3, "abc"..., 4096, 0) = 4096`}, powerloss.ErrMalformed},
		{"count differs from the data", []string{open, `1 pwrite64(3, "abc", 4, 0) = 4`}, powerloss.ErrMalformed},
		{"negative offset", []string{open, `1 pwrite64(3, "abc", 3, -5) = 3`}, powerloss.ErrMalformed},
		{"huge offset", []string{open, `1 pwrite64(3, "abc", 3, 0x7ffffffffffffff0) = 3`}, powerloss.ErrMalformed},
		{"no result", []string{open, `1 fsync(3)`}, powerloss.ErrMalformed},
		{"no parenthesis", []string{`1 garbage`}, powerloss.ErrMalformed},
		{"orphan resume", []string{`1 <... fsync resumed>) = 0`}, powerloss.ErrMalformed},
		{"two unfinished", []string{`1 fsync(3 <unfinished ...>`, `1 fsync(4 <unfinished ...>`}, powerloss.ErrMalformed},
		{"bad escape", []string{open, `1 pwrite64(3, "\q", 1, 0) = 1`}, powerloss.ErrMalformed},
		{"write(2) to the file", []string{open, `1 write(3, "abc", 3) = 3`}, powerloss.ErrUnsupported},
		{"writev to the file", []string{open, `1 writev(3, [{iov_base="abc", iov_len=3}], 1) = 3`}, powerloss.ErrUnsupported},
		{"shared writable map", []string{open, `1 mmap(NULL, 4096, PROT_READ|PROT_WRITE, MAP_SHARED, 3, 0) = 0x7f0000000000`}, powerloss.ErrUnsupported},
		{"rename", []string{`1 rename("/d/cache.db", "/d/x") = 0`}, powerloss.ErrUnsupported},
		{"renameat onto it", []string{`1 renameat(-100, "/d/tmp", -100, "/d/cache.db") = 0`}, powerloss.ErrUnsupported},
		{"unlink", []string{`1 unlinkat(-100, "/d/cache.db", 0) = 0`}, powerloss.ErrUnsupported},
		{"relative path", []string{`1 openat(-100, "cache.db", 0x2) = 3`}, powerloss.ErrUnsupported},
		{"punch hole", []string{open, `1 fallocate(3, 0x3, 0, 4096) = 0`}, powerloss.ErrUnsupported},
		{"died in a write", []string{open, `1 pwrite64(3, "abc", 3, 0) = ?`}, powerloss.ErrUnsupported},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := powerloss.Parse(strings.NewReader(strings.Join(tc.lines, "\n")), files)
			if !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := powerloss.Parse(strings.NewReader(""), powerloss.Files{Data: "relative"}); err == nil {
		t.Error("a relative data path was accepted")
	}
}

func TestCommand(t *testing.T) {
	cmd := powerloss.Command("/tmp/out", "/bin/prog", "-x")
	if cmd[0] != "strace" || cmd[len(cmd)-3] != "--" || cmd[len(cmd)-2] != "/bin/prog" {
		t.Fatalf("command %q", cmd)
	}
	joined := strings.Join(cmd, " ")
	for _, want := range []string{"-f", "-X raw", "-xx", "-o /tmp/out", "trace=?open,?openat", "?pwrite64", "?fdatasync", "?mmap"} {
		if !strings.Contains(joined, want) {
			t.Errorf("command %q lacks %q", joined, want)
		}
	}
}
