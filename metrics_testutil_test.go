package boltinformer_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/internal/testobj"
)

// TestMetricsWithTestutil reads the metrics back with client_golang's
// testutil, as an agent's own tests would: a warm start's start_info and
// object gauge, and a commit that happened.
func TestMetricsWithTestutil(t *testing.T) {
	f := newCacheFile(t, 12)
	reg := prometheus.NewRegistry()
	r := f.open(&boltinformer.Options{Registerer: reg}, nil)
	const want = `
# HELP boltinformer_objects Objects in the informer's cache.
# TYPE boltinformer_objects gauge
boltinformer_objects{informer="pods"} 12
# HELP boltinformer_start_info How the informer started: mode warm or cold, with the reason.
# TYPE boltinformer_start_info gauge
boltinformer_start_info{informer="pods",mode="warm",reason="resumable"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "boltinformer_objects", "boltinformer_start_info"); err != nil {
		t.Fatal(err)
	}
	r.run()
	r.waitSynced()
	if _, err := f.src.Create(testobj.Pod(100, 3, 2, "")); err != nil {
		t.Fatal(err)
	}
	r.waitApplied()
	if err := r.db.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, "boltinformer_commit_duration_seconds", "boltinformer_commits_total"); err != nil || n < 2 {
		t.Fatalf("commit series: %d, %v", n, err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(strings.ReplaceAll(want, "} 12", "} 13")), "boltinformer_objects"); err != nil {
		t.Fatal(err)
	}
}
