package localapi

import (
	"fmt"
	"sort"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer"
)

// DefaultWindowEvents is how many recent events each resource keeps for
// watches to resume from (Options.WindowEvents).
const DefaultWindowEvents = 1024

// event is one change in a view's window. Immutable once added, but for
// its lazily filled encodings.
type event struct {
	seq  uint64
	typ  watch.EventType // Added, Modified or Deleted
	key  string
	obj  *item // the object after the change; for Deleted its final state
	prev *item // the object before the change; nil for Added
	rv   string
	// enc caches the object's encodings for watches, by format (with its
	// kind; protobuf in its envelope). They live as long as the event is
	// in the window.
	enc [numFormats]atomic.Pointer[[]byte]
}

// view is one resource's served state, in the manner of the apiserver's
// watch cache: the objects by key (sorted), their resourceVersion, and a
// ring of the most recent events, from which a watch resumes and from
// which a LIST at an older resourceVersion (a continue token) is rebuilt.
// The informer feeds it (apply, under the informer's lock); requests read
// it.
type view struct {
	capacity int

	// mu guards everything below. Lock order: the informer's lock (apply
	// runs under it) before mu; mu is never held while writing to a client.
	//
	// Requests hold mu only for steps bounded by the window's capacity,
	// never for a selection: apply waits for the lock, and Go's RWMutex
	// queues every new reader behind a waiting writer. A LIST or a
	// watch's initial events take a snapshot (keys and items, shared
	// until the next change) and select outside the lock.
	mu   sync.RWMutex
	objs map[string]*item // the current version of each object
	// list holds the current items in key order, copied on write: a
	// snapshot of it costs O(1) and never changes.
	list   keyList
	rv     string
	synced bool
	// ring holds the events with sequence numbers first..next-1 at
	// ring[seq%capacity]. startRV is the resourceVersion of the state
	// before event first: a watch from startRV gets every retained event.
	ring    []*event
	first   uint64
	next    uint64
	startRV string
	// changed is closed (and replaced) on every change, waking watches.
	changed chan struct{}
	// closed ends every watch (the handler was closed).
	closed bool
	// budget bounds the list encodings the current items keep (shared by
	// the handler's views; nil: none kept). Set at creation.
	budget *encBudget
	// refuseSecrets: a core Secret among the objects refuses the whole
	// resource (Options.Secrets is off). Set at creation.
	refuseSecrets bool
	// secrets is why the resource is refused since a Secret arrived, or
	// "". Once set, it stays.
	secrets string
}

// checkSecretLocked refuses the resource from now on when obj is a core
// Secret and Secrets are not served. Caller holds mu for writing.
func (v *view) checkSecretLocked(obj runtime.Object) {
	if v.refuseSecrets && v.secrets == "" && isSecret(obj) {
		v.secrets = "a core Secret arrived in it: " + secretsRefused
	}
}

