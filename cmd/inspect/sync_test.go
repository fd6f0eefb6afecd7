package main

import (
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/boltinformer/boltinformer/internal/safefile"
)

// TestRegressionOutputsSynced: export --output-file renamed its temporary
// file into place, and compact created its copy, without fsyncing the
// directory (and export without fsyncing the file): after a power loss
// the output could be missing, or present by name and empty. Observed
// through safefile's hooks.
func TestRegressionOutputsSynced(t *testing.T) {
	path := fixture(t)
	var mu sync.Mutex
	var synced []string
	defer safefile.SetHooks(safefile.Hooks{SyncedDir: func(d string) {
		mu.Lock()
		synced = append(synced, d)
		mu.Unlock()
	}})()
	for _, args := range [][]string{
		{"export", path, "pods", "-o", "yaml", "--output-file", filepath.Join(t.TempDir(), "pods.yaml")},
		{"compact", path, filepath.Join(t.TempDir(), "compact.db")},
	} {
		mu.Lock()
		synced = nil
		mu.Unlock()
		mustRun(t, 0, args...)
		out := args[len(args)-1]
		mu.Lock()
		ok := slices.Contains(synced, filepath.Dir(out))
		got := synced
		mu.Unlock()
		if !ok {
			t.Errorf("%s: the directory of %s was not fsync'd (synced %v)", args[0], out, got)
		}
	}
}
