package main

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/boltinformer/boltinformer/store"
)

// holdLockEnv makes the test binary a lock holder (see holdLock).
const holdLockEnv = "INSPECT_TEST_HOLD_LOCK"

// mainArgsEnv makes the test binary run inspect's main with the
// newline-separated arguments it holds, pausing at the first point of a
// long command (app.pause) until a signal ends it.
const mainArgsEnv = "INSPECT_TEST_MAIN_ARGS"

func TestMain(m *testing.M) {
	if path := os.Getenv(holdLockEnv); path != "" {
		os.Exit(holdLock(path))
	}
	if args, ok := os.LookupEnv(mainArgsEnv); ok {
		a := &app{now: time.Now, pause: func(point string) {
			fmt.Fprintf(os.Stderr, "paused at %s\n", point)
			for {
				time.Sleep(time.Hour) // until the signal
			}
		}}
		os.Exit(a.mainWithSignals(strings.Split(args, "\n"), os.Stdout, os.Stderr))
	}
	dir, err := os.MkdirTemp("", "inspect-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fixtureDir = dir
	code := func() int {
		defer os.RemoveAll(dir)
		return m.Run()
	}()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// holdLock opens path for writing, as a running agent does, says
// "locked" on stdout and holds the file until stdin closes.
func holdLock(path string) int {
	db, err := store.Open(path, &store.Options{Timeout: 5 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("locked")
	_, _ = io.Copy(io.Discard, os.Stdin)
	if err := db.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// lockFile holds path's write lock in another process until the test
// ends, or until the returned release is called.
func lockFile(t *testing.T, path string) (release func()) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holdLockEnv+"="+path)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			_ = stdin.Close()
			if err := cmd.Wait(); err != nil {
				t.Errorf("lock holder: %v: %s", err, stderr.String())
			}
		})
	}
	t.Cleanup(release)
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "locked\n" {
		t.Fatalf("lock holder said %q (%v): %s", line, err, stderr.String())
	}
	return release
}

func TestLocked(t *testing.T) {
	path := copyFixture(t)
	lockFile(t, path)
	for _, args := range [][]string{
		{"ls", path},
		{"check", path},
		{"get", path, "v1/pods", "ns-0/pod-000000"},
		{"stats", path},
		{"list", path, "v1/pods"},
		{"index", path, "v1/pods", "node"},
		{"export", path, "v1/pods"},
		{"compact", path, filepath.Join(t.TempDir(), "out.db")},
	} {
		start := time.Now()
		stdout, stderr, code := run(t, append(args, "--timeout", "200ms")...)
		if took := time.Since(start); took > 3*time.Second {
			t.Errorf("%v: took %s with --timeout 200ms", args, took)
		}
		if code != exitLocked || stdout != "" {
			t.Errorf("%v: exit %d, stdout %q", args, code, stdout)
		}
		want := fmt.Sprintf("inspect: %s is locked by another process (a running agent?): no shared lock within 200ms; stop the agent or retry with a longer --timeout\n", path)
		if stderr != want {
			t.Errorf("%v: stderr\n%q\nwant\n%q", args, stderr, want)
		}
	}
	// --timeout 0 tries once.
	if _, _, code := run(t, "ls", path, "--timeout", "0"); code != exitLocked {
		t.Errorf("--timeout 0: exit %d", code)
	}
}

func TestReadOnly(t *testing.T) {
	path := fixture(t)
	before := fileState(t, path)
	out := filepath.Join(t.TempDir(), "compact.db")
	for _, args := range [][]string{
		{"ls", path, "-o", "wide"},
		{"get", path, "v1/pods", "ns-0/pod-000000", "-o", "yaml"},
		{"list", path, "v1/pods", "-l", "tier=web"},
		{"index", path, "v1/pods", "namespace"},
		{"check", path, "--key-file", keyFile(t, testKey)},
		{"export", path, "--key-file", keyFile(t, testKey)},
		{"stats", path},
		{"compact", path, out},
	} {
		if _, stderr, code := run(t, args...); code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
		if after := fileState(t, path); after != before {
			t.Fatalf("%v changed the file: %s -> %s", args, before, after)
		}
	}
}

func TestUsage(t *testing.T) {
	path := fixture(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"ls"}, "inspect: accepts 1 arg(s), received 0\n"},
		{[]string{"ls", path, "-o", "xml"}, "inspect: unknown output format \"xml\" (want one of wide, name, json, yaml)\n"},
		{[]string{"ls", filepath.Join(fixtureDir, "missing.db")}, "inspect: $DIR/missing.db: no such file\n"},
		{[]string{"nope"}, "inspect: unknown command \"nope\" for \"inspect\"\n"},
	} {
		stdout, stderr, code := run(t, tc.args...)
		if code != exitFailure || stdout != "" || normalize(stderr) != tc.want {
			t.Errorf("%v: exit %d stdout %q stderr %q, want %q", tc.args, code, stdout, stderr, tc.want)
		}
	}
	if stdout, _, code := run(t, "--help"); code != 0 || !strings.Contains(stdout, "compact") {
		t.Errorf("--help: exit %d: %s", code, stdout)
	}
}

