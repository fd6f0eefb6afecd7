package powerloss

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
)

// OpKind is what an Op did.
type OpKind int

// The kinds of Op.
const (
	// OpWrite wrote Data at Off (pwrite64; a short write keeps what the
	// kernel reported written).
	OpWrite OpKind = iota + 1
	// OpTruncate set the file's size to Size (ftruncate, truncate, or an
	// open with O_TRUNC).
	OpTruncate
	// OpExtend raised the file's size to at least Size (fallocate).
	OpExtend
	// OpSync is a completed fsync or fdatasync of the file (Name says
	// which), or a write through a descriptor opened with O_SYNC or
	// O_DSYNC: a barrier.
	OpSync
	// OpCreate is an open of the file with O_CREAT.
	OpCreate
	// OpDirSync is a completed fsync of the file's directory.
	OpDirSync
	// OpMark is a line (Text, without its newline) written to the marks
	// file.
	OpMark
)

var opNames = map[OpKind]string{
	OpWrite: "write", OpTruncate: "truncate", OpExtend: "extend", OpSync: "sync",
	OpCreate: "create", OpDirSync: "dirsync", OpMark: "mark",
}

// String names the kind.
func (k OpKind) String() string {
	if s, ok := opNames[k]; ok {
		return s
	}
	return "OpKind(" + strconv.Itoa(int(k)) + ")"
}

// Op is one thing the traced program did to the data file (or a marker it
// wrote), in the order the trace shows them completing.
type Op struct {
	Kind OpKind
	// Off and Data: OpWrite.
	Off  int64
	Data []byte
	// Size: OpTruncate, OpExtend.
	Size int64
	// Name is the system call.
	Name string
	// Text: OpMark.
	Text string
	// Line is the line of the trace where the call completed (from 1).
	Line int
}

// String describes the op and its trace line, for reports.
func (o Op) String() string {
	switch o.Kind {
	case OpWrite:
		return fmt.Sprintf("%s(off=%d len=%d)@%d", o.Name, o.Off, len(o.Data), o.Line)
	case OpTruncate, OpExtend:
		return fmt.Sprintf("%s(%d)@%d", o.Name, o.Size, o.Line)
	case OpMark:
		return fmt.Sprintf("mark(%q)@%d", o.Text, o.Line)
	}
	return fmt.Sprintf("%s@%d", o.Name, o.Line)
}

// Files names the files Parse follows, by the absolute paths the traced
// program opens them with.
type Files struct {
	// Data is the file whose crash states are built. Its directory is
	// followed too (for OpDirSync).
	Data string
	// Marks is where the program writes marker lines, one write(2) each
	// ("" for none).
	Marks string
}

// Trace is what the program did to the data file, in order.
type Trace struct {
	// Files are the files Parse followed.
	Files Files
	// Ops are the program's ops, in the order they completed.
	Ops []Op
}

// MaxString is the -s that Command gives strace: the longest write it
// records in full. Parse refuses a longer (truncated) one.
const MaxString = 64 << 20

// maxOffset bounds the offsets and sizes Parse accepts (a larger file is
// not a test's).
const maxOffset = 1 << 40

// TracedCalls are the system calls Command traces: everything that can
// change the data file, its name or its durability, and what Parse needs
// to follow descriptors.
var TracedCalls = []string{
	"open", "openat", "creat", "close", "dup", "dup2", "dup3",
	"write", "pwrite64", "writev", "pwritev", "pwritev2",
	"ftruncate", "truncate", "fallocate",
	"fsync", "fdatasync", "sync", "syncfs",
	"mmap", "rename", "renameat", "renameat2", "unlink", "unlinkat",
}

// Command returns the command line that runs argv under strace, writing
// the trace Parse reads to out: every thread followed (-f), raw numeric
// constants (-X raw), every string byte hex-escaped (-xx) and recorded in
// full up to MaxString bytes, only TracedCalls stopped (--seccomp-bpf;
// those an architecture lacks, such as open on arm64, are skipped).
func Command(out string, argv ...string) []string {
	calls := make([]string, len(TracedCalls))
	for i, c := range TracedCalls {
		calls[i] = "?" + c
	}
	cmd := []string{
		"strace", "-f", "-qq", "-X", "raw", "-xx", "-s", strconv.Itoa(MaxString),
		"--seccomp-bpf", "-e", "signal=none", "-e", "trace=" + strings.Join(calls, ","),
		"-o", out, "--",
	}
	return append(cmd, argv...)
}

