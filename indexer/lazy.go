package indexer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/boltinformer/boltinformer/store"
)

// Lazy decoding (Full mode, after a warm load).
//
// A warm load reads only the record envelopes, whose checksum covers the
// key, the resourceVersion, the UID and the index values (format version
// 2): that is enough to answer ListKeys and Len, and to build the index
// sets, at once. Payloads are decoded on first access (GetByKey) and by a
// background fill that the indexer owns (started by Open, stopped by
// Close), which also checks every loaded item's index values against the
// index functions (verify.go); List and the index reads wait for the
// fill. A key's item stays lazy exactly as long as memory has not changed
// it since the load, so the file still holds the loaded record for it: a
// decode may read the file at any time and install its result if the key
// is still lazy then.
//
// Bounded mode keeps no decoded object, but its loaded index values need
// the same check: the same fill walks its loaded keys, decoding one chunk
// at a time, checks them and drops the objects.

// fillChunk is how many keys one fill step decodes between two takings of
// the write lock.
const fillChunk = 1024

// checkChunk is fillChunk for a Bounded indexer, whose fill only checks
// index values: the decoded objects it holds at once (a quarter of
// DefaultCacheSize).
const checkChunk = 256

// beforeFill, when set (by tests), runs at the start of the background
// fill, which waits for it.
var beforeFill func(ctx context.Context)

// startFill starts the background fill (or, in Bounded mode, the check of
// the loaded index values); Close stops it.
func (x *Indexer) startFill() {
	ctx, cancel := context.WithCancel(context.Background())
	x.fillStop, x.fillExited = cancel, make(chan struct{})
	hook := beforeFill
	go func() {
		defer close(x.fillExited)
		if hook != nil {
			hook(ctx)
		}
		if err := x.fillWith(ctx, true, nil); err != nil && !errors.Is(err, context.Canceled) {
			x.logger.Error(err, "Background decoding of the loaded objects stopped")
		}
	}()
}

// stopFill stops the background fill and waits for it.
func (x *Indexer) stopFill() {
	if x.fillStop != nil {
		x.fillStop()
		<-x.fillExited
	}
}

// Decoded returns a channel closed once every object loaded from the file
// is decoded in memory (at once for Bounded mode and cold starts, where
// there is nothing to decode).
func (x *Indexer) Decoded() <-chan struct{} { return x.decoded }

// fill decodes every unchecked key (in Full mode, the lazy ones), in
// chunks, with one worker per CPU, checks its index values, and in Full
// mode installs its object. It is run by the background goroutine and by
// callers that need every object or every index value (List, the index
// reads, AddIndexers); fillMu makes them take turns, so no chunk is
// decoded twice. In Bounded mode at most one chunk of objects is held.
func (x *Indexer) fill(ctx context.Context) error { return x.fillWith(ctx, false, nil) }

// fillWith is fill. The background goroutine (background) stops early,
// leaving the rest to InitialList, when a Bounded InitialList asks for the
// pass (handoff). collect, when set, is given each chunk's checked keys
// and their decoded objects, once the chunk is installed, without the lock
// (Bounded mode; Full mode installs them anyway).
func (x *Indexer) fillWith(ctx context.Context, background bool, collect func(keys []string, objs []any)) error {
	x.fillMu.Lock()
	defer x.fillMu.Unlock()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if background && x.handoff.Load() {
			return nil
		}
		// The next chunk of keys still unchecked, in file order, and the
		// index functions to check them with.
		x.mu.Lock()
		from := x.fillPos
		idx := x.idx
		chunk := fillChunk
		if x.bounded {
			chunk = checkChunk
		}
		keys := make([]string, 0, min(chunk, x.uncheckedN))
		for ; x.fillPos < len(x.loadKeys) && len(keys) < chunk; x.fillPos++ {
			k := x.loadKeys[x.fillPos]
			if it := x.items[k]; it != nil && it.unchecked {
				keys = append(keys, k)
			}
		}
		x.mu.Unlock()
		if len(keys) == 0 {
			return nil
		}
		objs, errs, err := x.decodeKeys(keys)
		if err != nil {
			// The file, not a record: nothing is installed, and the next
			// fill starts over at this chunk.
			x.mu.Lock()
			x.fillPos = from
			x.mu.Unlock()
			return err
		}
		vals, verrs := computeAll(idx, keys, objs, errs)
		x.mu.Lock()
		if idx != x.idx {
			vals = nil // AddIndexers meanwhile: computed again
		}
		bad, healed := x.installLocked(keys, objs, errs, vals, verrs)
		var got []string
		var gotObjs []any
		if collect != nil {
			for i, k := range keys {
				if errs[i] == nil && x.items[k] != nil {
					got, gotObjs = append(got, k), append(gotObjs, objs[i])
				}
			}
		}
		x.mu.Unlock()
		x.afterInstall(bad, healed)
		if len(got) > 0 {
			collect(got, gotObjs)
		}
	}
}

