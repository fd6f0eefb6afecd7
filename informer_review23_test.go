package boltinformer_test

// The third independent review (issue 23, item 10): what an operator reads
// of a running informer, its log lines and its WatchStats.

import (
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/internal/testobj"
)

// duplicateKey returns a key that sorted keys hold twice, or "".
func duplicateKey(keys []string) string {
	for i := 1; i < len(keys); i++ {
		if keys[i] == keys[i-1] {
			return keys[i]
		}
	}
	return ""
}

// TestRegressionLogKeysOnce: no log line of an informer carries a key
// twice. NewInformer gave its indexer the informer's logger, which has the
// key "informer", and the indexer added it again: every line of the
// indexer (a warm load's, a damaged record's, a close's) carried it twice.
// A warm start with an index the file lacks logs one (the rebuild).
func TestRegressionLogKeysOnce(t *testing.T) {
	f := newCacheFile(t, 20)
	churn(t, f.src, 1)
	f.src.Compact() // the resume gets 410: a relist, more lines
	logger, get := newCapture()
	db, err := boltinformer.Open(f.path, &boltinformer.Options{Logger: &logger})
	if err != nil {
		t.Fatal(err)
	}
	indexers := podIndexers()
	indexers["name"] = func(obj any) ([]string, error) {
		m, err := meta.Accessor(obj)
		if err != nil {
			return nil, err
		}
		return []string{m.GetName()}, nil
	}
	inf, err := db.NewInformer("pods", f.src, &corev1.Pod{}, 0, indexers, nil)
	if err != nil {
		t.Fatal(err)
	}
	stop := runInformer(t, inf)
	waitFor(t, "the relist", func() bool { return diffObjects(f.src.Objects(), inf.GetStore().List()) == "" })
	stop()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	indexerLine := false
	for _, e := range get() {
		if k := duplicateKey(e.keys); k != "" {
			t.Errorf("%q carries the key %q twice: %v", e.msg, k, e.kv)
		}
		indexerLine = indexerLine || e.msg == "Rebuilding indexes missing from the file"
	}
	if !indexerLine {
		t.Fatal("no line of the indexer was logged: the test proves nothing")
	}
}

// TestRegressionColdStartNotResumed: a cold start resumes nothing, and its
// WatchStats and Health say so; a warm start is resumed once the server
// accepts its watch. A cold start's first list marked it resumed, so
// Resumed could not tell a cold start from a warm one that resumed.
func TestRegressionColdStartNotResumed(t *testing.T) {
	f := &cacheFile{t: t, path: filepath.Join(t.TempDir(), "cache.db"), src: podSource(t, 5)}
	r := f.open(nil, nil)
	r.run()
	r.waitSynced()
	if _, err := f.src.Create(testobj.Pod(100, 3, 2, "")); err != nil {
		t.Fatal(err)
	}
	r.waitApplied() // the first list and a watch event
	if ws := r.inf.WatchStats(); ws.Resumed || ws.Lists != 1 || ws.Events == 0 {
		t.Errorf("cold start: WatchStats %+v, want Resumed false after its list and an event", ws)
	}
	if h := r.inf.Health(); h.Resumed || h.Start != "cold" || !h.Live {
		t.Errorf("cold start: Health %+v, want cold, live and not resumed", h)
	}
	r.close()

	r = f.open(nil, nil)
	if !r.inf.Decision().Warm {
		t.Fatalf("second start: %+v, want warm", r.inf.Decision())
	}
	r.run()
	r.waitSynced()
	if _, err := f.src.Create(testobj.Pod(101, 3, 2, "")); err != nil {
		t.Fatal(err)
	}
	r.waitApplied()
	if ws := r.inf.WatchStats(); !ws.Resumed || ws.Lists != 0 {
		t.Errorf("warm start: WatchStats %+v, want resumed without a list", ws)
	}
	if h := r.inf.Health(); !h.Resumed || h.Start != "warm" {
		t.Errorf("warm start: Health %+v, want warm and resumed", h)
	}
}
