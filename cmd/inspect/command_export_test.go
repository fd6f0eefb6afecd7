package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

func TestExport(t *testing.T) {
	path := fixture(t)
	keys := keyFile(t, testKey)
	for _, tc := range []struct {
		name   string
		args   []string
		stderr string
	}{
		{"export-pods-json", []string{"v1/pods"}, ""},
		{"export-widgets-yaml", []string{"widgets", "-o", "yaml"}, ""},
		{"export-secrets-jsonl", []string{"secrets", "-o", "jsonl", "--key-file", keys}, ""},
		{"export-all-yaml", []string{"-o", "yaml", "--key-file", keys}, exportWarning},
		{"export-all-jsonl", []string{"-o", "jsonl", "--key-file", keys}, exportWarning},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr := mustRun(t, 0, append([]string{"export", path}, tc.args...)...)
			if stderr != tc.stderr {
				t.Errorf("stderr %q, want %q", stderr, tc.stderr)
			}
			golden(t, tc.name, stdout)
		})
	}
}

const exportWarning = "warning: 2 object(s) exported as envelopes (kind Record): their type is not one this inspect knows\n"

// Every format holds every object, with its kind, and they agree.
func TestExportFormats(t *testing.T) {
	path := fixture(t)
	keys := keyFile(t, testKey)
	var lists []*unstructured.UnstructuredList
	for _, format := range []string{"json", "yaml"} {
		stdout, _ := mustRun(t, 0, "export", path, "-o", format, "--key-file", keys)
		js, err := yaml.YAMLToJSON([]byte(stdout))
		if err != nil {
			t.Fatal(err)
		}
		list := &unstructured.UnstructuredList{}
		if err := list.UnmarshalJSON(js); err != nil {
			t.Fatal(err)
		}
		if list.GetKind() != "List" || list.GetAPIVersion() != "v1" || len(list.Items) != 13 || list.GetResourceVersion() != "" {
			t.Fatalf("%s: %s %s rv %q, %d items", format, list.GetAPIVersion(), list.GetKind(), list.GetResourceVersion(), len(list.Items))
		}
		lists = append(lists, list)
	}
	stdout, _ := mustRun(t, 0, "export", path, "-o", "jsonl", "--key-file", keys)
	sc := bufio.NewScanner(strings.NewReader(stdout))
	sc.Buffer(nil, 1<<20)
	kinds := map[string]int{}
	for i := 0; sc.Scan(); i++ {
		var u unstructured.Unstructured
		if err := u.UnmarshalJSON(sc.Bytes()); err != nil {
			t.Fatal(err)
		}
		kinds[u.GetKind()]++
		for _, l := range lists {
			if i >= len(l.Items) || l.Items[i].GetName() != u.GetName() || l.Items[i].GetKind() != u.GetKind() {
				t.Fatalf("line %d: %s/%s differs from the List", i, u.GetKind(), u.GetName())
			}
		}
	}
	if kinds["Pod"] != 6 || kinds["Widget"] != 3 || kinds["Secret"] != 2 || kinds[envelopeKind] != 2 {
		t.Fatalf("kinds %v", kinds)
	}
}