// afterInstall reports new undecodable objects and wakes the committer
// for the records queued for rewriting, outside the lock.
func (x *Indexer) afterInstall(bad, healed int) {
	x.reportUndecodable(bad)
	if healed > 0 && x.committer != nil {
		x.committer.Notify(healed)
	}
}

// reportUndecodable tells Options.OnUndecodable about n new undecodable
// objects.
func (x *Indexer) reportUndecodable(n int) {
	if n > 0 && x.onUndecodable != nil {
		x.onUndecodable(n)
	}
}

// decodeKeys reads and decodes keys from the file, in parallel when there
// are many: errs[i] is key i's own error (its record is absent or does not
// decode); err is the file's (a read transaction that failed, or a closed
// DB), and then objs and errs mean nothing. The caller may hold mu
// (shared) or not. Each worker reads its share in key order with one
// cursor (store.Reader) and decodes the payloads where bbolt maps them,
// within its read transaction: the decoders copy what they keep.
func (x *Indexer) decodeKeys(keys []string) (objs []runtime.Object, errs []error, err error) {
	objs = make([]runtime.Object, len(keys))
	errs = make([]error, len(keys))
	order := keyOrder(keys)
	// The workers take runs of decodeRun keys in turn, so that none waits
	// long for another (decoding times vary, and the garbage collector
	// takes its share of one worker or another).
	var next atomic.Int64
	decode := func() error {
		return x.db.View(func(tx *store.Tx) error {
			rd := tx.Reader(x.name)
			for {
				from := int(next.Add(decodeRun)) - decodeRun
				if from >= len(keys) {
					return nil
				}
				for j := from; j < min(from+decodeRun, len(keys)); j++ {
					i := j
					if order != nil {
						i = order[j]
					}
					objs[i], errs[i] = x.decodeRecord(keys[i], rd.Get(keys[i]))
				}
			}
		})
	}
	workers := min(decodeWorkers(), max(1, len(keys)/64))
	if workers == 1 {
		return objs, errs, decode()
	}
	var wg sync.WaitGroup
	werrs := make([]error, workers)
	for w := range workers {
		wg.Go(func() { werrs[w] = decode() })
	}
	wg.Wait()
	return objs, errs, errors.Join(werrs...)
}

// decodeRun is how many keys a decoding worker takes at a time.
const decodeRun = 32

// keyOrder returns the positions of keys in ascending key order, or nil
// when they are in that order already.
func keyOrder(keys []string) []int {
	if slices.IsSorted(keys) {
		return nil
	}
	order := make([]int, len(keys))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(keys[a], keys[b]) })
	return order
}

