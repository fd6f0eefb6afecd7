package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
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

// compactCopy copies every bucket, nested bucket, sequence, key and value,
// in several transactions, and counts every key.
func TestCompactCopy(t *testing.T) {
	src, err := bolt.Open(fixture(t), 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := bolt.Open(filepath.Join(t.TempDir(), "copy.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	var keys, calls int
	_ = src.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(_ []byte, b *bolt.Bucket) error { keys += b.Stats().KeyN; return nil })
	})
	if err := compactCopy(dst, src, 2000, func() { calls++ }); err != nil {
		t.Fatal(err)
	}
	if calls != keys || keys == 0 {
		t.Errorf("%d calls, %d keys", calls, keys)
	}
	if a, b := dump(t, src), dump(t, dst); a != b {
		t.Fatalf("the copy differs:\n%s", firstDiff(a, b))
	}
}

// dump lists every bucket (with its sequence), key and value of db.
func dump(t *testing.T, db *bolt.DB) string {
	var b strings.Builder
	var walk func(prefix string, bk *bolt.Bucket) error
	walk = func(prefix string, bk *bolt.Bucket) error {
		fmt.Fprintf(&b, "%s seq=%d\n", prefix, bk.Sequence())
		return bk.ForEach(func(k, v []byte) error {
			if v == nil {
				return walk(prefix+"/"+string(k), bk.Bucket(k))
			}
			fmt.Fprintf(&b, "%s/%q=%x\n", prefix, k, v)
			return nil
		})
	}
	err := db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, bk *bolt.Bucket) error { return walk(string(name), bk) })
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}
