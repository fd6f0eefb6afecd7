package main

import (
	"strings"
	"testing"
)

// Shell completion of informers, object names, namespaces, indexes and
// -o, through cobra's __complete command (what the shell scripts call).
func TestCompletion(t *testing.T) {
	path := fixture(t)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"complete-informers", []string{"get", path, ""}},
		{"complete-informers-prefix", []string{"list", path, "wi"}},
		{"complete-names", []string{"get", path, "pods", ""}},
		{"complete-names-namespace", []string{"get", path, "po", "-n", "ns-1", ""}},
		{"complete-names-prefix", []string{"get", path, "pods", "ns-2/"}},
		{"complete-namespace-flag", []string{"get", path, "pods", "-n", ""}},
		{"complete-index-flag", []string{"get", path, "pods", "--index", ""}},
		{"complete-index-names", []string{"index", path, "pods", ""}},
		{"complete-export-informers", []string{"export", path, "s"}},
		{"complete-output", []string{"get", path, "pods", "-o", "j"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, _ := mustRun(t, 0, append([]string{"__complete"}, tc.args...)...)
			golden(t, tc.name, stdout)
		})
	}
	// FILE completes as a file name; a file that does not open gives no
	// candidates (and no error).
	stdout, _ := mustRun(t, 0, "__complete", "get", "")
	if !strings.HasSuffix(stdout, ":0\n") {
		t.Errorf("FILE: %q, want file completion (directive 0)", stdout)
	}
	stdout, _ = mustRun(t, 0, "__complete", "get", path+".missing", "")
	if stdout != ":4\n" {
		t.Errorf("missing file: %q", stdout)
	}
	// The completion script.
	stdout, _ = mustRun(t, 0, "completion", "bash")
	if !strings.Contains(stdout, "__start_inspect") {
		t.Errorf("completion bash: %.200s", stdout)
	}
}

// diff's --informer and -n completed nothing (the shell offered file
// names): they complete from FILE as get's INFORMER and -n do.
func TestRegressionDiffCompletion(t *testing.T) {
	path := fixture(t)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"complete-diff-informer-flag", []string{"diff", path, path, "--informer", "pods", "--informer", ""}},
		{"complete-diff-namespace-flag", []string{"diff", path, "--socket", "api.sock", "--informer", "po", "-n", ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, _ := mustRun(t, 0, append([]string{"__complete"}, tc.args...)...)
			golden(t, tc.name, stdout)
		})
	}
	// Every namespace of the file without --informer.
	if stdout, _ := mustRun(t, 0, "__complete", "diff", path, "-n", "p"); stdout != "prod\n:4\n" {
		t.Errorf("diff -n p: %q", stdout)
	}
}
