package localapi

import (
	"sync/atomic"

	"k8s.io/apimachinery/pkg/runtime"
)

// DefaultListCacheBytes bounds, by default, the list encodings a Handler
// keeps (Options.ListCacheBytes).
const DefaultListCacheBytes = 128 << 20

// item is one version of an object as a view serves it: the object (the
// informer's own, never written) and, once a LIST has encoded it, its
// list encodings, kept while it is the current version and the budget
// has room. An item is created for each new object the informer reports
// (a new version is a new object, hence a new item): an encoding is never
// that of another version.
type item struct {
	obj runtime.Object
	// dead: no longer the current version (replaced, deleted, relisted);
	// it keeps no encoding. It is still served by a LIST of a past
	// state (a continue token), encoded each time.
	dead atomic.Bool
	// enc caches the list encodings by format: JSON (YAML's too), and
	// protobuf without envelope. Read and filled without the view's lock.
	enc [numFormats]atomic.Pointer[[]byte]
}

// encBudget bounds the bytes of list encodings that the items of one
// Handler keep. A limit of 0 or less keeps none.
type encBudget struct {
	limit int64
	used  atomic.Int64
}

// reserve takes n bytes of the budget, if they fit.
func (b *encBudget) reserve(n int) bool {
	if b == nil || b.limit <= 0 {
		return false
	}
	if b.used.Add(int64(n)) > b.limit {
		b.used.Add(-int64(n))
		return false
	}
	return true
}

// release gives n bytes back.
func (b *encBudget) release(n int) {
	if b != nil {
		b.used.Add(-int64(n))
	}
}

// encoded returns the item's object as a list item in format f: the
// cached encoding, else a new one (kept when the item is current and b
// has room). The result must not be written.
func (it *item) encoded(f format, b *encBudget) ([]byte, error) {
	if f == formatYAML {
		f = formatJSON // a YAML list is its JSON, converted whole
	}
	if p := it.enc[f].Load(); p != nil {
		return *p, nil
	}
	out, err := bareBytes(f, it.obj)
	if err != nil {
		return nil, err
	}
	if it.dead.Load() || !b.reserve(len(out)) {
		return out, nil
	}
	if !it.enc[f].CompareAndSwap(nil, &out) {
		b.release(len(out)) // another request kept the same bytes first
		return out, nil
	}
	// retire may have run between the check above and the swap: then
	// one of us (retire's Swap, or this one) takes the encoding out.
	if it.dead.Load() {
		it.drop(f, b)
	}
	return out, nil
}

// retire marks the item no longer current and drops its encodings (a
// request that has them keeps its copy of the slice). Caller holds the
// view's lock for writing.
func (it *item) retire(b *encBudget) {
	it.dead.Store(true)
	for f := range numFormats {
		it.drop(f, b)
	}
}

func (it *item) drop(f format, b *encBudget) {
	if p := it.enc[f].Swap(nil); p != nil {
		b.release(len(*p))
	}
}
