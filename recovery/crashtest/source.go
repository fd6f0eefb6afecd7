package crashtest

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"syscall"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// ErrOutage is what every call returns while the Source is down. It wraps
// syscall.ECONNREFUSED, as the dial to a stopped kube-apiserver does, so
// that client-go's Reflector treats it the same way: it retries a failed
// watch from its resourceVersion instead of relisting.
var ErrOutage = fmt.Errorf("crashtest: simulated outage: %w", syscall.ECONNREFUSED)

// Event is one change in a Source's history.
type Event struct {
	RV     int64
	Type   watch.EventType
	Key    string
	Object runtime.Object // the object after the change (before, for Deleted)
}

// Calls counts the requests a Source has served.
type Calls struct {
	Lists, ListPages, Watches, Errors int
	// MetadataLists counts ListMetadata calls that were served; Gets
	// counts GetAt calls that were served.
	MetadataLists, Gets int
	// WatchRVs are the resourceVersions watches started from, in order.
	WatchRVs []string
	// Log is every request in order: "LIST rv=...", "WATCH rv=...".
	Log []string
}

// Source is a fake API server for one resource. Its methods are safe for
// concurrent use. Mutations assign increasing resourceVersions.
type Source struct {
	newList func() runtime.Object

	// mu guards everything below. Lock order: mu before a watcher's mu.
	mu        sync.Mutex
	rv        int64
	objects   map[string]runtime.Object
	history   []Event // every event, oldest first
	compacted int64   // watches from below this get 410
	down      bool
	watchers  map[*fakeWatcher]struct{}
	snapshots map[string][]runtime.Object // list pagination, by continue token
	calls     Calls
	pageLimit int64
	base      map[string]runtime.Object // the state at baseRV (NewSourceAt)
	baseRV    int64
}

var (
	_ cache.ListerWatcher            = (*Source)(nil)
	_ cache.ListerWatcherWithContext = (*Source)(nil)
)

// NewSource returns an empty Source; newList makes an empty list of the
// resource (e.g. func() runtime.Object { return &corev1.PodList{} }).
func NewSource(newList func() runtime.Object) *Source {
	return &Source{
		newList:   newList,
		objects:   map[string]runtime.Object{},
		watchers:  map[*fakeWatcher]struct{}{},
		snapshots: map[string][]runtime.Object{},
	}
}

// NewSourceAt returns a Source that has been running since resourceVersion
// rv: it holds objects (their resourceVersions are kept as given) as its
// state at rv, its history starts after rv, and a watch from before rv
// gets 410 Expired, as if compacted there. Mutations continue from rv+1.
func NewSourceAt(newList func() runtime.Object, rv int64, objects []runtime.Object) *Source {
	s := NewSource(newList)
	s.rv, s.compacted, s.baseRV = rv, rv, rv
	s.base = make(map[string]runtime.Object, len(objects))
	for _, o := range objects {
		c := o.DeepCopyObject()
		s.objects[keyOf(c)] = c
		s.base[keyOf(c)] = c
	}
	return s
}

// IsWatchListSemanticsUnSupported tells client-go's Reflector to LIST (a
// Source has no WatchList).
func (s *Source) IsWatchListSemanticsUnSupported() bool { return true }

// ResourceVersion returns the current resourceVersion.
func (s *Source) ResourceVersion() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strconv.FormatInt(s.rv, 10)
}

// SetMaxPageSize caps list pages (0: the client's limit only).
func (s *Source) SetMaxPageSize(n int64) {
	s.mu.Lock()
	s.pageLimit = n
	s.mu.Unlock()
}

// Calls returns the requests served so far.
func (s *Source) Calls() Calls {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.calls
	c.WatchRVs = append([]string(nil), c.WatchRVs...)
	c.Log = append([]string(nil), c.Log...)
	return c
}

// ResetCalls zeroes the counters.
func (s *Source) ResetCalls() {
	s.mu.Lock()
	s.calls = Calls{}
	s.mu.Unlock()
}

// SetDown starts (true) or ends (false) an outage; starting one also ends
// every open watch.
func (s *Source) SetDown(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = down
	if down {
		for w := range s.watchers {
			w.stopLocked()
			delete(s.watchers, w)
		}
	}
}

func keyOf(obj runtime.Object) string {
	k, err := cache.MetaNamespaceKeyFunc(obj)
	if err != nil {
		panic(fmt.Sprintf("crashtest: object without metadata: %v", err))
	}
	return k
}