// Linux constants (strace -X raw prints them as numbers; without it, by
// name). Those Parse acts on are the same on x86-64 and arm64.
const (
	atFDCWD    = -100
	oCreat     = 0o100
	oTrunc     = 0o1000
	oDsync     = 0o10000
	protWrite  = 0x2
	mapShared  = 0x1
	fallocKeep = 0x1
)

var symbols = map[string]int64{
	"AT_FDCWD": atFDCWD,
	"O_RDONLY": 0, "O_WRONLY": 1, "O_RDWR": 2, "O_CREAT": oCreat, "O_EXCL": 0o200,
	"O_NOCTTY": 0o400, "O_TRUNC": oTrunc, "O_APPEND": 0o2000, "O_NONBLOCK": 0o4000,
	"O_DSYNC": oDsync, "O_DIRECT": 0o40000, "O_LARGEFILE": 0o100000, "O_DIRECTORY": 0o200000,
	"O_NOFOLLOW": 0o400000, "O_NOATIME": 0o1000000, "O_CLOEXEC": 0o2000000,
	"O_SYNC": 0o4010000, "O_PATH": 0o10000000, "O_TMPFILE": 0o20200000,
	"PROT_NONE": 0, "PROT_READ": 0x1, "PROT_WRITE": protWrite, "PROT_EXEC": 0x4,
	"MAP_SHARED": mapShared, "MAP_PRIVATE": 0x2, "MAP_SHARED_VALIDATE": 0x3,
	"MAP_FIXED": 0x10, "MAP_ANONYMOUS": 0x20, "MAP_DENYWRITE": 0x800, "MAP_NORESERVE": 0x4000,
	"MAP_POPULATE": 0x8000, "MAP_FIXED_NOREPLACE": 0x100000,
	"FALLOC_FL_KEEP_SIZE": fallocKeep, "FALLOC_FL_PUNCH_HOLE": 0x2,
	"NULL": 0,
}

// fdKind is what a descriptor refers to.
type fdKind struct {
	data, dir, marks bool
	sync             bool // opened with O_SYNC or O_DSYNC
}

// parser is Parse's state.
type parser struct {
	files   Files
	dir     string
	fds     map[int64]fdKind
	pending map[string]string // per pid: an unfinished call's text
	marks   strings.Builder   // an unterminated marker line
	ops     []Op
	line    int
}

// Parse reads strace output (see Command; timestamps and the pid column
// are optional) and returns what the program did to files.Data. A line it
// cannot read is an error wrapping ErrMalformed; something it cannot model
// is an error wrapping ErrUnsupported. Calls that failed are ignored, and
// so is everything about other files.
func Parse(r io.Reader, files Files) (*Trace, error) {
	if !filepath.IsAbs(files.Data) || (files.Marks != "" && !filepath.IsAbs(files.Marks)) {
		return nil, fmt.Errorf("powerloss: paths must be absolute: %q, %q", files.Data, files.Marks)
	}
	files.Data = filepath.Clean(files.Data)
	if files.Marks != "" {
		files.Marks = filepath.Clean(files.Marks)
	}
	p := &parser{files: files, dir: filepath.Dir(files.Data), fds: map[int64]fdKind{}, pending: map[string]string{}}
	br := bufio.NewReader(r)
	for {
		s, err := br.ReadString('\n')
		if s != "" {
			p.line++
			if perr := p.parseLine(strings.TrimRight(s, "\r\n")); perr != nil {
				return nil, fmt.Errorf("powerloss: trace line %d: %w", p.line, perr)
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("powerloss: read trace: %w", err)
		}
	}
	if p.marks.Len() > 0 {
		p.add(Op{Kind: OpMark, Name: "write", Text: p.marks.String()})
	}
	return &Trace{Files: files, Ops: p.ops}, nil
}

func (p *parser) add(op Op) {
	op.Line = p.line
	p.ops = append(p.ops, op)
}

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

func unsupported(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUnsupported, fmt.Sprintf(format, args...))
}

