package indexer

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
)

// Verification of the index values a warm load reads from the file.
//
// A warm load builds the index sets from the values the records (or the
// envelope snapshot) hold, without running any index function: the
// values were computed by whatever functions wrote them. Index functions
// are Go funcs, which cannot be fingerprinted, so a function changed under
// the same name between two runs is found only by running it: every
// loaded item starts unchecked, and its values are compared with the
// current functions' on its decoded object, by the background pass that
// Open starts (Full mode: the fill, which decodes every object anyway;
// Bounded mode: the same walk, which keeps no object) and by any read that
// decodes it first (GetByKey). Values that differ are fixed in memory, and
// the record (its index values and the index buckets) is queued for
// rewriting (opReindex). A mutation of an unchecked item computes its
// values afresh, which checks it too.
//
// Until every item is checked, the index reads (IndexKeys, ByIndex, Index,
// ListIndexFuncValues) cannot know which objects the current functions put
// under a value: they finish the pass first (waitIndex), as List waits
// for the fill. Reads by key (GetByKey, ListKeys, Len) do not wait.
//
// One index is checked without decoding anything: client-go's
// MetaNamespaceIndexFunc (the "namespace" index of every generated lister
// and informer factory), whose one value is the object's namespace, which
// the key names (the default key function's namespace/name; a decode
// checks that a record's key is its object's, checkEnvelope). The first
// read of such an index compares every unchecked item's loaded values
// with its key's namespace (checkByKey): if they all agree, the index is
// right for every object and its reads stop waiting; if one does not, it
// is fixed by the pass like any other and its reads wait for it. It
// relies on what client-go's keys rely on: a name has no '/' (the API
// server refuses one), so the key's namespace is the object's.

// IndexesVerified returns a channel closed once the index values of every
// object loaded from the file have been compared with the index functions'
// own (at once for a cold start); values that differed (an index function
// changed under the same name) are then fixed in memory and queued for
// rewriting. Index reads wait for it.
func (x *Indexer) IndexesVerified() <-chan struct{} { return x.verified }

// waitIndex returns once the values of the index name are the current
// function's for every object: at once for an index whose loaded values
// the keys confirm (checkByKey), else once no loaded item is unchecked
// (waitIndexes).
func (x *Indexer) waitIndex(name string) error {
	x.mu.RLock()
	done := x.uncheckedN == 0
	if !done {
		if i := x.idx.position(name); i < 0 || x.idx.keyChecked[i] {
			done = true // no such index (the read says so), or confirmed
		}
	}
	x.mu.RUnlock()
	if done || x.checkByKey(name) {
		return nil
	}
	return x.waitIndexes()
}

// checkByKey checks the loaded values of the index name against the keys
// of the unchecked items, if its function is MetaNamespaceIndexFunc and
// the keys are the default key function's, once per index set; it
// reports whether they agree (the index is then right for every object).
// Only a pass over the items: nothing is decoded.
func (x *Indexer) checkByKey(name string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.uncheckedN == 0 {
		return true
	}
	s := x.idx
	i := s.position(name)
	if i < 0 || s.keyChecked[i] {
		return true
	}
	if s.keyTried[i] || !x.defaultKeyFunc || !isMetaNamespaceIndexFunc(s.funcs[i]) {
		return false
	}
	s.keyTried[i] = true
	want := make([]string, 1)
	for key, it := range x.items {
		if !it.unchecked {
			continue // its values are the current functions'
		}
		if !slices.Equal(it.valNames, s.names) {
			return false
		}
		var got []string
		if i < len(it.vals) {
			got = it.vals[i]
		}
		want[0] = ""
		if ns, _, ok := strings.Cut(key, "/"); ok {
			want[0] = ns
		}
		if !sameValueSet(got, want) {
			return false
		}
	}
	s.keyChecked[i] = true
	return true
}

