package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCompact(t *testing.T) {
	path := fixture(t)
	out := filepath.Join(t.TempDir(), "compact.db")
	stdout, stderr := mustRun(t, 0, "compact", path, out)
	if stderr != "" || !strings.HasPrefix(stdout, "compacted "+path+" (") || !strings.Contains(stdout, " to "+out+" (") {
		t.Fatalf("stdout %q stderr %q", stdout, stderr)
	}
	fi, err := os.Stat(out)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%v: %v", err, fi.Mode())
	}
	// The copy holds the same informers, state and objects.
	mustRun(t, 0, "check", out, "--key-file", keyFile(t, testKey))
	lsOf := func(p string) []informerInfo {
		s, _ := mustRun(t, 0, "ls", p, "-o", "json")
		var fi fileInfo
		if err := json.Unmarshal([]byte(s), &fi); err != nil {
			t.Fatal(err)
		}
		for i := range fi.Informers {
			fi.Informers[i].Bytes = 0
		}
		return fi.Informers
	}
	a, _ := json.Marshal(lsOf(path))
	b, _ := json.Marshal(lsOf(out))
	if string(a) != string(b) {
		t.Fatalf("ls differs:\n%s\n%s", a, b)
	}
	keys := keyFile(t, testKey)
	want, _ := mustRun(t, 0, "export", path, "-o", "jsonl", "--key-file", keys)
	got, _ := mustRun(t, 0, "export", out, "-o", "jsonl", "--key-file", keys)
	if got != want {
		t.Fatal("export of the copy differs")
	}
}

func TestCompactRefuses(t *testing.T) {
	path := fixture(t)
	dir := t.TempDir()
	exists := filepath.Join(dir, "exists.db")
	if err := os.WriteFile(exists, []byte("keep me"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.db")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		out, want string
	}{
		{path, "compact never works in place"},
		{filepath.Join(filepath.Dir(path), ".", filepath.Base(path)), "compact never works in place"},
		{link, "compact never works in place"},
		{exists, "exists: give a new file"},
	} {
		_, stderr := mustRun(t, exitFailure, "compact", path, tc.out)
		if !strings.Contains(stderr, tc.want) {
			t.Errorf("%s: stderr %q", tc.out, stderr)
		}
	}
	if data, err := os.ReadFile(exists); err != nil || string(data) != "keep me" {
		t.Fatalf("compact changed an existing file: %v %q", err, data)
	}
	// A copy that does not check is removed.
	out := filepath.Join(dir, "bad-copy.db")
	_, stderr := mustRun(t, exitCorrupt, "compact", withGarbageRecord(t), out)
	if !strings.Contains(stderr, "the copy does not check") {
		t.Errorf("stderr %q", stderr)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a bad copy was left: %v", err)
	}
	// A damaged file is not copied at all.
	if _, stderr := mustRun(t, exitCorrupt, "compact", truncated(t, 40000), out); !strings.Contains(stderr, "is damaged") {
		t.Errorf("stderr %q", stderr)
	}
}