// Create adds obj (its resourceVersion is set; obj is not retained: a
// copy is). It returns the stored copy.
func (s *Source) Create(obj runtime.Object) (runtime.Object, error) {
	return s.put(obj, watch.Added)
}

// Update replaces obj's stored object.
func (s *Source) Update(obj runtime.Object) (runtime.Object, error) {
	return s.put(obj, watch.Modified)
}

// Upsert creates or updates obj.
func (s *Source) Upsert(obj runtime.Object) (runtime.Object, error) {
	s.mu.Lock()
	_, exists := s.objects[keyOf(obj)]
	s.mu.Unlock()
	if exists {
		return s.Update(obj)
	}
	return s.Create(obj)
}

func (s *Source) put(obj runtime.Object, typ watch.EventType) (runtime.Object, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := keyOf(obj)
	_, exists := s.objects[key]
	if typ == watch.Added && exists {
		return nil, apierrors.NewAlreadyExists(schema.GroupResource{}, key)
	}
	if typ == watch.Modified && !exists {
		return nil, apierrors.NewNotFound(schema.GroupResource{}, key)
	}
	s.rv++
	c := obj.DeepCopyObject()
	m, _ := meta.Accessor(c)
	m.SetResourceVersion(strconv.FormatInt(s.rv, 10))
	if m.GetUID() == "" {
		m.SetUID(typesUID(key, s.rv))
	}
	s.objects[key] = c
	s.emitLocked(Event{RV: s.rv, Type: typ, Key: key, Object: c})
	return c, nil
}

// Apply makes the change e describes (Added: Create, Modified: Update,
// Deleted: Delete of e.Key), checking that it gets resourceVersion e.RV:
// it replays a History's event into the Source.
func (s *Source) Apply(e Event) error {
	if cur, _ := strconv.ParseInt(s.ResourceVersion(), 10, 64); cur+1 != e.RV {
		return fmt.Errorf("crashtest: event %d applied at resourceVersion %d", e.RV, cur)
	}
	var err error
	switch e.Type {
	case watch.Added:
		_, err = s.Create(e.Object)
	case watch.Modified:
		_, err = s.Update(e.Object)
	case watch.Deleted:
		err = s.Delete(e.Key)
	default:
		err = fmt.Errorf("crashtest: cannot apply a %s event", e.Type)
	}
	return err
}

// Delete removes the object with key (namespace/name).
func (s *Source) Delete(key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.objects[key]
	if !ok {
		return apierrors.NewNotFound(schema.GroupResource{}, key)
	}
	s.rv++
	c := old.DeepCopyObject()
	m, _ := meta.Accessor(c)
	m.SetResourceVersion(strconv.FormatInt(s.rv, 10))
	delete(s.objects, key)
	s.emitLocked(Event{RV: s.rv, Type: watch.Deleted, Key: key, Object: c})
	return nil
}

// Bookmark sends a BOOKMARK at the current resourceVersion to every watch
// that asked for bookmarks.
func (s *Source) Bookmark() {
	s.mu.Lock()
	defer s.mu.Unlock()
	obj := s.bookmarkObjectLocked()
	if obj == nil {
		return
	}
	for w := range s.watchers {
		if w.bookmarks {
			w.send(watch.Event{Type: watch.Bookmark, Object: obj})
		}
	}
}

func (s *Source) bookmarkObjectLocked() runtime.Object {
	// A bookmark carries only the resourceVersion, on an object of the
	// resource's type.
	var proto runtime.Object
	for _, o := range s.objects {
		proto = o
		break
	}
	if proto == nil {
		if n := len(s.history); n > 0 {
			proto = s.history[n-1].Object
		}
	}
	if proto == nil {
		return nil
	}
	b := proto.DeepCopyObject()
	m, _ := meta.Accessor(b)
	m.SetResourceVersion(strconv.FormatInt(s.rv, 10))
	m.SetName("")
	m.SetNamespace("")
	return b
}

// Compact drops the history up to the current resourceVersion: a watch
// from an older resourceVersion gets 410 Expired.
func (s *Source) Compact() {
	s.mu.Lock()
	s.compacted = s.rv
	s.mu.Unlock()
}

func (s *Source) emitLocked(e Event) {
	s.history = append(s.history, e)
	for w := range s.watchers {
		w.send(watch.Event{Type: e.Type, Object: e.Object})
	}
}

