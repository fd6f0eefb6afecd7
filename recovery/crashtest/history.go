package crashtest

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/boltinformer/boltinformer/internal/testobj"
)

// HistoryOptions shape a History. Zero fields take the defaults.
type HistoryOptions struct {
	// Keys is the number of objects (Pod names) the first epoch touches.
	// Default 200.
	Keys int
	// Growth is how many keys each further epoch adds, up to MaxKeys, so
	// that the data, and the file, grow. Defaults Keys/4 and 8*Keys.
	Growth, MaxKeys int
	// Namespaces and Nodes spread the Pods (for namespace and node
	// indexes). Defaults 4 and 8.
	Namespaces, Nodes int
	// DeletePercent of the events delete an existing object (the next
	// touch of its key recreates it, with a new UID). Default 15; negative
	// means none.
	DeletePercent int
	// MaxPadding bounds an annotation of pseudo-random size added to each
	// object (a Pod is about 2 KB of protobuf without it), so that records
	// vary in size and some need overflow pages. Default 2048; negative
	// means none.
	MaxPadding int
	// Object makes the history's objects, for a history of your own kind
	// (a typed struct registered in a scheme, or unstructured) instead of
	// Pods: the version of a key that an event writes (see ObjectSpec). It
	// must be a pure function of the spec, so that every process agrees on
	// every event. The History then sets the object's namespace, name,
	// UID and resourceVersion, and the annotations
	// crashtest.boltinformer.io/event (the event) and .../padding (see
	// MaxPadding); an object without object metadata is a bug of the test,
	// and panics with a message saying so (as the rest of the kit does).
	// Nil: Pods, spread over Nodes (spec.nodeName changes on every
	// update).
	Object func(ObjectSpec) runtime.Object
	// NewList makes an empty list of Object's objects, for History.Source
	// (e.g. &examplev1.WidgetList{}). Nil: an
	// *unstructured.UnstructuredList (with the list kind) for unstructured
	// objects, a *metav1.List for typed ones (which client-go's reflector
	// and boltinformer read; give the typed list to serve the Source over
	// HTTP, see Handler, to a typed client).
	NewList func() runtime.Object
	// NamePrefix starts every object's name: key k is
	// ns-<k mod Namespaces>/<NamePrefix>-<k, 6 digits>. Default "pod"
	// (Pods) or "obj" (Object).
	NamePrefix string
}

// ObjectSpec says which object HistoryOptions.Object makes: the version of
// key Key (namespace Namespace, name Name) that event Event writes, in the
// incarnation that event Created created (a deleted key comes back with a
// new UID).
type ObjectSpec struct {
	// Seed is the history's seed.
	Seed uint64
	// Key is the key's index (0 up to MaxKeys).
	Key int
	// Namespace and Name are the key's.
	Namespace, Name string
	// Event is the event that writes this version: its resourceVersion.
	Event int64
	// Created is the event that created this incarnation.
	Created int64
	// Rand is pseudo-random, a pure function of the seed and Event: vary
	// the object with it (e.g. a field an index reads, so that updates
	// move objects between index values).
	Rand uint64
}

func (o HistoryOptions) withDefaults() HistoryOptions {
	if o.Keys <= 0 {
		o.Keys = 200
	}
	if o.Growth <= 0 {
		o.Growth = max(1, o.Keys/4)
	}
	if o.MaxKeys <= 0 {
		o.MaxKeys = 8 * o.Keys
	}
	o.MaxKeys = max(o.MaxKeys, o.Keys)
	if o.Namespaces <= 0 {
		o.Namespaces = 4
	}
	if o.Nodes <= 0 {
		o.Nodes = 8
	}
	switch {
	case o.DeletePercent == 0:
		o.DeletePercent = 15
	case o.DeletePercent < 0:
		o.DeletePercent = 0
	}
	switch {
	case o.MaxPadding == 0:
		o.MaxPadding = 2048
	case o.MaxPadding < 0:
		o.MaxPadding = 0
	}
	if o.NamePrefix == "" {
		o.NamePrefix = "pod"
		if o.Object != nil {
			o.NamePrefix = "obj"
		}
	}
	return o
}

// History is a deterministic, unbounded history of changes to Pods, or to
// objects of your own kind (HistoryOptions.Object): H(seed).
// Event i (1, 2, ...) has resourceVersion i and is a pure function of the
// seed and i, so two processes that share the seed agree on every event
// and on the state at every resourceVersion without exchanging anything.
// A test's parent process computes the truth (StateAt) for whatever
// resourceVersion it finds in a cache file; each child rebuilds a Source
// (Source method) and appends further events live (Events, Source.Apply).
//
// The history runs in epochs: epoch e touches each of its keys once, in
// an order that is a seeded permutation; epoch e has
// min(Keys+e*Growth, MaxKeys) keys. A touch deletes an existing object
// with probability DeletePercent, else creates or updates it (a Pod's
// node, and so a node index, changes on every update; an Object's content
// is the function's, given a new ObjectSpec.Rand). A History is safe for
// concurrent use.
type History struct {
	seed uint64
	opts HistoryOptions

	// mu guards starts and perms.
	mu     sync.Mutex
	starts []int64          // starts[e] is the first event of epoch e
	perms  map[int][]int32  // permutations of recent epochs
	order  []int            // perms keys, oldest first (a small FIFO cache)
	cached map[int64]*state // StateAt results kept for reuse, by rv
}

