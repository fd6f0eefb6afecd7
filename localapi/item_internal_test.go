package localapi

import (
	"bytes"
	"fmt"
	"strconv"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/boltinformer/boltinformer"
)

// currentItems are the view's items, in key order.
func currentItems(v *view) []*item {
	v.mu.RLock()
	defer v.mu.RUnlock()
	var out []*item
	v.snapshotLocked(v.next).walk("", "", func(_ string, it *item) bool {
		out = append(out, it)
		return true
	})
	return out
}

// TestListCacheBudget: the bytes the items keep are counted against the
// budget, never above its limit, and given back when their versions are
// replaced, deleted or relisted, also while lists encode concurrently;
// the encodings are the objects' own.
func TestListCacheBudget(t *testing.T) {
	pods := func(rv int) []any {
		var out []any
		for i := range 20 {
			out = append(out, testPod(fmt.Sprintf("ns/p%02d", i), rv))
		}
		return out
	}
	for _, limit := range []int64{-1, 700, 1 << 20} {
		t.Run(strconv.FormatInt(limit, 10), func(t *testing.T) {
			b := &encBudget{limit: limit}
			v := newView(8, b)
			v.initLocked(boltinformer.ObservedState{Objects: pods(1), ResourceVersion: "1", Synced: true})
			encodeAll := func() {
				t.Helper()
				for _, it := range currentItems(v) {
					for _, f := range []format{formatJSON, formatProtobuf, formatYAML} {
						got, err := it.encoded(f, b)
						if err != nil {
							t.Fatal(err)
						}
						wf := f
						if f == formatYAML {
							wf = formatJSON // a YAML list's items are JSON
						}
						want, err := bareBytes(wf, it.obj)
						if err != nil {
							t.Fatal(err)
						}
						if !bytes.Equal(got, want) {
							t.Fatalf("%v encoding of %s is not its object's", f, rvOf(it.obj))
						}
					}
				}
				if used := b.used.Load(); used > max(limit, 0) || used < 0 {
					t.Fatalf("%d bytes kept, limit %d", used, limit)
				}
			}
			kept := func() int64 {
				var n int64
				for _, it := range currentItems(v) {
					for f := range numFormats {
						if p := it.enc[f].Load(); p != nil {
							n += int64(len(*p))
						}
					}
				}
				return n
			}
			encodeAll()
			if limit > 1000 && b.used.Load() == 0 {
				t.Fatal("nothing kept")
			}
			if got := kept(); got != b.used.Load() {
				t.Fatalf("items keep %d bytes, the budget counts %d", got, b.used.Load())
			}
			// New versions of every object, while lists encode.
			var wg sync.WaitGroup
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 20 {
						for _, it := range currentItems(v) {
							if _, err := it.encoded(formatJSON, b); err != nil {
								t.Error(err)
							}
						}
					}
				}()
			}
			for i := range 20 {
				p := testPod(fmt.Sprintf("ns/p%02d", i), 2+i)
				p.Labels = map[string]string{"v": "2"}
				v.apply(boltinformer.Change{Type: boltinformer.ChangeUpsert, Key: "ns/" + p.Name, Object: p, ResourceVersion: p.ResourceVersion})
			}
			wg.Wait()
			if got := kept(); got != b.used.Load() {
				t.Fatalf("after updates, items keep %d bytes, the budget counts %d", got, b.used.Load())
			}
			encodeAll()
			// Deletes give back, as does a relist.
			v.apply(boltinformer.Change{Type: boltinformer.ChangeDelete, Key: "ns/p00", Object: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p00", ResourceVersion: "30"}}, ResourceVersion: "30"})
			if got := kept(); got != b.used.Load() {
				t.Fatalf("after a delete, items keep %d bytes, the budget counts %d", got, b.used.Load())
			}
			v.apply(boltinformer.Change{Type: boltinformer.ChangeReplace, Objects: pods(40), ResourceVersion: "40"})
			if got := b.used.Load(); got != 0 {
				t.Fatalf("after a relist the budget counts %d bytes", got)
			}
			encodeAll()
			for _, it := range currentItems(v) {
				it.retire(b)
			}
			if got := b.used.Load(); got != 0 {
				t.Fatalf("every item retired, the budget counts %d bytes", got)
			}
		})
	}
}

// TestAppendListMatchesListWriter: the list assembled from kept encodings
// is byte for byte the list listWriter writes, in every format, empty or
// not, with and without a continue token.
func TestAppendListMatchesListWriter(t *testing.T) {
	gvk := corev1.SchemeGroupVersion.WithKind("PodList")
	n := int64(7)
	for _, count := range []int{0, 1, 300} {
		var items []*item
		for i := range count {
			p := testPod(fmt.Sprintf("ns/p%03d", i), i+1)
			p.Labels = map[string]string{"i": strconv.Itoa(i)}
			items = append(items, &item{obj: p})
		}
		for _, lm := range []metav1.ListMeta{{ResourceVersion: "9"}, {ResourceVersion: "9", Continue: "abc", RemainingItemCount: &n}} {
			for _, f := range []format{formatJSON, formatProtobuf, formatYAML} {
				lw := newListWriter(f, gvk)
				var encs [][]byte
				for _, it := range items {
					if err := lw.add(it.obj); err != nil {
						t.Fatal(err)
					}
					b, err := it.encoded(f, nil)
					if err != nil {
						t.Fatal(err)
					}
					encs = append(encs, b)
				}
				var want bytes.Buffer
				if err := lw.finish(&want, lm); err != nil {
					t.Fatal(err)
				}
				got, err := appendList([]byte("junk"), f, gvk, lm, encs)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got[4:], want.Bytes()) || string(got[:4]) != "junk" {
					t.Fatalf("%d items, %v, format %v: appendList differs from listWriter", count, lm, f)
				}
			}
		}
	}
}
