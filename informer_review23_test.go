package boltinformer_test

// The third independent review (issue 23, item 10): what an operator reads
// of a running informer, its log lines and its WatchStats.

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/boltinformer/boltinformer"
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
