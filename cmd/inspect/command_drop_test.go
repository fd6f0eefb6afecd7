package main

import (
	"strings"
	"testing"
)

// TestDrop: drop removes the informers named (resolved as every command
// resolves them) from the file in place, and --dry-run only says what it
// would drop; the file checks after.
func TestDrop(t *testing.T) {
	pageSized(t)
	path := copyFixture(t)
	before := fileState(t, path)
	stdout, _ := mustRun(t, 0, "drop", path, "pods", "--dry-run")
	golden(t, "drop-dry-run", strings.ReplaceAll(stdout, path, "cache.db"))
	if fileState(t, path) != before {
		t.Fatal("--dry-run changed the file")
	}
	stdout, _ = mustRun(t, 0, "drop", path, "pods", "v1/pods", "widgets")
	golden(t, "drop", strings.ReplaceAll(stdout, path, "cache.db"))
	names, _ := mustRun(t, 0, "ls", path, "-o", "name")
	if strings.Contains(names, "pods") || strings.Contains(names, "widgets") || !strings.Contains(names, "v1/secrets") {
		t.Fatalf("after the drop, ls -o name:\n%s", names)
	}
	mustRun(t, 0, "check", path)
	_, stderr := mustRun(t, exitFailure, "drop", path, "pods")
	if !strings.Contains(stderr, `no informer "pods"`) {
		t.Fatalf("drop of a dropped informer: %s", stderr)
	}
}

// TestDropUnusedFor: --unused-for picks the informers whose last commit
// is older than it (the fixture's were written a day before the tests'
// clock).
func TestDropUnusedFor(t *testing.T) {
	path := copyFixture(t)
	all, _ := mustRun(t, 0, "ls", path, "-o", "name")
	stdout, _ := mustRun(t, 0, "drop", path, "--unused-for", "48h")
	if !strings.HasPrefix(stdout, "no informer of ") {
		t.Fatalf("nothing that old: %s", stdout)
	}
	stdout, _ = mustRun(t, 0, "drop", path, "--unused-for", "1h")
	if n := strings.Count(stdout, "dropped "); n != strings.Count(all, "\n") {
		t.Fatalf("dropped %d of\n%s:\n%s", n, all, stdout)
	}
	if names, _ := mustRun(t, 0, "ls", path, "-o", "name"); names != "" {
		t.Fatalf("left:\n%s", names)
	}
	mustRun(t, 0, "check", path)
}

// TestDropRefused: a running agent's lock (exit 3), a name the file does
// not hold, or arguments that do not say what to drop leave the file as
// it was.
func TestDropRefused(t *testing.T) {
	path := copyFixture(t)
	before := fileState(t, path)
	for _, tc := range []struct {
		name string
		code int
		args []string
		want string
	}{
		{"nothing named", exitFailure, []string{"drop", path}, "name the informers to drop, or give --unused-for"},
		{"both", exitFailure, []string{"drop", path, "pods", "--unused-for", "1h"}, "not both"},
		{"unknown", exitFailure, []string{"drop", path, "pods", "nope"}, `no informer "nope"`},
		{"no file", exitFailure, []string{"drop", path + ".missing", "pods"}, "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr := mustRun(t, tc.code, tc.args...)
			if !strings.Contains(stderr, tc.want) {
				t.Fatalf("stderr %q, want %q", stderr, tc.want)
			}
		})
	}
	release := lockFile(t, path)
	_, stderr := mustRun(t, exitLocked, "--timeout", "0", "drop", path, "pods")
	release()
	if !strings.Contains(stderr, "nothing was dropped") {
		t.Fatalf("locked: %s", stderr)
	}
	if fileState(t, path) != before {
		t.Fatal("a refused drop changed the file")
	}
}