// StateAt returns the objects as of resourceVersion rv, by key. For a
// Source made by NewSourceAt, the state before its base resourceVersion is
// unknown: StateAt returns nil for it.
func (s *Source) StateAt(rv int64) map[string]runtime.Object {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rv < s.baseRV {
		return nil
	}
	out := make(map[string]runtime.Object, len(s.base))
	for k, v := range s.base {
		out[k] = v
	}
	for _, e := range s.history {
		if e.RV > rv {
			break
		}
		if e.Type == watch.Deleted {
			delete(out, e.Key)
		} else {
			out[e.Key] = e.Object
		}
	}
	return out
}

// History returns the events so far.
func (s *Source) History() []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Event(nil), s.history...)
}

// Objects returns the current objects, by key.
func (s *Source) Objects() map[string]runtime.Object {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]runtime.Object, len(s.objects))
	for k, v := range s.objects {
		out[k] = v
	}
	return out
}

// List implements cache.Lister.
func (s *Source) List(options metav1.ListOptions) (runtime.Object, error) {
	return s.ListWithContext(context.Background(), options)
}

// ListWithContext serves a (paginated) list as of now. Every
// resourceVersion semantics is served from the current state, which is
// "not older than" any resourceVersion the Source issued.
func (s *Source) ListWithContext(_ context.Context, options metav1.ListOptions) (runtime.Object, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls.Log = append(s.calls.Log, fmt.Sprintf("LIST rv=%s continue=%t", options.ResourceVersion, options.Continue != ""))
	if s.down {
		s.calls.Errors++
		return nil, ErrOutage
	}
	if options.ResourceVersion != "" && options.ResourceVersion != "0" && options.Continue == "" {
		if rv, err := strconv.ParseInt(options.ResourceVersion, 10, 64); err != nil || rv > s.rv {
			s.calls.Errors++
			return nil, tooLarge(options.ResourceVersion, s.rv)
		}
	}
	var items []runtime.Object
	listRV := s.rv
	if options.Continue != "" {
		snap, ok := s.snapshots[options.Continue]
		if !ok {
			s.calls.Errors++
			return nil, apierrors.NewResourceExpired("crashtest: continue token expired")
		}
		delete(s.snapshots, options.Continue)
		items = snap
		rv, _ := strconv.ParseInt(continueRV(options.Continue), 10, 64)
		listRV = rv
	} else {
		s.calls.Lists++
		keys := make([]string, 0, len(s.objects))
		for k := range s.objects {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		items = make([]runtime.Object, len(keys))
		for i, k := range keys {
			items[i] = s.objects[k]
		}
	}
	s.calls.ListPages++
	limit := options.Limit
	if s.pageLimit > 0 && (limit == 0 || limit > s.pageLimit) {
		limit = s.pageLimit
	}
	list := s.newList()
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return nil, err
	}
	lm.SetResourceVersion(strconv.FormatInt(listRV, 10))
	if limit > 0 && int64(len(items)) > limit {
		token := fmt.Sprintf("%d:%d", listRV, len(s.snapshots)+len(s.calls.Log))
		s.snapshots[token] = items[limit:]
		items = items[:limit]
		lm.SetContinue(token)
	}
	if err := meta.SetList(list, items); err != nil {
		return nil, err
	}
	return list, nil
}