// waitIndexes returns once no loaded item is unchecked, running the rest
// of the verification pass itself when the background one has not done it
// (it takes turns with it, as List does).
func (x *Indexer) waitIndexes() error {
	x.mu.RLock()
	n := x.uncheckedN
	x.mu.RUnlock()
	if n == 0 {
		return nil
	}
	if err := x.fill(context.Background()); err != nil {
		return fmt.Errorf("indexer %q: verifying the index values loaded from %s: %w", x.name, x.db.Path(), err)
	}
	return nil
}

// checkedLocked notes that it's index values are now the current
// functions' (or, for an undecodable object, cannot be known until the
// server sends it again). The caller holds mu.
func (x *Indexer) checkedLocked(it *item) {
	if !it.unchecked {
		return
	}
	it.unchecked = false
	x.uncheckedN--
	if x.uncheckedN > 0 {
		return
	}
	x.loadKeys = nil
	if len(x.healed) > 0 {
		names := make([]string, 0, len(x.healed))
		for n := range x.healed {
			names = append(names, n)
		}
		sort.Strings(names)
		counts := make([]int, len(names))
		for i, n := range names {
			counts[i] = x.healed[n]
		}
		x.logger.Info("Index values in the cache file were not the index functions' (an index function changed): fixed in memory, records queued for rewriting", "indexes", names, "objects", counts)
	}
	if x.checkFailed > 1 {
		x.logger.Error(nil, "Index functions failed on more objects loaded from the cache file: they have no values for those indexes", "objects", x.checkFailed-1)
	}
	x.verifiedOnce.Do(func() { close(x.verified) })
}

// computeAll runs idx's functions on the decoded objects of keys (nil
// where errs[i] is set), in parallel, outside the indexer's lock. A
// function's error (the object gets no values for that index) is kept
// with the key's values for checkValuesLocked.
func computeAll(idx *indexSet, keys []string, objs []runtime.Object, errs []error) ([][][]string, []error) {
	vals := make([][][]string, len(keys))
	verrs := make([]error, len(keys))
	parallel(len(keys), 256, func(from, to int) {
		for i := from; i < to; i++ {
			if errs[i] == nil {
				vals[i], verrs[i] = idx.compute(keys[i], objs[i])
			}
		}
	})
	return vals, verrs
}

// checkValuesLocked compares an unchecked item's values with vals, the
// current functions' values for its object (from compute: an index whose
// function failed, verr, has none, as for a mutation), and when they
// differ, moves the key to vals in the index sets and queues its record
// for rewriting. It reports whether the values differed. The caller
// holds mu.
func (x *Indexer) checkValuesLocked(key string, it *item, vals [][]string, verr error) bool {
	if x.rebuilding {
		return false
	}
	x.noteIndexErrLocked(key, verr)
	if verr != nil {
		if x.checkFailed++; x.checkFailed == 1 {
			x.logger.Error(verr, "Index function failed on an object loaded from the cache file: it has no values for that index")
		}
	}
	if sameValues(it.vals, vals) {
		return false
	}
	for i, name := range x.idx.names {
		var o, n []string
		if i < len(it.vals) {
			o = it.vals[i]
		}
		if i < len(vals) {
			n = vals[i]
		}
		if !sameValueSet(o, n) {
			if x.healed[name]++; x.healed[name] == 1 {
				x.logger.Info("Index function gives other values than the cache file holds: fixing them", "index", name, "key", key, "stored", o, "now", n)
			}
		}
	}
	x.idx.update(key, it.vals, vals)
	it.vals, it.valNames = vals, x.idx.names
	x.queueReindexLocked(key, vals)
	return true
}

// queueReindexLocked queues the rewrite of key's index values: a pending
// put of key carries them instead (it writes the whole record).
func (x *Indexer) queueReindexLocked(key string, vals [][]string) {
	if op := x.pending[key]; op != nil && op.kind == opPut {
		op.names, op.vals = x.idx.names, vals
		return
	}
	x.queueLocked(key, pendingOp{kind: opReindex, names: x.idx.names, vals: vals})
}
