package boltinformer_test

// The DB's Prometheus metrics and health (issue 5), read back from a
// registry after a cold start, a warm start, a 410 relist and a commit
// failure.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/internal/testobj"
	"github.com/boltinformer/boltinformer/store"
)

// The registry is read with Gather and searched by hand:
// prometheus/testutil would need github.com/kylelemons/godebug in go.mod.

// series returns every series of name as "label=value,...": value, labels
// sorted, the value a counter's or gauge's, or a histogram's sample count.
func series(t *testing.T, g prometheus.Gatherer, name string) map[string]float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, lp := range m.GetLabel() {
				ls = append(ls, lp.GetName()+"="+lp.GetValue())
			}
			sort.Strings(ls)
			var v float64
			switch {
			case m.GetCounter() != nil:
				v = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				v = m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				v = float64(m.GetHistogram().GetSampleCount())
			default:
				t.Fatalf("%s: unexpected metric type %v", name, mf.GetType())
			}
			out[strings.Join(ls, ",")] = v
		}
	}
	return out
}

// metricValue returns the value of the series of name whose labels include
// labels, and whether there is one.
func metricValue(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	for ls, v := range series(t, g, name) {
		have := map[string]bool{}
		for _, l := range strings.Split(ls, ",") {
			have[l] = true
		}
		match := true
		for k, want := range labels {
			match = match && have[k+"="+want]
		}
		if match {
			return v, true
		}
	}
	return 0, false
}

// mustMetric is metricValue for a series that must exist.
func mustMetric(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	v, ok := metricValue(t, g, name, labels)
	if !ok {
		t.Fatalf("no series %s%v (have %v)", name, labels, series(t, g, name))
	}
	return v
}

// checkStartInfo checks that boltinformer_start_info is exactly one series
// for informer "pods", of value 1, with mode and reason.
func checkStartInfo(t *testing.T, g prometheus.Gatherer, mode, reason string) {
	t.Helper()
	got := series(t, g, "boltinformer_start_info")
	want := map[string]float64{"informer=pods,mode=" + mode + ",reason=" + reason: 1}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("boltinformer_start_info %v, want %v", got, want)
	}
}

func TestMetricsStartModes(t *testing.T) {
	f := &cacheFile{t: t, path: t.TempDir() + "/cache.db", src: newPodSource()}
	for i := range 10 {
		if _, err := f.src.Create(testobj.Pod(i, 3, 2, "")); err != nil {
			t.Fatal(err)
		}
	}
	pods := map[string]string{"informer": "pods"}

	reg := prometheus.NewRegistry()
	r := f.open(&boltinformer.Options{Registerer: reg}, nil)
	r.run()
	r.waitSynced()
	r.waitApplied()
	if err := r.db.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkStartInfo(t, reg, "cold", "no-state")
	if v := mustMetric(t, reg, "boltinformer_objects", pods); v != 10 {
		t.Fatalf("objects %v, want 10", v)
	}
	if v := mustMetric(t, reg, "boltinformer_synced", pods); v != 1 {
		t.Fatalf("synced %v", v)
	}
	if v := mustMetric(t, reg, "boltinformer_commits_total", map[string]string{"result": "ok"}); v < 1 {
		t.Fatalf("commits_total{ok} %v", v)
	}
	if v := mustMetric(t, reg, "boltinformer_commit_batch_objects", nil); v < 1 {
		t.Fatalf("commit_batch_objects count %v", v)
	}
	if v := mustMetric(t, reg, "boltinformer_events_applied_total", pods); v < 10 {
		t.Fatalf("events_applied_total %v, want at least the 10 listed", v)
	}
	if v := mustMetric(t, reg, "boltinformer_watch_starts_total", pods); v < 1 {
		t.Fatalf("watch_starts_total %v", v)
	}
	if v := mustMetric(t, reg, "boltinformer_db_file_size_bytes", nil); v <= 0 {
		t.Fatalf("db_file_size_bytes %v", v)
	}
	if v := mustMetric(t, reg, "boltinformer_relists_total", map[string]string{"informer": "pods", "reason": "expired"}); v != 0 {
		t.Fatalf("relists_total{expired} %v after a cold start", v)
	}
	r.close()
	if mfs, err := reg.Gather(); err != nil || len(mfs) != 0 {
		t.Fatalf("%d metric families left registered after Close (%v)", len(mfs), err)
	}

	reg = prometheus.NewRegistry()
	r = f.open(&boltinformer.Options{Registerer: reg}, nil)
	checkStartInfo(t, reg, "warm", "resumable")
	if v := mustMetric(t, reg, "boltinformer_objects", pods); v != 10 {
		t.Fatalf("objects %v before Run, want the 10 on disk", v)
	}
	r.close()

	reg = prometheus.NewRegistry()
	f.open(&boltinformer.Options{Registerer: reg}, &boltinformer.InformerOptions{
		ListOptions: boltinformer.ListOptionsFingerprint("", metav1.ListOptions{LabelSelector: "tier=web"}),
	}) // closed by the test's cleanup
	checkStartInfo(t, reg, "cold", "list-options")
}

