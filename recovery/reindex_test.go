package recovery_test

import (
	"context"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/recovery/crashtest"
)

// TestIndexDroppedAndReadded drops an index (a restart without it), then
// adds it back, by a rebuild on open and by AddIndexers: records keep the
// values of a dropped index until rewritten, and those stale values must
// not stand for index entries in the new bucket. Found by the crash loop
// (run 748 of seed 3: "has value in index but no index entry").
func TestIndexDroppedAndReadded(t *testing.T) {
	for _, how := range []string{"rebuild-on-open", "add-indexers"} {
		t.Run(how, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "cache.db")
			h := smallHistory(41)
			src := h.Source(0, 300)
			run := func(indexers cache.Indexers, after func(inf *boltinformer.Informer)) {
				t.Helper()
				db, err := boltinformer.Open(path, nil)
				must(t, err)
				inf, err := db.NewInformer(informerName, src, &corev1.Pod{}, 0, indexers, &boltinformer.InformerOptions{Resource: "pods"})
				must(t, err)
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				go func() { defer close(done); inf.RunWithContext(ctx) }()
				a := &agent{db: db, inf: inf, cancel: cancel, done: done}
				defer func() { _ = a.stop() }()
				a.caughtUp(t, src)
				if after != nil {
					after(inf)
				}
				must(t, a.stop())
				if _, err := crashtest.VerifyFile(path, informerName, h.StateAt, &crashtest.VerifyOptions{Indexers: crashIndexers(true)}); err != nil {
					t.Fatal(err)
				}
			}
			run(crashIndexers(true), nil)  // with the node index
			run(crashIndexers(false), nil) // dropped
			if how == "rebuild-on-open" {
				run(crashIndexers(true), nil)
			} else {
				run(crashIndexers(false), func(inf *boltinformer.Informer) {
					must(t, inf.AddIndexers(cache.Indexers{nodeIndex: nodeIndexFunc}))
				})
			}
		})
	}
}