// parseLine handles one line: "[pid] [timestamp] call(args) = ret", or the
// two halves of a call other threads interrupted ("call(args <unfinished
// ...>" and "<... call resumed>args) = ret"), or a signal or exit notice.
func (p *parser) parseLine(s string) error {
	pid := ""
	rest := strings.TrimLeft(s, " ")
	if strings.HasPrefix(rest, "[pid ") {
		end := strings.IndexByte(rest, ']')
		if end < 0 {
			return malformed("unterminated [pid")
		}
		pid = strings.TrimSpace(rest[len("[pid "):end])
		rest = rest[end+1:]
	} else if tok, after, ok := nextToken(rest); ok && isDigits(tok) {
		pid, rest = tok, after
	}
	// Timestamps (-t, -tt, -ttt) and relative times (-r).
	for {
		tok, after, ok := nextToken(rest)
		if !ok || !isTimestamp(tok) {
			break
		}
		rest = after
	}
	rest = strings.TrimLeft(rest, " ")
	switch {
	case rest == "", strings.HasPrefix(rest, "+++"), strings.HasPrefix(rest, "---"):
		return nil
	case strings.HasPrefix(rest, "<... "):
		name, after, ok := strings.Cut(rest[len("<... "):], " resumed>")
		if !ok {
			return malformed("resumed call without 'resumed>'")
		}
		start, ok := p.pending[pid]
		if !ok {
			return malformed("%s resumed in pid %q, which has no unfinished call", name, pid)
		}
		delete(p.pending, pid)
		if !strings.HasPrefix(start, name+"(") {
			return malformed("%s resumed in pid %q, whose unfinished call is %.40q", name, pid, start)
		}
		return p.parseCall(start + after)
	case strings.HasSuffix(rest, "<unfinished ...>"):
		if _, ok := p.pending[pid]; ok {
			return malformed("pid %q has two unfinished calls", pid)
		}
		p.pending[pid] = strings.TrimRight(strings.TrimSuffix(rest, "<unfinished ...>"), " ")
		return nil
	}
	return p.parseCall(rest)
}

// parseCall handles a complete "call(args) = ret".
func (p *parser) parseCall(s string) error {
	open := strings.IndexByte(s, '(')
	if open <= 0 {
		return malformed("no system call in %.60q", s)
	}
	name := s[:open]
	for _, c := range name {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			return malformed("bad system call name %.40q", name)
		}
	}
	args, after, err := splitArgs(s[open+1:])
	if err != nil {
		return err
	}
	after = strings.TrimLeft(after, " ")
	if !strings.HasPrefix(after, "=") {
		return malformed("%s: no result", name)
	}
	retTok, _, _ := nextToken(after[1:])
	if retTok == "?" {
		// The call never returned (the process died in it): whether it
		// took effect is unknown.
		if p.touchesData(name, args) {
			return unsupported("%s did not return", name)
		}
		return nil
	}
	ret, err := parseInt(retTok)
	if err != nil {
		return malformed("%s: result %q", name, retTok)
	}
	if ret < 0 {
		return nil // failed: no effect
	}
	return p.apply(name, args, ret)
}

// touchesData says whether a call's descriptor argument is a followed one.
func (p *parser) touchesData(name string, args []string) bool {
	if len(args) == 0 {
		return false
	}
	switch name {
	case "write", "pwrite64", "writev", "pwritev", "pwritev2", "ftruncate", "fallocate", "fsync", "fdatasync":
		fd, err := parseInt(args[0])
		return err == nil && p.fds[fd] != (fdKind{})
	case "mmap":
		if len(args) == 6 {
			fd, err := parseInt(args[4])
			return err == nil && p.fds[fd].data
		}
	}
	return false
}

func (p *parser) arg(name string, args []string, i int) (int64, error) {
	if i >= len(args) {
		return 0, malformed("%s: %d arguments, want more than %d", name, len(args), i)
	}
	v, err := parseFlags(args[i])
	if err != nil {
		return 0, fmt.Errorf("%s argument %d: %w", name, i+1, err)
	}
	return v, nil
}

func (p *parser) strArg(name string, args []string, i int) ([]byte, error) {
	if i >= len(args) {
		return nil, malformed("%s: %d arguments, want more than %d", name, len(args), i)
	}
	b, err := parseString(args[i])
	if err != nil {
		return nil, fmt.Errorf("%s argument %d: %w", name, i+1, err)
	}
	return b, nil
}

// resolve turns a path argument (relative to dirfd) into a clean absolute
// path, or "" when it cannot be one of ours.
func (p *parser) resolve(dirfd int64, path string) (string, error) {
	if filepath.IsAbs(path) {
		return filepath.Clean(path), nil
	}
	if k := p.fds[dirfd]; k.dir && dirfd != atFDCWD {
		return filepath.Join(p.dir, path), nil
	}
	base := filepath.Base(path)
	if base == filepath.Base(p.files.Data) || (p.files.Marks != "" && base == filepath.Base(p.files.Marks)) || base == filepath.Base(p.dir) {
		return "", unsupported("relative path %q: the traced program must use absolute paths", path)
	}
	return "", nil
}