// state is the scan's per-key state.
type state struct {
	rv     int64
	exists []bool
	add    []int64 // the event that created the current incarnation
	last   []int64 // the last event that touched the key (0: never)
}

// NewHistory returns the history of seed. A nil opts means the defaults.
func NewHistory(seed uint64, opts *HistoryOptions) *History {
	o := HistoryOptions{}
	if opts != nil {
		o = *opts
	}
	return &History{seed: seed, opts: o.withDefaults(), starts: []int64{1}, perms: map[int][]int32{}, cached: map[int64]*state{}}
}

// Seed returns the history's seed.
func (h *History) Seed() uint64 { return h.seed }

// Options returns the options with the defaults filled in.
func (h *History) Options() HistoryOptions { return h.opts }

func (h *History) keys(e int) int {
	return min(h.opts.Keys+e*h.opts.Growth, h.opts.MaxKeys)
}

// epochOf returns the epoch of event i and its position in the epoch.
func (h *History) epochOf(i int64) (int, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for {
		e := len(h.starts) - 1
		end := h.starts[e] + int64(h.keys(e))
		if i < end {
			break
		}
		h.starts = append(h.starts, end)
	}
	e := sort.Search(len(h.starts), func(e int) bool { return h.starts[e] > i }) - 1
	return e, int(i - h.starts[e])
}

// perm returns epoch e's order of keys.
func (h *History) perm(e int) []int32 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if p, ok := h.perms[e]; ok {
		return p
	}
	n := h.keys(e)
	p := make([]int32, n)
	for i := range p {
		p[i] = int32(i)
	}
	r := rand.New(rand.NewPCG(h.seed, uint64(e)^0x9e3779b97f4a7c15))
	r.Shuffle(n, func(i, j int) { p[i], p[j] = p[j], p[i] })
	h.perms[e] = p
	h.order = append(h.order, e)
	if len(h.order) > 8 {
		delete(h.perms, h.order[0])
		h.order = h.order[1:]
	}
	return p
}

// mix is splitmix64 of the seed, i and a salt: the history's randomness.
func (h *History) mix(i int64, salt uint64) uint64 {
	z := h.seed ^ (uint64(i) * 0xbf58476d1ce4e5b9) ^ (salt * 0x94d049bb133111eb)
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func (h *History) deletes(i int64) bool {
	return int(h.mix(i, 1)%100) < h.opts.DeletePercent
}

// scan walks events 1..to, calling visit (if not nil) for each with the
// key index, the event type and the incarnation's creating event. It
// starts from the nearest cached state at or below from (visit is only
// called for events after from) and caches the state at to.
func (h *History) scan(from, to int64, visit func(i int64, k int, typ watch.EventType, add, prev int64)) *state {
	st := h.nearest(from)
	for i := st.rv + 1; i <= to; {
		e, pos := h.epochOf(i)
		p := h.perm(e)
		if need := h.keys(e); len(st.exists) < need {
			st.exists = append(st.exists, make([]bool, need-len(st.exists))...)
			st.add = append(st.add, make([]int64, need-len(st.add))...)
			st.last = append(st.last, make([]int64, need-len(st.last))...)
		}
		for ; pos < len(p) && i <= to; pos, i = pos+1, i+1 {
			k := int(p[pos])
			prev := st.last[k]
			var typ watch.EventType
			switch {
			case st.exists[k] && h.deletes(i):
				typ = watch.Deleted
				st.exists[k] = false
			case st.exists[k]:
				typ = watch.Modified
			default:
				typ = watch.Added
				st.exists[k] = true
				st.add[k] = i
			}
			st.last[k] = i
			if visit != nil && i > from {
				visit(i, k, typ, st.add[k], prev)
			}
		}
	}
	st.rv = max(st.rv, to)
	h.keep(st)
	return st
}

// nearest returns a copy of the cached state with the highest rv <= rv,
// or the empty state.
func (h *History) nearest(rv int64) *state {
	h.mu.Lock()
	defer h.mu.Unlock()
	var best *state
	for r, st := range h.cached {
		if r <= rv && (best == nil || r > best.rv) {
			best = st
		}
	}
	if best == nil {
		return &state{}
	}
	return &state{
		rv:     best.rv,
		exists: append([]bool(nil), best.exists...),
		add:    append([]int64(nil), best.add...),
		last:   append([]int64(nil), best.last...),
	}
}

func (h *History) keep(st *state) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cached[st.rv] = st
	if len(h.cached) > 16 {
		// Drop the lowest; callers move forward.
		low := int64(-1)
		for r := range h.cached {
			if low < 0 || r < low {
				low = r
			}
		}
		delete(h.cached, low)
	}
}