func TestExportOutputFile(t *testing.T) {
	path := fixture(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "pods.yaml")
	stdout, stderr := mustRun(t, 0, "export", path, "pods", "-o", "yaml", "--output-file", out)
	if stdout != "" || stderr != "" {
		t.Fatalf("stdout %q stderr %q", stdout, stderr)
	}
	want, _ := mustRun(t, 0, "export", path, "pods", "-o", "yaml")
	got, err := os.ReadFile(out)
	if err != nil || string(got) != want {
		t.Fatalf("%v: output file differs from stdout", err)
	}
	// A failed export leaves the old file and no temporary one.
	if _, stderr := mustRun(t, exitFailure, "export", path, "-o", "yaml", "--output-file", out); !strings.Contains(stderr, "pass --key-file") {
		t.Fatalf("stderr %q", stderr)
	}
	if got2, err := os.ReadFile(out); err != nil || string(got2) != want {
		t.Fatalf("%v: a failed export changed the output file", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("left behind: %v", ents)
	}
	// Never the cache file itself.
	for _, bad := range []string{path, filepath.Join(filepath.Dir(path), ".", filepath.Base(path))} {
		if _, stderr := mustRun(t, exitFailure, "export", path, "-o", "yaml", "--output-file", bad); !strings.HasSuffix(stderr, ": it is the cache file\n") {
			t.Fatalf("stderr %q", stderr)
		}
	}
}

// A progress bar (github.com/schollz/progressbar) on the long commands:
// drawn when stderr is a terminal, or always; what a terminal shows of it
// at the end is the golden.
func TestProgress(t *testing.T) {
	path := fixture(t)
	keys := keyFile(t, testKey)
	// A buffer is not a terminal: auto draws nothing.
	for _, args := range [][]string{
		{"export", path, "pods", "--output-file", filepath.Join(t.TempDir(), "x")},
		{"check", path},
		{"compact", path, filepath.Join(t.TempDir(), "c.db")},
	} {
		if _, stderr := mustRun(t, 0, args...); stderr != "" {
			t.Fatalf("%s: auto progress on a buffer: %q", args[0], stderr)
		}
	}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"export-progress", []string{"export", path, "--progress", "always", "-o", "jsonl", "--key-file", keys}},
		{"check-progress", []string{"check", path, "--progress", "always", "--key-file", keys}},
		{"compact-progress", []string{"compact", path, filepath.Join(t.TempDir(), "c.db"), "--progress", "always"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, stderr := mustRun(t, 0, tc.args...)
			golden(t, tc.name, terminal(stderr))
		})
	}
	for _, verb := range [][]string{{"export", path}, {"check", path}, {"compact", path, filepath.Join(t.TempDir(), "d.db")}} {
		_, stderr := mustRun(t, exitFailure, append(verb, "--progress", "sometimes")...)
		if stderr != "inspect: --progress \"sometimes\": want auto, always or never\n" {
			t.Fatalf("%s: stderr %q", verb[0], stderr)
		}
	}
}

func TestExportErrors(t *testing.T) {
	path := fixture(t)
	for _, tc := range []struct {
		path string
		args []string
		code int
		want string
	}{
		{path, nil, exitFailure, `inspect: informer "v1/secrets": object "prod/api-token" is encrypted (key id "k1"): pass --key-file`},
		{path, []string{"secrets", "--key-file", keyFile(t, wrongKey)}, exitFailure, `inspect: informer "v1/secrets": object "prod/api-token" does not decrypt`},
		{path, []string{"pods", "-o", "wide"}, exitFailure, `inspect: unknown output format "wide" (want one of json, yaml, jsonl)`},
		{withGarbageRecord(t), []string{"pods"}, exitCorrupt, `inspect: informer "v1/pods" object "ns-0/garbage": store: cache file is corrupt: record: malformed envelope`},
	} {
		stdout, stderr := mustRun(t, tc.code, append([]string{"export", tc.path}, tc.args...)...)
		if stdout != "" || !strings.HasPrefix(stderr, tc.want) {
			t.Errorf("%v: stdout %q\nstderr %q\nwant   %q", tc.args, stdout, stderr, tc.want)
		}
	}
	// A payload that does not decode is exported as its envelope, and the
	// export fails.
	stdout, stderr := mustRun(t, exitCorrupt, "export", withGarbagePayload(t), "pods", "-o", "jsonl")
	if n := strings.Count(stdout, "\n"); n != 7 || !strings.Contains(stderr, `object "ns-0/bad-payload": payload does not decode`) {
		t.Errorf("%d lines, stderr %q", n, stderr)
	}
	var e envelope
	if err := json.Unmarshal([]byte(stdout[:strings.Index(stdout, "\n")]), &e); err != nil || e.Key != "ns-0/bad-payload" {
		t.Errorf("%v: %+v", err, e)
	}
}

// export streams the List that get prints with cli-runtime's printers,
// byte for byte, managedFields left out alike (or kept alike).
func TestExportIsGetsList(t *testing.T) {
	path := fixture(t)
	keys := keyFile(t, testKey)
	for _, inf := range []string{"pods", "widgets", "secrets", "gadgets"} {
		for _, args := range [][]string{{"-o", "json"}, {"-o", "yaml"}, {"-o", "json", "--show-managed-fields"}, {"-o", "yaml", "--show-managed-fields"}} {
			args = append(args, "--key-file", keys)
			exported, _ := mustRun(t, 0, append([]string{"export", path, inf}, args...)...)
			got, _ := mustRun(t, 0, append([]string{"get", path, inf}, args...)...)
			if exported != got {
				t.Errorf("%s %v: export and get differ:\n%s", inf, args, firstDiff(got, exported))
			}
		}
	}
	empty, _ := mustRun(t, 0, "export", emptyFile(t), "-o", "json")
	if !strings.Contains(empty, `"items": []`) {
		t.Errorf("empty export: %s", empty)
	}
}
