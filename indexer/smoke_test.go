package indexer_test

import (
	"context"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer/indexer"
	"github.com/boltinformer/boltinformer/internal/testobj"
	"github.com/boltinformer/boltinformer/store"
)

func TestSmoke(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.db")
	for _, mode := range []indexer.Mode{indexer.Full, indexer.Bounded} {
		db, err := store.Open(path+string(rune('a'+mode)), nil)
		if err != nil {
			t.Fatal(err)
		}
		idx := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
		x, err := indexer.Open(db, "pods", idx, &indexer.Options{Example: &corev1.Pod{}, Mode: mode, CacheSize: 5})
		if err != nil {
			t.Fatal(err)
		}
		var list []any
		for i := 0; i < 100; i++ {
			list = append(list, testobj.Pod(i, 3, 2, "10"))
		}
		if err := x.Replace(list, "10"); err != nil {
			t.Fatal(err)
		}
		_ = x.Delete(list[0])
		if err := x.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		byNS, _ := x.ByIndex(cache.NamespaceIndex, "ns-1")
		if len(byNS) != 33 {
			t.Fatalf("mode %d: ns-1 has %d", mode, len(byNS))
		}
		if err := x.Close(); err != nil {
			t.Fatal(err)
		}
		probs, err := db.Check(nil)
		if err != nil || len(probs) > 0 {
			t.Fatalf("check: %v %v", err, probs)
		}
		x2, err := indexer.Open(db, "pods", idx, &indexer.Options{Example: &corev1.Pod{}, Mode: mode, CacheSize: 5})
		if err != nil {
			t.Fatal(err)
		}
		if x2.Len() != 99 || x2.ResourceVersion() != "10" || !x2.Synced() {
			t.Fatalf("reopen: len %d rv %q", x2.Len(), x2.ResourceVersion())
		}
		byNS, _ = x2.ByIndex(cache.NamespaceIndex, "ns-1")
		if len(byNS) != 33 {
			t.Fatalf("reopen mode %d: ns-1 has %d", mode, len(byNS))
		}
		o, ok, err := x2.GetByKey("ns-1/pod-000001")
		if err != nil || !ok || o.(*corev1.Pod).Spec.Containers[0].Resources.Requests.Cpu().String() != "250m" {
			t.Fatalf("get: %v %v", ok, err)
		}
		if mode == indexer.Bounded && x2.CachedObjects() > 5 {
			t.Fatalf("cached %d", x2.CachedObjects())
		}
		x2.Close()
		db.Close()
	}
}