func (p *parser) pathArgs(name string, args []string, pairs ...[2]int) ([]string, error) {
	var out []string
	for _, pr := range pairs {
		dirfd := int64(atFDCWD)
		if pr[0] >= 0 {
			v, err := p.arg(name, args, pr[0])
			if err != nil {
				return nil, err
			}
			dirfd = v
		}
		b, err := p.strArg(name, args, pr[1])
		if err != nil {
			return nil, err
		}
		path, err := p.resolve(dirfd, string(b))
		if err != nil {
			return nil, err
		}
		out = append(out, path)
	}
	return out, nil
}

// apply records the effect of a call that succeeded with result ret.
func (p *parser) apply(name string, args []string, ret int64) error {
	switch name {
	case "open", "openat", "creat":
		var pathIdx, flagIdx [2]int
		switch name {
		case "open":
			pathIdx, flagIdx = [2]int{-1, 0}, [2]int{1}
		case "openat":
			pathIdx, flagIdx = [2]int{0, 1}, [2]int{2}
		case "creat":
			pathIdx = [2]int{-1, 0}
		}
		paths, err := p.pathArgs(name, args, pathIdx)
		if err != nil {
			return err
		}
		flags := int64(oCreat | oTrunc | 1)
		if name != "creat" {
			if flags, err = p.arg(name, args, flagIdx[0]); err != nil {
				return err
			}
		}
		var k fdKind
		switch paths[0] {
		case p.files.Data:
			k.data, k.sync = true, flags&oDsync != 0
			if flags&oCreat != 0 {
				p.add(Op{Kind: OpCreate, Name: name})
			}
			if flags&oTrunc != 0 {
				p.add(Op{Kind: OpTruncate, Name: name, Size: 0})
			}
		case p.files.Marks:
			k.marks = p.files.Marks != ""
		case p.dir:
			k.dir = true
		}
		p.setFD(ret, k)
	case "close":
		fd, err := p.arg(name, args, 0)
		if err != nil {
			return err
		}
		delete(p.fds, fd)
	case "dup", "dup2", "dup3":
		fd, err := p.arg(name, args, 0)
		if err != nil {
			return err
		}
		p.setFD(ret, p.fds[fd])
	case "pwrite64":
		fd, err := p.arg(name, args, 0)
		if err != nil || !p.fds[fd].data {
			return err
		}
		data, err := p.strArg(name, args, 1)
		if err != nil {
			return err
		}
		n, err := p.arg(name, args, 2)
		if err != nil {
			return err
		}
		off, err := p.arg(name, args, 3)
		if err != nil {
			return err
		}
		if int64(len(data)) != n || ret > n {
			return malformed("%s: %d bytes shown, count %d, result %d", name, len(data), n, ret)
		}
		if off < 0 || off+n > maxOffset {
			return malformed("%s: offset %d", name, off)
		}
		p.add(Op{Kind: OpWrite, Name: name, Off: off, Data: data[:ret]})
		if p.fds[fd].sync {
			p.add(Op{Kind: OpSync, Name: "O_DSYNC"})
		}
	case "write":
		fd, err := p.arg(name, args, 0)
		if err != nil {
			return err
		}
		switch k := p.fds[fd]; {
		case k.data:
			return unsupported("write(2) to the data file: its offset is not tracked (only pwrite64 is)")
		case k.marks:
			data, err := p.strArg(name, args, 1)
			if err != nil {
				return err
			}
			if ret > int64(len(data)) {
				return malformed("write: %d bytes shown, result %d", len(data), ret)
			}
			p.mark(string(data[:ret]))
		}
	case "writev", "pwritev", "pwritev2":
		fd, err := p.arg(name, args, 0)
		if err != nil {
			return err
		}
		if k := p.fds[fd]; k.data || k.marks {
			return unsupported("%s to a followed file", name)
		}
	case "ftruncate", "fallocate":
		fd, err := p.arg(name, args, 0)
		if err != nil || !p.fds[fd].data {
			return err
		}
		if name == "ftruncate" {
			size, err := p.arg(name, args, 1)
			if err != nil {
				return err
			}
			if size < 0 || size > maxOffset {
				return malformed("%s: size %d", name, size)
			}
			p.add(Op{Kind: OpTruncate, Name: name, Size: size})
			return nil
		}
		mode, err := p.arg(name, args, 1)
		if err != nil {
			return err
		}
		off, err := p.arg(name, args, 2)
		if err != nil {
			return err
		}
		n, err := p.arg(name, args, 3)
		if err != nil {
			return err
		}
		if off < 0 || n < 0 || off+n > maxOffset {
			return malformed("%s: offset %d length %d", name, off, n)
		}
		switch mode {
		case 0:
			p.add(Op{Kind: OpExtend, Name: name, Size: off + n})
		case fallocKeep:
		default:
			return unsupported("fallocate mode %#x", mode)
		}
	case "truncate":
		paths, err := p.pathArgs(name, args, [2]int{-1, 0})
		if err != nil || paths[0] != p.files.Data {
			return err
		}
		size, err := p.arg(name, args, 1)
		if err != nil {
			return err
		}
		if size < 0 || size > maxOffset {
			return malformed("%s: size %d", name, size)
		}
		p.add(Op{Kind: OpTruncate, Name: name, Size: size})
	case "fsync", "fdatasync":
		fd, err := p.arg(name, args, 0)
		if err != nil {
			return err
		}
		switch k := p.fds[fd]; {
		case k.data:
			p.add(Op{Kind: OpSync, Name: name})
		case k.dir && name == "fsync":
			p.add(Op{Kind: OpDirSync, Name: name})
		}
	case "sync", "syncfs":
		if name == "syncfs" {
			fd, err := p.arg(name, args, 0)
			if err != nil || p.fds[fd] == (fdKind{}) {
				return err
			}
		}
		p.add(Op{Kind: OpSync, Name: name})
		p.add(Op{Kind: OpDirSync, Name: name})
	case "mmap":
		if len(args) != 6 {
			return malformed("mmap: %d arguments", len(args))
		}
		fd, err := p.arg(name, args, 4)
		if err != nil || !p.fds[fd].data {
			return err
		}
		prot, err := p.arg(name, args, 2)
		if err != nil {
			return err
		}
		flags, err := p.arg(name, args, 3)
		if err != nil {
			return err
		}
		if prot&protWrite != 0 && flags&mapShared != 0 {
			return unsupported("a shared writable mapping of the data file: its writes are not in the trace")
		}
	case "rename", "renameat", "renameat2", "unlink", "unlinkat":
		var pairs [][2]int
		switch name {
		case "rename":
			pairs = [][2]int{{-1, 0}, {-1, 1}}
		case "renameat", "renameat2":
			pairs = [][2]int{{0, 1}, {2, 3}}
		case "unlink":
			pairs = [][2]int{{-1, 0}}
		case "unlinkat":
			pairs = [][2]int{{0, 1}}
		}
		paths, err := p.pathArgs(name, args, pairs...)
		if err != nil {
			return err
		}
		for _, path := range paths {
			if path == p.files.Data || path == p.dir {
				return unsupported("%s of %s: the model follows one file under one name", name, path)
			}
		}
	}
	return nil
}