// Damaged files never panic or hang a command: each exits with a status
// (2 for damage it sees), whatever bytes are flipped.
func TestDamagedFiles(t *testing.T) {
	data, err := os.ReadFile(fixture(t))
	if err != nil {
		t.Fatal(err)
	}
	keys := keyFile(t, testKey)
	rng := rand.New(rand.NewPCG(1, 2))
	codes := map[int]int{}
	defer func() { t.Logf("exit codes: %v", codes) }()
	dir := t.TempDir()
	for i := range 40 {
		bad := append([]byte(nil), data...)
		for range 1 + rng.IntN(8) {
			bad[rng.IntN(len(bad))] ^= byte(1 + rng.IntN(255))
		}
		path := filepath.Join(dir, fmt.Sprintf("bad-%d.db", i))
		if err := os.WriteFile(path, bad, 0o600); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{
			{"ls", path, "-o", "wide"},
			{"check", path, "--key-file", keys},
			{"list", path, "pods", "-o", "json"},
			{"get", path, "pods", "ns-1/pod-000004", "-o", "yaml"},
			{"index", path, "pods", "namespace"},
			{"export", path, "-o", "jsonl", "--key-file", keys},
			{"stats", path},
			{"compact", path, filepath.Join(dir, fmt.Sprintf("out-%d.db", i))},
		} {
			_, stderr, code := run(t, args...)
			codes[code]++
			if code != exitOK && code != exitFailure && code != exitCorrupt {
				t.Errorf("%v: exit %d: %s", args, code, stderr)
			}
			if code != exitOK && !strings.HasPrefix(stderr, "inspect: ") && !strings.Contains(stderr, "\ninspect: ") {
				t.Errorf("%v: exit %d without a message: %q", args, code, stderr)
			}
		}
	}
}

// The output flags work before the verb as after it (they are the root's
// persistent flags), with the same output; a command that prints no
// formats refuses -o rather than ignore it.
func TestRegressionOutputFlagsBeforeVerb(t *testing.T) {
	path := fixture(t)
	keys := keyFile(t, testKey)
	for _, tc := range []struct {
		verb  []string
		flags []string
	}{
		{[]string{"ls", path}, []string{"--no-headers"}},
		{[]string{"ls", path}, []string{"-o", "wide", "--no-headers"}},
		{[]string{"ls", path}, []string{"-o", "json"}},
		{[]string{"ls", path}, []string{"--output=name"}},
		{[]string{"get", path, "pods", "ns-1/pod-000004"}, []string{"--no-headers"}},
		{[]string{"get", path, "pods", "ns-1/pod-000004"}, []string{"-o", "yaml"}},
		{[]string{"list", path, "pods"}, []string{"--no-headers", "-o", "wide"}},
		{[]string{"list", path, "pods"}, []string{"-oname"}},
		{[]string{"index", path, "pods"}, []string{"--no-headers"}},
		{[]string{"index", path, "pods", "node"}, []string{"-o", "json"}},
		{[]string{"check", path}, []string{"--no-headers", "--key-file", keys}},
		{[]string{"check", path}, []string{"-o", "yaml"}},
		{[]string{"export", path, "widgets"}, []string{"-o", "jsonl"}},
		{[]string{"stats", path}, []string{"--no-headers", "-o", "wide"}},
	} {
		after, _ := mustRun(t, 0, append(append([]string{}, tc.verb...), tc.flags...)...)
		before, _ := mustRun(t, 0, append(append([]string{}, tc.flags...), tc.verb...)...)
		if before != after {
			t.Errorf("%v %v: output differs with the flags before the verb:\n%s\nafter:\n%s", tc.flags, tc.verb, before, after)
		}
		if len(tc.flags) > 0 && tc.flags[0] == "--no-headers" && strings.Contains(after, "NAME ") {
			t.Errorf("%v %v: a header with --no-headers:\n%s", tc.flags, tc.verb, after)
		}
	}
	for _, args := range [][]string{
		{"-o", "jsonl", "ls", path},
		{"ls", path, "-o", "jsonl"},
	} {
		_, stderr := mustRun(t, exitFailure, args...)
		if stderr != "inspect: unknown output format \"jsonl\" (want one of wide, name, json, yaml)\n" {
			t.Errorf("%v: stderr %q", args, stderr)
		}
	}
	out := filepath.Join(t.TempDir(), "out.db")
	if _, stderr := mustRun(t, exitFailure, "-o", "json", "compact", path, out); stderr != "inspect: compact prints no -o formats (got -o json)\n" {
		t.Errorf("compact -o json: stderr %q", stderr)
	}
}
