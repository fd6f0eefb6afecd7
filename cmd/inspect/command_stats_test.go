package main

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestStats(t *testing.T) {
	pageSized(t)
	path := fixture(t)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"stats", nil},
		{"stats-wide", []string{"-o", "wide"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr := mustRun(t, 0, append([]string{"stats", path}, tc.args...)...)
			if stderr != "" {
				t.Errorf("stderr: %s", stderr)
			}
			golden(t, tc.name, stdout)
		})
	}
}

// The structured stats add up: every page up to the high-water mark has a
// type, and the informers' bucket rows are those of ls.
func TestStatsJSON(t *testing.T) {
	path := fixture(t)
	for _, format := range []string{"json", "yaml"} {
		stdout, _ := mustRun(t, 0, "stats", path, "-o", format)
		if format == "yaml" {
			if !strings.Contains(stdout, "pageTypes:\n") {
				t.Fatalf("yaml: %s", stdout)
			}
			continue
		}
		var fs fileStats
		if err := json.Unmarshal([]byte(stdout), &fs); err != nil {
			t.Fatal(err)
		}
		pages := fs.BranchOverflow + fs.LeafOverflow
		for _, n := range fs.PageTypes {
			pages += n
		}
		if pages != fs.Pages || fs.PageTypes["meta"] != 2 || fs.FreelistFree != fs.PageTypes["free"] || len(fs.CheckErrors) != 0 {
			t.Fatalf("pages %d of %d: %+v", pages, fs.Pages, fs)
		}
		ls, _ := mustRun(t, 0, "ls", path, "-o", "json")
		var fi fileInfo
		if err := json.Unmarshal([]byte(ls), &fi); err != nil {
			t.Fatal(err)
		}
		rows := map[string]bucketStats{}
		for _, b := range fs.Buckets {
			rows[b.Informer+" "+b.Bucket] = b
		}
		for _, inf := range fi.Informers {
			b, ok := rows[inf.Name+" ."]
			if !ok {
				t.Fatalf("no stats row for %s", inf.Name)
			}
			if got := int64(b.Stats.BranchAlloc + b.Stats.LeafAlloc); got != inf.Bytes && !b.Inline {
				t.Errorf("%s: stats %d bytes, ls %d", inf.Name, got, inf.Bytes)
			}
			if objs := rows[inf.Name+" objects"]; objs.Stats.KeyN != inf.Objects {
				t.Errorf("%s: stats %d keys, ls %d objects", inf.Name, objs.Stats.KeyN, inf.Objects)
			}
		}
	}
}

func TestStatsDamaged(t *testing.T) {
	// Stats is about pages: a garbage record does not disturb it.
	if _, stderr := mustRun(t, 0, "stats", withGarbageRecord(t)); stderr != "" {
		t.Errorf("stderr %q", stderr)
	}
	if _, stderr := mustRun(t, exitCorrupt, "stats", truncated(t, 40000)); !strings.Contains(stderr, "is damaged and cannot be read") {
		t.Errorf("stderr %q", stderr)
	}
}