// installLocked checks the index values of the keys that are still
// unchecked against their decoded objects (verify.go) and, in Full mode,
// moves the objects into memory. vals and verrs are the current index
// functions' values for the objects, computed by the caller (computeAll),
// or nil to compute them here. A key whose record does not decode leaves
// the lazy set (Full mode) for the undecodable one (both modes: reads
// report it, List leaves it out) until a mutation replaces or deletes it;
// its loaded index values stay, as they cannot be checked. It returns how
// many became undecodable and how many had stale index values (queued for
// rewriting). The caller holds mu.
func (x *Indexer) installLocked(keys []string, objs []runtime.Object, errs []error, vals [][][]string, verrs []error) (bad, healed int) {
	for i, k := range keys {
		it := x.items[k]
		if it == nil || !it.unchecked {
			continue // changed meanwhile: memory has the newer state
		}
		if it.lazy {
			x.clearLazyLocked(it)
		}
		if errs[i] == nil && !x.bounded {
			errs[i] = x.matchLoaded(k, it, objs[i])
		}
		if errs[i] != nil {
			x.checkedLocked(it)
			if _, known := x.undecodable[k]; known {
				continue // a Bounded read found it first
			}
			x.undecodable[k] = errs[i]
			if bad++; bad == 1 {
				x.logger.Error(errs[i], "Object in the cache file does not decode: it is left out until the server sends it again", "key", k)
			}
			continue
		}
		var v [][]string
		var verr error
		if vals != nil {
			v, verr = vals[i], verrs[i]
		} else {
			v, verr = x.idx.compute(k, objs[i])
		}
		if x.checkValuesLocked(k, it, v, verr) {
			healed++
		}
		x.checkedLocked(it)
		if !x.bounded {
			x.objs[k] = objs[i]
			if x.feed != nil {
				x.feed.add(objs[i])
			}
		}
	}
	if bad > 1 {
		x.logger.Error(nil, "More objects in the cache file do not decode", "count", bad-1)
	}
	return bad, healed
}

// matchLoaded checks a lazy key's decoded object against what the load
// read for it: the record must still be the one loaded (an envelope
// snapshot that did not describe the file would show here).
func (x *Indexer) matchLoaded(key string, it *item, obj runtime.Object) error {
	rv, uid, ok := objectRV(obj)
	if !ok || rv != it.rv || uid != it.uid {
		return fmt.Errorf("indexer %q: %w: record %q holds resourceVersion %q uid %q, the load read %q and %q", x.name, store.ErrCorrupt, key, rv, uid, it.rv, it.uid)
	}
	return nil
}

// installAfter installs decoded objects once the caller has released its
// shared lock.
func (x *Indexer) installAfter(keys []string, objs []runtime.Object, errs []error) {
	x.mu.Lock()
	bad, healed := x.installLocked(keys, objs, errs, nil, nil)
	x.mu.Unlock()
	x.afterInstall(bad, healed)
}

// undecodableError is what reads of an undecodable key return.
func (x *Indexer) undecodableError(key string, err error) error {
	return fmt.Errorf("indexer %q: key %q: %w", x.name, key, err)
}

// Undecodable returns how many records of the file were found damaged or
// not to decode (left out of List until the server sends them again).
func (x *Indexer) Undecodable() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.undecodable)
}

// UndecodableKeys returns the keys Undecodable counts, sorted.
func (x *Indexer) UndecodableKeys() []string {
	x.mu.RLock()
	keys := make([]string, 0, len(x.undecodable))
	for k := range x.undecodable {
		keys = append(keys, k)
	}
	x.mu.RUnlock()
	sort.Strings(keys)
	return keys
}

// flushUndecodable tells OnUndecodable about the undecodable records
// found under the write lock since it was last called. The caller holds
// no lock.
func (x *Indexer) flushUndecodable() {
	x.mu.Lock()
	n := x.unreported
	x.unreported = 0
	x.mu.Unlock()
	x.reportUndecodable(n)
}

// initialFeed collects, for InitialList, the loaded objects that move into
// memory while it hands them over (Full mode): decoded by the fill or by
// a read, or replaced by a write. objs is guarded by Indexer.mu.
type initialFeed struct {
	objs []any
	wake chan struct{} // holds at most one wake-up
}