// refused says why requests of the view's resource are refused (a Secret
// arrived), or "". A nil view is never refused.
func (v *view) refused() string {
	if v == nil {
		return ""
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.secrets
}

// newView returns an empty view whose window holds capacity events and
// whose items keep list encodings within budget (nil: none).
func newView(capacity int, budget *encBudget) *view {
	if capacity <= 0 {
		capacity = DefaultWindowEvents
	}
	// Sequence numbers start at 1: a cursor of 0 is before anything.
	return &view{capacity: capacity, ring: make([]*event, capacity), changed: make(chan struct{}), first: 1, next: 1, objs: map[string]*item{}, budget: budget}
}

// initLocked sets the view's content to st (what Observe returned).
// Caller holds mu (or owns v).
func (v *view) initLocked(st boltinformer.ObservedState) {
	v.resetLocked(st.Objects, st.ResourceVersion)
	v.synced = st.Synced
	v.loadWindowLocked(st.Window)
}

// loadWindowLocked fills the window with the changes the file kept
// (boltinformer.Informer.KeepWindow), the newest the capacity holds, when
// they end at the view's content: the last change of each key is its
// current object (or its absence), at or before the view's
// resourceVersion. Else the window stays empty, and a watch from before
// the content gets 410 as before. Caller holds mu (or owns v), after
// resetLocked.
func (v *view) loadWindowLocked(win []boltinformer.WindowChange) {
	if len(win) == 0 || v.next != v.first {
		return
	}
	if len(win) > v.capacity {
		win = win[len(win)-v.capacity:]
	}
	if c, err := resourceversion.CompareResourceVersion(win[len(win)-1].ResourceVersion, v.rv); err != nil || c > 0 {
		return
	}
	last := map[string]int{}
	for i, w := range win {
		last[w.Key] = i
	}
	for key, i := range last {
		cur, w := v.objs[key], win[i]
		switch {
		case w.Type == boltinformer.ChangeDelete && cur != nil,
			w.Type == boltinformer.ChangeUpsert && (cur == nil || rvOf(cur.obj) != w.ResourceVersion):
			return // the window does not end at the content
		}
	}
	rv := v.rv
	v.startRV = win[0].PrevResourceVersion
	for i, w := range win {
		obj := v.objs[w.Key]
		if w.Type == boltinformer.ChangeDelete || last[w.Key] != i || obj == nil {
			obj = &item{obj: w.Object}
			obj.dead.Store(true) // not the current version: keeps no encoding
		}
		var prev *item
		typ := watch.Added
		if w.Prev != nil {
			prev = &item{obj: w.Prev}
			prev.dead.Store(true)
			typ = watch.Modified
		}
		if w.Type == boltinformer.ChangeDelete {
			typ = watch.Deleted
		}
		v.addLocked(&event{typ: typ, key: w.Key, obj: obj, prev: prev, rv: w.ResourceVersion})
	}
	v.rv = rv // the content's, at or after the last change
}

// resetLocked replaces the objects. Caller holds mu (or owns v).
func (v *view) resetLocked(objs []any, rv string) {
	for _, it := range v.objs {
		it.retire(v.budget)
	}
	v.objs = make(map[string]*item, len(objs))
	keys := make([]string, 0, len(objs))
	for _, o := range objs {
		ro, ok := o.(runtime.Object)
		if !ok {
			continue
		}
		key, err := cache.MetaNamespaceKeyFunc(ro)
		if err != nil {
			continue
		}
		v.checkSecretLocked(ro)
		if old, dup := v.objs[key]; !dup {
			keys = append(keys, key)
		} else {
			old.retire(v.budget)
		}
		v.objs[key] = &item{obj: ro}
	}
	sort.Strings(keys)
	items := make([]*item, len(keys))
	for i, k := range keys {
		items[i] = v.objs[k]
	}
	v.list.reset(keys, items)
	v.rv = rv
	v.startRV = rv
}

// apply is the informer's observer: it records c. It never waits for a
// reader for longer than a step bounded by the window (readers select
// over snapshots, outside mu, and never write to a client under it).
func (v *view) apply(c boltinformer.Change) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed {
		return
	}
	switch c.Type {
	case boltinformer.ChangeUpsert:
		v.checkSecretLocked(c.Object)
		prev := v.objs[c.Key]
		if prev != nil && prev.obj == c.Object {
			return // a resync
		}
		it := &item{obj: c.Object}
		typ := watch.Modified
		if prev == nil {
			typ = watch.Added
		} else {
			// A new version: the old one's encodings are never served
			// as the current state again.
			prev.retire(v.budget)
		}
		v.setLocked(c.Key, it)
		v.addLocked(&event{typ: typ, key: c.Key, obj: it, prev: prev, rv: c.ResourceVersion})
	case boltinformer.ChangeDelete:
		v.checkSecretLocked(c.Object)
		prev, ok := v.objs[c.Key]
		if !ok {
			if c.ResourceVersion != "" {
				v.rv = c.ResourceVersion
			}
			break
		}
		prev.retire(v.budget)
		final := prev
		if c.Object != nil && c.Object != prev.obj {
			final = &item{obj: c.Object}
			final.dead.Store(true) // never current: keeps no encoding
		}
		v.removeLocked(c.Key)
		v.addLocked(&event{typ: watch.Deleted, key: c.Key, obj: final, prev: prev, rv: c.ResourceVersion})
	case boltinformer.ChangeReplace:
		// A relist: the events in between are unknown. Every watch behind
		// it ends with 410 Expired and its client relists, as after an
		// apiserver restart: skip a sequence number so that even a watch
		// that was up to date is behind the new window.
		v.resetLocked(c.Objects, c.ResourceVersion)
		v.synced = true
		clear(v.ring)
		v.next++
		v.first = v.next
	case boltinformer.ChangeBookmark:
		if c.ResourceVersion != "" {
			v.rv = c.ResourceVersion
		}
	}
	v.notifyLocked()
}

