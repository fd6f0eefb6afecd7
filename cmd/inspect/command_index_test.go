package main

import (
	"encoding/json"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
)

func TestIndex(t *testing.T) {
	path := fixture(t)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"index-pods", []string{"v1/pods"}},
		{"index-pods-json", []string{"pods", "-o", "json"}},
		{"index-pods-name", []string{"pods", "-o", "name"}},
		{"index-namespace", []string{"pods", "namespace"}},
		{"index-node-wide", []string{"pods", "node", "-o", "wide"}},
		{"index-node-no-headers", []string{"pods", "node", "--no-headers"}},
		{"index-node-name", []string{"pods", "node", "-o", "name"}},
		{"index-node-json", []string{"pods", "node", "-o", "json"}},
		{"index-node-yaml", []string{"pods", "node", "-o", "yaml"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr := mustRun(t, 0, append([]string{"index", path}, tc.args...)...)
			if stderr != "" {
				t.Errorf("stderr: %s", stderr)
			}
			golden(t, tc.name, stdout)
		})
	}
	// The counts are those of list --index.
	stdout, _ := mustRun(t, 0, "index", path, "pods", "namespace", "-o", "json")
	var ii indexInfo
	if err := json.Unmarshal([]byte(stdout), &ii); err != nil {
		t.Fatal(err)
	}
	for _, v := range ii.Values {
		names, _ := mustRun(t, 0, "list", path, "pods", "--index", "namespace="+v.Value, "-o", "name")
		if n := strings.Count(names, "\n"); n != v.Objects || v.Objects != len(v.Keys) {
			t.Errorf("value %q: %d objects, list --index has %d", v.Value, v.Objects, n)
		}
	}
}

func TestIndexErrors(t *testing.T) {
	path := fixture(t)
	if _, stderr := mustRun(t, exitFailure, "index", path, "pods", "phase"); stderr != "inspect: informer \"v1/pods\" has no index \"phase\" (indexes: namespace, node)\n" {
		t.Errorf("stderr %q", stderr)
	}
	if _, stderr := mustRun(t, exitFailure, "index", path, "gadgets", "namespace"); stderr != "inspect: informer \"example.com/v1/gadgets\" has no index \"namespace\" (indexes: <none>)\n" {
		t.Errorf("stderr %q", stderr)
	}
	if stdout, stderr := mustRun(t, 0, "index", path, "gadgets"); stdout != "" || stderr != "Informer \"example.com/v1/gadgets\" has no indexes.\n" {
		t.Errorf("stdout %q stderr %q", stdout, stderr)
	}
	// A malformed entry (no NUL separator) is a corrupt file.
	bad := damage(t, func(tx *bolt.Tx) error {
		return informerBolt(tx, "v1/pods", "indexes", "node").Put([]byte("no-separator"), nil)
	})
	if _, stderr := mustRun(t, exitCorrupt, "index", bad, "pods", "node"); !strings.Contains(stderr, `malformed entry "no-separator"`) {
		t.Errorf("stderr %q", stderr)
	}
}