// ListMetadata serves a metadata-only list of the current state (what
// k8s.io/client-go/metadata lists from a kube-apiserver): every object's
// metadata, at the current resourceVersion. It makes a Source a
// boltinformer MetadataLister. Options other than the resourceVersion
// check are ignored (one page).
func (s *Source) ListMetadata(_ context.Context, options metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls.Log = append(s.calls.Log, "LIST-METADATA rv="+options.ResourceVersion)
	if s.down {
		s.calls.Errors++
		return nil, ErrOutage
	}
	if options.ResourceVersion != "" && options.ResourceVersion != "0" {
		if rv, err := strconv.ParseInt(options.ResourceVersion, 10, 64); err != nil || rv > s.rv {
			s.calls.Errors++
			return nil, tooLarge(options.ResourceVersion, s.rv)
		}
	}
	s.calls.MetadataLists++
	keys := make([]string, 0, len(s.objects))
	for k := range s.objects {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := &metav1.PartialObjectMetadataList{ListMeta: metav1.ListMeta{ResourceVersion: strconv.FormatInt(s.rv, 10)}}
	out.Items = make([]metav1.PartialObjectMetadata, len(keys))
	for i, k := range keys {
		m, err := meta.Accessor(s.objects[k])
		if err != nil {
			return nil, err
		}
		out.Items[i].ObjectMeta = metav1.ObjectMeta{Namespace: m.GetNamespace(), Name: m.GetName(), UID: m.GetUID(),
			ResourceVersion: m.GetResourceVersion(), Labels: m.GetLabels()}
	}
	return out, nil
}

// GetAt reads one object as it was at resourceVersion rv (what a
// kube-apiserver serves for a LIST with a metadata.name field selector and
// resourceVersionMatch=Exact): NotFound if it did not exist then, 410
// Expired if rv is compacted or before the Source's base, "Too large" if
// rv is in the future. It makes a Source a boltinformer ObjectGetter.
func (s *Source) GetAt(_ context.Context, namespace, name, rv string) (runtime.Object, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls.Log = append(s.calls.Log, fmt.Sprintf("GET-AT %s/%s rv=%s", namespace, name, rv))
	if s.down {
		s.calls.Errors++
		return nil, ErrOutage
	}
	at, err := strconv.ParseInt(rv, 10, 64)
	if err != nil || at > s.rv {
		s.calls.Errors++
		return nil, tooLarge(rv, s.rv)
	}
	if at < s.compacted || at < s.baseRV {
		s.calls.Errors++
		return nil, apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", at, max(s.compacted, s.baseRV)))
	}
	s.calls.Gets++
	key := name
	if namespace != "" {
		key = namespace + "/" + name
	}
	obj, ok := s.base[key]
	for _, e := range s.history {
		if e.RV > at {
			break
		}
		if e.Key != key {
			continue
		}
		obj, ok = e.Object, e.Type != watch.Deleted
	}
	if !ok {
		return nil, apierrors.NewNotFound(schema.GroupResource{}, key)
	}
	return obj.DeepCopyObject(), nil
}

func continueRV(token string) string {
	for i := range token {
		if token[i] == ':' {
			return token[:i]
		}
	}
	return token
}

func tooLarge(asked string, current int64) error {
	err := apierrors.NewTimeoutError(fmt.Sprintf("Too large resource version: %s, current: %d", asked, current), 1)
	err.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: metav1.CauseTypeResourceVersionTooLarge, Message: "Too large resource version"}}
	return err
}

// Watch implements cache.Watcher.
func (s *Source) Watch(options metav1.ListOptions) (watch.Interface, error) {
	return s.WatchWithContext(context.Background(), options)
}

// WatchWithContext starts a watch: from now when the resourceVersion is ""
// or "0", else replaying the history after it; 410 Expired (as an ERROR
// event, like kube-apiserver) when it was compacted.
func (s *Source) WatchWithContext(_ context.Context, options metav1.ListOptions) (watch.Interface, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls.Log = append(s.calls.Log, "WATCH rv="+options.ResourceVersion)
	s.calls.Watches++
	s.calls.WatchRVs = append(s.calls.WatchRVs, options.ResourceVersion)
	if s.down {
		s.calls.Errors++
		return nil, ErrOutage
	}
	w := newFakeWatcher(s, options.AllowWatchBookmarks)
	from := s.rv
	if options.ResourceVersion != "" && options.ResourceVersion != "0" {
		rv, err := strconv.ParseInt(options.ResourceVersion, 10, 64)
		if err != nil || rv > s.rv {
			s.calls.Errors++
			w.stopLocked() // nobody will Stop it: end its goroutine
			return nil, tooLarge(options.ResourceVersion, s.rv)
		}
		if rv < s.compacted {
			s.calls.Errors++
			st := apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", rv, s.compacted)).ErrStatus
			w.send(watch.Event{Type: watch.Error, Object: &st})
			w.closeAfterDrain()
			return w, nil
		}
		from = rv
	}
	for _, e := range s.history {
		if e.RV > from {
			w.send(watch.Event{Type: e.Type, Object: e.Object})
		}
	}
	s.watchers[w] = struct{}{}
	return w, nil
}

// CloseWatches ends every open watch (as a server does on timeout).
func (s *Source) CloseWatches() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for w := range s.watchers {
		w.closeAfterDrain()
		delete(s.watchers, w)
	}
}

func (s *Source) forget(w *fakeWatcher) {
	s.mu.Lock()
	delete(s.watchers, w)
	s.mu.Unlock()
}