// addLocked appends e to the window, dropping the oldest event when full.
func (v *view) addLocked(e *event) {
	if e.rv == "" {
		e.rv = v.rv
	}
	if v.next-v.first == uint64(v.capacity) {
		old := v.ring[v.first%uint64(v.capacity)]
		v.startRV = old.rv
		v.first++
	}
	e.seq = v.next
	v.ring[e.seq%uint64(v.capacity)] = e
	v.next++
	v.rv = e.rv
}

func (v *view) notifyLocked() {
	close(v.changed)
	v.changed = make(chan struct{})
}

// setLocked makes it the current item of key, in objs and list. Caller
// holds mu.
func (v *view) setLocked(key string, it *item) {
	v.list.set(key, it)
	v.objs[key] = it
}

// removeLocked removes key's item. Caller holds mu.
func (v *view) removeLocked(key string) {
	delete(v.objs, key)
	v.list.remove(key)
}

// close ends every watch of the view and stops recording changes.
func (v *view) close() {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.closed {
		v.closed = true
		v.notifyLocked()
	}
}

// position is where a watch from rv starts: the sequence number of the
// first event after rv. Caller holds mu. It returns errTooOld when rv is
// before the window, errTooNew when after the view's resourceVersion.
func (v *view) positionLocked(rv string) (uint64, error) {
	switch rv {
	case v.rv:
		return v.next, nil
	case v.startRV:
		return v.first, nil
	}
	for s := v.first; s < v.next; s++ {
		if v.ring[s%uint64(v.capacity)].rv == rv {
			return s + 1, nil
		}
	}
	if c, err := resourceversion.CompareResourceVersion(rv, v.rv); err != nil {
		return 0, errTooOld // not comparable, and not one we know
	} else if c > 0 {
		return 0, errTooNew
	}
	if c, err := resourceversion.CompareResourceVersion(rv, v.startRV); err != nil || c < 0 {
		return 0, errTooOld
	}
	// Within the window: the first event newer than rv.
	n := int(v.next - v.first)
	i := sort.Search(n, func(i int) bool {
		e := v.ring[(v.first+uint64(i))%uint64(v.capacity)]
		c, err := resourceversion.CompareResourceVersion(e.rv, rv)
		return err != nil || c > 0
	})
	return v.first + uint64(i), nil
}

// newerOrEqual reports whether the view's resourceVersion is at least rv
// (rv not comparable: only when equal). Caller holds mu.
func (v *view) newerOrEqualLocked(rv string) bool {
	if rv == v.rv {
		return true
	}
	c, err := resourceversion.CompareResourceVersion(v.rv, rv)
	return err == nil && c >= 0
}

// eventsLocked appends to dst the events from seq on, at most max. Caller
// holds mu; the events stay valid after it is released.
func (v *view) eventsLocked(dst []*event, seq uint64, max int) []*event {
	for s := seq; s < v.next && len(dst) < max; s++ {
		dst = append(dst, v.ring[s%uint64(v.capacity)])
	}
	return dst
}

// pastLocked returns, for the state at the position seq (the events from
// seq on not yet applied), the objects that differ from the current ones:
// each key touched since, with its object then (nil: it did not exist).
// Caller holds mu; seq must be within the window.
func (v *view) pastLocked(seq uint64) map[string]*item {
	past := map[string]*item{}
	for s := seq; s < v.next; s++ {
		e := v.ring[s%uint64(v.capacity)]
		if _, seen := past[e.key]; !seen {
			past[e.key] = e.prev
		}
	}
	return past
}

// snapshot is the view's objects at one position, read without the
// view's lock: the chunks of the current state (never changed after), and,
// for a past position, the objects that differed then.
type snapshot struct {
	chunks []*chunk
	// past maps each key changed since the position to its item then
	// (nil: it did not exist); nil for the current position.
	past map[string]*item
	// touched are past's keys, sorted.
	touched []string
}

