package indexer

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer/store"
)

// indexSet is the in-memory form of the index buckets: for each index, the
// keys of the objects having each value. Both memory modes keep it (it
// holds only keys). It is guarded by Indexer.mu.
type indexSet struct {
	// names are the index names, sorted; item.vals is aligned with them.
	names    []string
	funcs    []cache.IndexFunc
	indexers cache.Indexers
	// byName[name][value] is the set of keys.
	byName map[string]map[string]sets.Set[string]
	// keyTried and keyChecked, aligned with names, are the check of the
	// loaded values of an index whose values follow from the keys
	// (checkByKey, verify.go): tried once, and whether it confirmed them.
	keyTried, keyChecked []bool
}

// validIndexers rejects index names the store cannot hold.
func validIndexers(indexers cache.Indexers) error {
	for name := range indexers {
		if err := store.ValidateName(name); err != nil {
			return fmt.Errorf("indexer: index name: %w", err)
		}
	}
	return nil
}

func newIndexSet(indexers cache.Indexers) *indexSet {
	s := &indexSet{indexers: cache.Indexers{}, byName: map[string]map[string]sets.Set[string]{}}
	for name, f := range indexers {
		s.indexers[name] = f
	}
	s.names = make([]string, 0, len(s.indexers))
	for name := range s.indexers {
		s.names = append(s.names, name)
	}
	sort.Strings(s.names)
	for _, name := range s.names {
		s.funcs = append(s.funcs, s.indexers[name])
		s.byName[name] = map[string]sets.Set[string]{}
	}
	s.keyTried = make([]bool, len(s.names))
	s.keyChecked = make([]bool, len(s.names))
	return s
}

// position returns the position of the index name in s.names, or -1.
func (s *indexSet) position(name string) int {
	i, ok := slices.BinarySearch(s.names, name)
	if !ok {
		return -1
	}
	return i
}

// metaNamespaceIndexFunc is the code of client-go's MetaNamespaceIndexFunc.
var metaNamespaceIndexFunc = reflect.ValueOf(cache.MetaNamespaceIndexFunc).Pointer()

// isMetaNamespaceIndexFunc reports whether f is client-go's
// MetaNamespaceIndexFunc itself (a function without state: the same code
// is the same function), whose only value for an object is its namespace.
func isMetaNamespaceIndexFunc(f cache.IndexFunc) bool {
	return f != nil && reflect.ValueOf(f).Pointer() == metaNamespaceIndexFunc
}

// compute runs every index function on obj. vals is always complete: a
// function's error leaves its index without values for obj (the others
// are computed) and is returned as an *IndexFuncError, joined when
// several fail (client-go's indexer panics instead).
func (s *indexSet) compute(key string, obj any) (vals [][]string, err error) {
	if len(s.funcs) == 0 {
		return nil, nil
	}
	vals = make([][]string, len(s.funcs))
	var errs []error
	for i, f := range s.funcs {
		v, ferr := f(obj)
		if ferr != nil {
			errs = append(errs, &IndexFuncError{Key: key, Index: s.names[i], Err: ferr})
			continue
		}
		vals[i] = v
	}
	switch len(errs) {
	case 0:
		return vals, nil
	case 1:
		return vals, errs[0]
	default:
		return vals, errors.Join(errs...)
	}
}

// sameValues reports whether two objects' index values (aligned with the
// same names) are equal, each index's values compared as sets: index
// functions may return them in any order (e.g. from a map) or twice, and
// the file holds them sorted and once; an index missing at the end of one
// (a record without any value) has none.
func sameValues(a, b [][]string) bool {
	for i := range max(len(a), len(b)) {
		var x, y []string
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if !sameValueSet(x, y) {
			return false
		}
	}
	return true
}

// sameValueSet reports whether a and b hold the same values, ignoring
// order and repetition.
func sameValueSet(a, b []string) bool {
	if slices.Equal(a, b) {
		return true
	}
	if len(a) == 0 || len(b) == 0 {
		return false // one has values, the other none
	}
	return slices.Equal(sortedSet(a), sortedSet(b))
}

// sortedSet returns vals sorted and without repetition (a copy unless it
// is so already).
func sortedSet(vals []string) []string {
	if strictlySorted(vals) {
		return vals
	}
	s := slices.Clone(vals)
	slices.Sort(s)
	return slices.Compact(s)
}

// update moves key from its old values to its new ones.
func (s *indexSet) update(key string, old, nw [][]string) {
	for i, name := range s.names {
		var o, n []string
		if i < len(old) {
			o = old[i]
		}
		if i < len(nw) {
			n = nw[i]
		}
		if len(o) == 1 && len(n) == 1 && o[0] == n[0] {
			continue
		}
		idx := s.byName[name]
		for _, v := range o {
			if set := idx[v]; set != nil {
				set.Delete(key)
				if set.Len() == 0 {
					delete(idx, v)
				}
			}
		}
		for _, v := range n {
			set := idx[v]
			if set == nil {
				set = sets.New[string]()
				idx[v] = set
			}
			set.Insert(key)
		}
	}
}

// scan collects one record's index values from store.ScanRecord, aligned
// with the set's names, interning the strings it makes (index values
// repeat across records). One per loading goroutine.
type scan struct {
	names  []string
	cur    [][]string
	intern map[string]string
	// Slabs the records' value slices are cut from (one allocation per
	// slabSize records instead of several per record).
	valsSlab [][]string
	strSlab  []string
}

const slabSize = 4096

func (s *indexSet) newScan() *scan {
	return &scan{names: s.names, intern: map[string]string{}}
}

func (sc *scan) reset() { sc.cur = nil }

// add is the ScanRecord callback.
func (sc *scan) add(name, value []byte) {
	for i, n := range sc.names {
		if n != string(name) {
			continue
		}
		if sc.cur == nil {
			sc.cur = sc.takeVals()
		}
		if sc.cur[i] == nil {
			if len(sc.strSlab) == 0 {
				sc.strSlab = make([]string, slabSize)
			}
			sc.cur[i], sc.strSlab = sc.strSlab[:0:1], sc.strSlab[1:]
		}
		sc.cur[i] = append(sc.cur[i], sc.str(value))
		return
	}
	// An index no longer in the set: its values are forgotten.
}

// takeVals cuts one record's [][]string from the slab.
func (sc *scan) takeVals() [][]string {
	n := len(sc.names)
	if len(sc.valsSlab) < n {
		sc.valsSlab = make([][]string, n*slabSize)
	}
	v := sc.valsSlab[:n:n]
	sc.valsSlab = sc.valsSlab[n:]
	return v
}

// vals returns the values collected since reset.
func (sc *scan) vals() [][]string {
	if sc.cur == nil && len(sc.names) > 0 {
		return sc.takeVals()
	}
	return sc.cur
}

// str returns b as an interned string.
func (sc *scan) str(b []byte) string {
	if s, ok := sc.intern[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(sc.intern) < 1<<16 {
		sc.intern[s] = s
	}
	return s
}
