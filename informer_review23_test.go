package boltinformer_test

// The third independent review (issue 23, item 10): what an operator reads
// of a running informer, its log lines and its WatchStats.

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
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

// value returns the value of key in e's key-value pairs (the last one).
func (e logEntry) value(key string) (any, bool) {
	var v any
	found := false
	for i := 0; i+1 < len(e.kv); i += 2 {
		if e.kv[i] == key {
			v, found = e.kv[i+1], true
		}
	}
	return v, found
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

// TestRegressionRelistLoggedAtDefaultLevel: a relist after a 410 (the
// saved resourceVersion expired while the informer was down) is one line
// at the default level, full or partial: it was logged only at V(1) (a
// partial relist) or V(2) (why a relist was full), so an operator whose
// restart listed everything saw nothing of it.
func TestRegressionRelistLoggedAtDefaultLevel(t *testing.T) {
	for _, partial := range []bool{false, true} {
		t.Run(fmt.Sprintf("partial=%v", partial), func(t *testing.T) {
			f := newCacheFile(t, 20)
			churn(t, f.src, 1) // 3 of 20 changed: partial above 15%
			f.src.Compact()
			f.src.ResetCalls()
			logger, get := newCapture()
			opts := &boltinformer.InformerOptions{Logger: &logger}
			if partial {
				opts.Metadata, opts.Getter, opts.PartialRelistRatio = f.src, f.src, 0.5
			}
			r := f.open(nil, opts)
			r.run()
			r.waitSynced()
			r.waitApplied()
			ws := r.inf.WatchStats()
			if ws.Expired != 1 || (ws.PartialRelists == 1) != partial || ws.Lists != btoi(!partial) {
				t.Fatalf("WatchStats %+v: want one 410 and one relist, partial %v", ws, partial)
			}
			var lines []logEntry
			for _, e := range get() {
				if strings.HasPrefix(e.msg, "Relisted") {
					lines = append(lines, e)
				}
			}
			if len(lines) != 1 || lines[0].level != 0 || lines[0].err {
				t.Fatalf("relist lines %+v, want one at the default level", lines)
			}
			l := lines[0]
			received := len(f.src.Objects()) // a full relist: every object
			if partial {
				received = 2 // the updated and the created one
			}
			for key, want := range map[string]any{"partial": partial, "cause": "expired", "resourceVersion": f.src.ResourceVersion(),
				"received": received, "deleted": 1} {
				if got, ok := l.value(key); !ok || got != want {
					t.Errorf("relist line %q: %s = %v, want %v (%v)", l.msg, key, got, want, l.kv)
				}
			}
			if !slices.Contains(l.keys, "informer") {
				t.Errorf("relist line %q does not name its informer: %v", l.msg, l.kv)
			}
		})
	}
}

func btoi(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