// add appends obj and wakes InitialList. The caller holds Indexer.mu.
func (f *initialFeed) add(obj any) {
	f.objs = append(f.objs, obj)
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// InitialList hands every object to emit, like List, in batches as they
// come into memory, so that the caller can pass them on while the rest
// decode: in Full mode the objects decoded already, then each chunk the
// fill (or a read) decodes, as it installs it; in Bounded mode the file's
// objects chunk by chunk, taking the shared lock per chunk. emit runs on
// the caller's goroutine, without the indexer's lock, so writers (the
// informer's bookmark of the disk answer) are not held back meanwhile.
// It is an atomic snapshot only when nothing writes meanwhile: the
// informer uses it for a warm start's initial adds, while it holds the
// watch events back.
//
// In Bounded mode it takes over the check of the loaded index values
// (verify.go) from the background pass, which would otherwise decode
// every object a second time: the objects the check decodes are handed
// over as it checks them, and only those it had checked before are
// decoded again.
func (x *Indexer) InitialList(emit func(objs []any)) {
	if x.bounded {
		x.boundedInitialList(emit)
		return
	}
	x.mu.Lock()
	now := make([]any, 0, len(x.objs))
	for _, obj := range x.objs {
		now = append(now, obj)
	}
	if x.lazyN == 0 {
		x.mu.Unlock()
		if len(now) > 0 {
			emit(now)
		}
		return
	}
	feed := &initialFeed{wake: make(chan struct{}, 1)}
	x.feed = feed
	x.mu.Unlock()
	if len(now) > 0 {
		emit(now)
	}
	// Wait for the fill (decoding what is left, or helping the background
	// fill do it); what it installs comes through the feed.
	filled := make(chan struct{})
	go func() {
		defer close(filled)
		x.fillForRead()
	}()
	var lazy []string
	for done := false; !done; {
		select {
		case <-feed.wake:
		case <-filled:
			done = true
		}
		x.mu.Lock()
		batch := feed.objs
		feed.objs = nil
		if done {
			x.feed = nil
			if x.lazyN > 0 {
				// The fill could not read the file: the rest is read
				// here, as List does.
				for k, it := range x.items {
					if it.lazy {
						lazy = append(lazy, k)
					}
				}
			}
		}
		x.mu.Unlock()
		if len(batch) > 0 {
			emit(batch)
		}
	}
	if len(lazy) == 0 {
		return
	}
	sort.Strings(lazy)
	x.mu.RLock()
	rest, objs, errs := x.appendLazyLocked(nil, lazy)
	x.mu.RUnlock()
	if objs != nil {
		x.installAfter(lazy, objs, errs)
	}
	if len(rest) > 0 {
		emit(rest)
	}
}

// boundedInitialList is InitialList in Bounded mode.
func (x *Indexer) boundedInitialList(emit func(objs []any)) {
	var sent map[string]struct{}
	x.mu.RLock()
	unchecked := x.uncheckedN
	x.mu.RUnlock()
	if unchecked > 0 {
		// The check runs on a goroutine of its own, which hands each
		// chunk over: emit is not called holding fillMu.
		sent = make(map[string]struct{}, unchecked)
		type chunk struct {
			keys []string
			objs []any
		}
		chunks := make(chan chunk, 1)
		x.handoff.Store(true)
		go func() {
			defer close(chunks)
			err := x.fillWith(context.Background(), false, func(keys []string, objs []any) { chunks <- chunk{keys, objs} })
			x.handoff.Store(false)
			if err != nil {
				x.logger.Error(err, "Checking the index values loaded from the file")
			}
		}()
		for c := range chunks {
			for _, k := range c.keys {
				sent[k] = struct{}{}
			}
			emit(c.objs)
		}
	}
	keys := x.ListKeys()
	sort.Strings(keys)
	for from := 0; from < len(keys); from += fillChunk {
		chunk := keys[from:min(from+fillChunk, len(keys))]
		var out []any
		x.mu.RLock()
		miss := chunk[:0:0]
		for _, k := range chunk {
			if x.items[k] == nil {
				continue
			}
			if _, ok := sent[k]; ok {
				continue
			}
			if obj, ok := x.memoryLocked(k); ok {
				out = append(out, obj)
				continue
			}
			miss = append(miss, k)
		}
		objs, bad := x.fetchManyLocked(miss)
		x.mu.RUnlock()
		x.markUndecodable(bad)
		if out = append(out, objs...); len(out) > 0 {
			emit(out)
		}
	}
}