func (p *parser) setFD(fd int64, k fdKind) {
	if k == (fdKind{}) {
		delete(p.fds, fd)
		return
	}
	p.fds[fd] = k
}

// mark adds a marker for each complete line written.
func (p *parser) mark(s string) {
	for {
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			p.marks.WriteString(s)
			return
		}
		p.marks.WriteString(s[:i])
		p.add(Op{Kind: OpMark, Name: "write", Text: p.marks.String()})
		p.marks.Reset()
		s = s[i+1:]
	}
}

// nextToken returns the next space-separated token of s and what follows.
func nextToken(s string) (tok, rest string, ok bool) {
	s = strings.TrimLeft(s, " ")
	if s == "" {
		return "", "", false
	}
	i := strings.IndexByte(s, ' ')
	if i < 0 {
		return s, "", true
	}
	return s[:i], s[i:], true
}

func isDigits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}

// isTimestamp matches 1700000000.123456, 14:40:22(.757657) and (-r)
// 0.000123.
func isTimestamp(s string) bool {
	if s == "" || s[0] < '0' || s[0] > '9' {
		return false
	}
	dots := 0
	for _, c := range s {
		switch {
		case c == '.':
			dots++
		case c == ':':
		case c < '0' || c > '9':
			return false
		}
	}
	return dots == 1 || strings.Count(s, ":") == 2
}