// snapshotLocked returns the objects as of the position seq (v.next: now;
// otherwise within the window). It costs at most the window's events,
// never the number of objects. Caller holds mu.
func (v *view) snapshotLocked(seq uint64) *snapshot {
	s := &snapshot{chunks: v.list.snapshot()}
	if seq < v.next {
		s.past = v.pastLocked(seq)
		s.touched = make([]string, 0, len(s.past))
		for k := range s.past {
			s.touched = append(s.touched, k)
		}
		sort.Strings(s.touched)
	}
	return s
}

// walk calls fn, in key order, for each object after the key start (all
// when start is "") and with the key prefix (all when ""), until fn
// returns false.
func (s *snapshot) walk(start, prefix string, fn func(key string, it *item) bool) {
	from := start
	if prefix > from {
		from = prefix
	}
	ci, i := seek(s.chunks, from)
	if ci < len(s.chunks) && s.chunks[ci].keys[i] == start {
		i++
	}
	j := sort.SearchStrings(s.touched, from)
	if j < len(s.touched) && s.touched[j] == start {
		j++
	}
	for {
		if ci < len(s.chunks) && i == len(s.chunks[ci].keys) {
			ci, i = ci+1, 0
			continue
		}
		more := ci < len(s.chunks)
		if !more && j >= len(s.touched) {
			return
		}
		var key string
		var cur *item // the key's current item, if any
		switch {
		case j >= len(s.touched) || (more && s.chunks[ci].keys[i] < s.touched[j]):
			key, cur = s.chunks[ci].keys[i], s.chunks[ci].items[i]
			i++
		case !more || s.touched[j] < s.chunks[ci].keys[i]:
			key = s.touched[j]
			j++
		default: // the same key in both
			key, cur = s.chunks[ci].keys[i], s.chunks[ci].items[i]
			i++
			j++
		}
		if prefix != "" && !hasPrefix(key, prefix) {
			// Both lists are sorted and start at the prefix: past its
			// range.
			return
		}
		it, ok := s.past[key]
		if !ok {
			it = cur
		}
		if it == nil {
			continue
		}
		if !fn(key, it) {
			return
		}
	}
}

func hasPrefix(s, prefix string) bool { return len(s) >= len(prefix) && s[:len(prefix)] == prefix }

// rvOf returns obj's resourceVersion.
func rvOf(obj runtime.Object) string {
	m, err := meta.Accessor(obj)
	if err != nil {
		return ""
	}
	return m.GetResourceVersion()
}

// getLocked returns the object of key at the position seq (v.next: now),
// or nil. Caller holds mu.
func (v *view) getLocked(seq uint64, key string) *item {
	for s := seq; s < v.next; s++ {
		if e := v.ring[s%uint64(v.capacity)]; e.key == key {
			return e.prev
		}
	}
	return v.objs[key]
}

// countAfter counts the keys after key that have the prefix, in a
// snapshot of the current position.
func (s *snapshot) countAfter(key, prefix string) int {
	ci, i := seek(s.chunks, max(key, prefix))
	if ci < len(s.chunks) && s.chunks[ci].keys[i] == key {
		i++
	}
	cj, j := len(s.chunks), 0
	if prefix != "" {
		// The first key past every key with the prefix: the prefix with
		// its last byte incremented ("ns/" -> "ns0").
		next := []byte(prefix)
		next[len(next)-1]++
		cj, j = seek(s.chunks, string(next))
	}
	return between(s.chunks, ci, i, cj, j)
}

// checkRV refuses a resourceVersion that is not a well-formed one while
// the view's are (a client's garbage, not an opaque version of another
// server): a BadRequest, as in the apiserver.
func (v *view) checkRV(rv string) error {
	if rv == "" || rv == "0" || wellFormed(rv) {
		return nil
	}
	v.mu.RLock()
	current := v.rv
	v.mu.RUnlock()
	if wellFormed(current) {
		return badRequest(fmt.Sprintf("invalid resource version: %q", rv))
	}
	return nil
}

func wellFormed(rv string) bool {
	_, err := resourceversion.CompareResourceVersion(rv, rv)
	return err == nil
}