func TestMetricsExpiredRelist(t *testing.T) {
	f := newCacheFile(t, 10)
	if err := f.src.Delete("ns-0/pod-000000"); err != nil {
		t.Fatal(err)
	}
	f.src.Compact()
	reg := prometheus.NewRegistry()
	r := f.open(&boltinformer.Options{Registerer: reg}, nil)
	r.run()
	r.waitApplied()
	for reason, want := range map[string]float64{"expired": 1, "other": 0} {
		if v := mustMetric(t, reg, "boltinformer_relists_total", map[string]string{"informer": "pods", "reason": reason}); v != want {
			t.Errorf("relists_total{reason=%q} %v, want %v", reason, v, want)
		}
	}
	if v := mustMetric(t, reg, "boltinformer_watch_starts_total", map[string]string{"informer": "pods"}); v < 2 {
		t.Errorf("watch_starts_total %v, want the expired resume and the watch after the relist", v)
	}
	if v := mustMetric(t, reg, "boltinformer_watch_errors_total", map[string]string{"informer": "pods"}); v < 1 {
		t.Errorf("watch_errors_total %v, want the 410", v)
	}
}

var errInjected = errors.New("injected commit failure")

func TestMetricsCommitFailure(t *testing.T) {
	f := newCacheFile(t, 10)
	var fail atomic.Bool
	reg := prometheus.NewRegistry()
	r := f.open(&boltinformer.Options{Registerer: reg, BeforeCommit: func() error {
		if fail.Load() {
			return errInjected
		}
		return nil
	}}, nil)
	r.run()
	r.waitSynced()
	r.waitApplied()
	if err := r.db.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r.db.Healthy(); err != nil {
		t.Fatalf("Healthy: %v", err)
	}
	saved := r.inf.Indexer().SavedState().ResourceVersion

	fail.Store(true)
	if _, err := f.src.Update(bumpPod(f.src.Objects()["ns-1/pod-000001"], 1)); err != nil {
		t.Fatal(err)
	}
	r.waitApplied()
	waitFor(t, "a failed commit", func() bool { return r.db.LastCommitError() != nil })
	if v := mustMetric(t, reg, "boltinformer_commit_errors_total", nil); v < 1 {
		t.Errorf("commit_errors_total %v", v)
	}
	if v := mustMetric(t, reg, "boltinformer_commits_total", map[string]string{"result": "error"}); v < 1 {
		t.Errorf("commits_total{error} %v", v)
	}
	err := r.db.Healthy()
	if !errors.Is(err, boltinformer.ErrUnhealthy) || !errors.Is(err, errInjected) {
		t.Errorf("Healthy: %v, want ErrUnhealthy wrapping the commit error", err)
	}
	if h := r.inf.Health(); !strings.Contains(h.CommitError, errInjected.Error()) {
		t.Errorf("Health().CommitError %q", h.CommitError)
	}
	if got := r.inf.Indexer().SavedState().ResourceVersion; got != saved {
		t.Errorf("saved resourceVersion advanced to %s through a failed commit (was %s)", got, saved)
	}
	if st, _ := fileState(t, r.db); st.ResourceVersion != saved {
		t.Errorf("the file's resourceVersion %s, want %s", st.ResourceVersion, saved)
	}
	if h := r.inf.Health(); h.AppliedResourceVersion != f.src.ResourceVersion() || h.SavedResourceVersion != saved {
		t.Errorf("health %+v: want applied %s, saved %s", h, f.src.ResourceVersion(), saved)
	}
	rec := httptest.NewRecorder()
	r.db.HealthHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("health handler %d, want 503", rec.Code)
	}

	// The hook is cleared: the committer's retry writes the batch.
	fail.Store(false)
	waitFor(t, "the commit to be retried", func() bool {
		return r.db.Healthy() == nil && r.inf.Indexer().SavedState().ResourceVersion == f.src.ResourceVersion()
	})
	if h := r.inf.Health(); h.CommitError != "" {
		t.Errorf("Health().CommitError %q after recovery", h.CommitError)
	}
	var st *store.State
	if st, _ = fileState(t, r.db); st.ResourceVersion != f.src.ResourceVersion() {
		t.Errorf("the file's resourceVersion %s, want %s", st.ResourceVersion, f.src.ResourceVersion())
	}
	rec = httptest.NewRecorder()
	r.db.HealthHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	if rec.Code != http.StatusOK {
		t.Errorf("health handler %d after recovery, want 200", rec.Code)
	}
	r.close()

	// What the retry wrote is what a restart resumes from.
	r = f.open(nil, nil)
	if d := diffObjects(f.src.Objects(), r.inf.GetIndexer().List()); d != "" {
		t.Fatalf("reopened: %s", d)
	}
}
