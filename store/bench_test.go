package store_test

import (
	"fmt"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/boltinformer/boltinformer/store"
)

// BenchmarkOpen measures Open of a cache of n Pods (about 2.2 KB each, two
// indexes): the page verification before bbolt maps the file is O(file),
// compared with bbolt's own Open.
func BenchmarkOpen(b *testing.B) {
	for _, n := range []int{1000, 20000} {
		path := tempPath(b)
		db, err := store.Open(path, &store.Options{NoSync: true})
		if err != nil {
			b.Fatal(err)
		}
		for i := 0; i < n; i += 1000 {
			if err := db.Commit(podBatch(b, "pods", i, min(i+1000, n), fmt.Sprint(i))); err != nil {
				b.Fatal(err)
			}
		}
		size, _ := db.Size()
		_ = db.Close()
		b.Run(fmt.Sprintf("objects=%d/store", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				db, err := store.Open(path, &store.Options{NoSync: true})
				if err != nil {
					b.Fatal(err)
				}
				_ = db.Close()
			}
			b.ReportMetric(float64(size), "file-bytes")
		})
		b.Run(fmt.Sprintf("objects=%d/store-read-only", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				db, err := store.Open(path, &store.Options{ReadOnly: true})
				if err != nil {
					b.Fatal(err)
				}
				_ = db.Close()
			}
		})
		b.Run(fmt.Sprintf("objects=%d/bbolt", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				db, err := bolt.Open(path, 0o600, &bolt.Options{NoSync: true, FreelistType: bolt.FreelistMapType})
				if err != nil {
					b.Fatal(err)
				}
				_ = db.Close()
			}
		})
		b.Run(fmt.Sprintf("objects=%d/check", n), func(b *testing.B) {
			db, err := store.Open(path, &store.Options{ReadOnly: true})
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			b.ReportAllocs()
			for b.Loop() {
				if probs, err := db.Check(nil); err != nil || len(probs) > 0 {
					b.Fatal(probs, err)
				}
			}
		})
	}
}