// splitArgs splits the arguments after a call's opening parenthesis at
// top-level commas, up to the matching closing parenthesis, and returns
// what follows it.
func splitArgs(s string) (args []string, rest string, err error) {
	depth := 0
	start := 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"':
			j, err := skipString(s, i)
			if err != nil {
				return nil, "", err
			}
			i = j - 1
		case '(', '[', '{':
			depth++
		case ']', '}':
			depth--
			if depth < 0 {
				return nil, "", malformed("unbalanced %q", c)
			}
		case ')':
			if depth == 0 {
				if a := strings.TrimSpace(s[start:i]); a != "" || len(args) > 0 {
					args = append(args, a)
				}
				return args, s[i+1:], nil
			}
			depth--
		case ',':
			if depth == 0 {
				args = append(args, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	return nil, "", malformed("no closing parenthesis")
}

// skipString returns the index just past the string literal starting at
// s[i] (and past a "..." that marks it truncated).
func skipString(s string, i int) (int, error) {
	for j := i + 1; j < len(s); j++ {
		switch s[j] {
		case '\\':
			j++
		case '"':
			j++
			if strings.HasPrefix(s[j:], "...") {
				j += 3
			}
			return j, nil
		}
	}
	return 0, malformed("unterminated string")
}

// parseString decodes a string argument as strace prints it.
func parseString(tok string) ([]byte, error) {
	if len(tok) < 2 || tok[0] != '"' {
		return nil, malformed("not a string: %.40q", tok)
	}
	out := make([]byte, 0, len(tok)/4)
	for i := 1; i < len(tok); i++ {
		c := tok[i]
		switch c {
		case '"':
			switch tail := tok[i+1:]; tail {
			case "":
				return out, nil
			case "...":
				return nil, malformed("a string truncated after %d bytes (strace -s)", len(out))
			default:
				return nil, malformed("text after a string: %.20q", tail)
			}
		case '\\':
			i++
			if i >= len(tok) {
				return nil, malformed("a string ends in a backslash")
			}
			switch e := tok[i]; e {
			case 'x':
				if i+2 >= len(tok) {
					return nil, malformed("short \\x escape")
				}
				v, err := strconv.ParseUint(tok[i+1:i+3], 16, 8)
				if err != nil {
					return nil, malformed("bad \\x escape %q", tok[i+1:i+3])
				}
				out = append(out, byte(v))
				i += 2
			case 'n':
				out = append(out, '\n')
			case 't':
				out = append(out, '\t')
			case 'r':
				out = append(out, '\r')
			case 'v':
				out = append(out, '\v')
			case 'f':
				out = append(out, '\f')
			case '\\', '"':
				out = append(out, e)
			default:
				if e < '0' || e > '7' {
					return nil, malformed("bad escape \\%c", e)
				}
				j := i
				for j < len(tok) && j < i+3 && tok[j] >= '0' && tok[j] <= '7' {
					j++
				}
				v, err := strconv.ParseUint(tok[i:j], 8, 16)
				if err != nil || v > 0xff {
					return nil, malformed("bad octal escape %q", tok[i:j])
				}
				out = append(out, byte(v))
				i = j - 1
			}
		default:
			out = append(out, c)
		}
	}
	return nil, malformed("unterminated string")
}

func parseInt(tok string) (int64, error) {
	v, err := strconv.ParseInt(tok, 0, 64)
	if err != nil {
		// strace prints some unsigned values (flags) that overflow int64.
		u, uerr := strconv.ParseUint(tok, 0, 64)
		if uerr != nil {
			return 0, malformed("not a number: %.30q", tok)
		}
		v = int64(u)
	}
	return v, nil
}

// parseFlags reads a number, a symbolic constant or an OR of them.
func parseFlags(tok string) (int64, error) {
	if v, err := parseInt(tok); err == nil {
		return v, nil
	}
	var v int64
	for _, part := range strings.Split(tok, "|") {
		if n, err := parseInt(part); err == nil {
			v |= n
			continue
		}
		n, ok := symbols[part]
		if !ok {
			if part == "" || strings.IndexFunc(part, func(r rune) bool {
				return (r < 'A' || r > 'Z') && (r < '0' || r > '9') && r != '_'
			}) >= 0 {
				return 0, malformed("not a number or constant: %.30q", tok)
			}
			// An unknown constant: none of the flags this model reads.
			continue
		}
		v |= n
	}
	return v, nil
}