// Key returns the namespace/name of key index k.
func (h *History) Key(k int) string {
	return h.namespace(k) + "/" + h.name(k)
}

func (h *History) namespace(k int) string { return fmt.Sprintf("ns-%d", k%h.opts.Namespaces) }

func (h *History) name(k int) string { return fmt.Sprintf("%s-%06d", h.opts.NamePrefix, k) }

// object is key k's object as written by event i, an incarnation created
// by event add.
func (h *History) object(k int, i, add int64) runtime.Object {
	uid := types.UID(fmt.Sprintf("%08x-%06d-%d", uint32(h.seed), k, add))
	if h.opts.Object == nil {
		p := testobj.Pod(k, h.opts.Namespaces, h.opts.Nodes, strconv.FormatInt(i, 10))
		p.Name = h.name(k)
		p.UID = uid
		p.Spec.NodeName = fmt.Sprintf("node-%d", h.mix(i, 2)%uint64(h.opts.Nodes))
		h.annotate(p, i)
		return p
	}
	obj := h.opts.Object(ObjectSpec{Seed: h.seed, Key: k, Namespace: h.namespace(k), Name: h.name(k), Event: i, Created: add, Rand: h.mix(i, 2)})
	m, err := meta.Accessor(obj)
	if err != nil {
		panic(fmt.Sprintf("crashtest: HistoryOptions.Object made a %T without object metadata: %v", obj, err))
	}
	m.SetNamespace(h.namespace(k))
	m.SetName(h.name(k))
	m.SetUID(uid)
	m.SetResourceVersion(strconv.FormatInt(i, 10))
	h.annotate(m, i)
	return obj
}

// annotate sets the event and padding annotations of the version event i
// writes.
func (h *History) annotate(m metav1.Object, i int64) {
	a := m.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a["crashtest.boltinformer.io/event"] = strconv.FormatInt(i, 10)
	if h.opts.MaxPadding > 0 {
		n := int(h.mix(i, 3) % uint64(h.opts.MaxPadding+1))
		a["crashtest.boltinformer.io/padding"] = strings.Repeat(string(rune('a'+i%26)), n)
	}
	m.SetAnnotations(a)
}

// newList returns an empty list of the history's objects (see
// HistoryOptions.NewList).
func (h *History) newList() runtime.Object {
	switch {
	case h.opts.NewList != nil:
		return h.opts.NewList()
	case h.opts.Object == nil:
		return &corev1.PodList{}
	}
	if u, ok := h.object(0, 1, 1).(*unstructured.Unstructured); ok {
		l := &unstructured.UnstructuredList{}
		l.SetAPIVersion(u.GetAPIVersion())
		l.SetKind(u.GetKind() + "List")
		return l
	}
	return &metav1.List{}
}

// StateAt returns the objects as of resourceVersion rv (0: none), by key.
// The objects are new on every call.
func (h *History) StateAt(rv int64) map[string]runtime.Object {
	if rv < 0 {
		rv = 0
	}
	st := h.scan(rv, rv, nil)
	out := map[string]runtime.Object{}
	for k, ok := range st.exists {
		if ok {
			out[h.Key(k)] = h.object(k, st.last[k], st.add[k])
		}
	}
	return out
}

// Events returns events from+1 through to, in order.
func (h *History) Events(from, to int64) []Event {
	if to <= from {
		return nil
	}
	out := make([]Event, 0, to-from)
	h.scan(from, to, func(i int64, k int, typ watch.EventType, add, prev int64) {
		var obj runtime.Object
		if typ == watch.Deleted {
			// The object as it was, at the deletion's resourceVersion
			// (what kube-apiserver sends).
			obj = h.object(k, prev, add)
			m, _ := meta.Accessor(obj)
			m.SetResourceVersion(strconv.FormatInt(i, 10))
		} else {
			obj = h.object(k, i, add)
		}
		out = append(out, Event{RV: i, Type: typ, Key: h.Key(k), Object: obj})
	})
	return out
}

// Event returns event i (i >= 1).
func (h *History) Event(i int64) Event { return h.Events(i-1, i)[0] }

// Source returns a Source holding the state as of base, compacted there
// (a watch from before base gets 410 Expired), with events base+1 through
// to in its history: a fake API server that has been running since base.
func (h *History) Source(base, to int64) *Source {
	base = max(base, 0)
	objs := h.StateAt(base)
	list := make([]runtime.Object, 0, len(objs))
	for _, o := range objs {
		list = append(list, o)
	}
	s := NewSourceAt(h.newList, base, list)
	for _, e := range h.Events(base, to) {
		if err := s.Apply(e); err != nil {
			panic(fmt.Sprintf("crashtest: history %d: %v", h.seed, err))
		}
	}
	return s
}
