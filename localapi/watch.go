package localapi

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"reflect"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// initialEventsEnd is the annotation of the bookmark that ends the
// initial events of a watch with sendInitialEvents (metav1.InitialEventsAnnotationKey).
const initialEventsEnd = metav1.InitialEventsAnnotationKey

// watchBatch is how many events a watch takes from the window per lock.
const watchBatch = 256

// watchStream writes one watch's events.
type watchStream struct {
	h        *Handler
	w        http.ResponseWriter
	rc       *http.ResponseController
	sv       *served
	out      output
	opts     *listOptions
	sel      *selector
	prefix   string // "ns/" of a namespaced watch, or ""
	headers  bool   // a Table's column definitions are still to be sent
	buf, tmp bytes.Buffer
	sentRV   string // the resourceVersion of the last event or bookmark sent
}

// serveWatch answers a WATCH: the initial events when asked (no
// resourceVersion, "0", or sendInitialEvents), then every event of the
// window after the starting point, filtered by namespace and selectors
// (an object that stops matching is DELETED, one that starts is ADDED), and
// bookmarks when allowed. A starting point before the window gets an
// ERROR event with 410 Expired, as does a watch that falls out of the
// window while its client is slow to read; one after the cache's
// resourceVersion waits for it, then gets "Too large resource version".
func (h *Handler) serveWatch(w http.ResponseWriter, r *http.Request, sv *served, namespace string, opts *listOptions, sel *selector, out output) {
	// timeoutSeconds=0 is none given, as in the apiserver: its default.
	timeout := time.Duration(30+rand.IntN(30)) * time.Minute
	if opts.TimeoutSeconds != nil && *opts.TimeoutSeconds != 0 {
		timeout = time.Duration(*opts.TimeoutSeconds) * time.Second
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	stopOnClose := context.AfterFunc(h.ctx, cancel)
	defer stopOnClose()

	s := &watchStream{h: h, w: w, rc: http.NewResponseController(w), sv: sv, out: out, opts: opts, sel: sel, headers: true}
	if namespace != "" {
		s.prefix = namespace + "/"
	}
	v := sv.view
	sendInitial := opts.SendInitialEvents != nil && *opts.SendInitialEvents
	initial := sendInitial || (opts.SendInitialEvents == nil && (opts.ResourceVersion == "" || opts.ResourceVersion == "0"))
	var startErr error
	if sendInitial || !initial {
		startErr = h.waitFor(ctx, v, opts.ResourceVersion)
	}
	var objs []runtime.Object
	var cursor uint64
	var rv string
	var snap *snapshot
	if startErr == nil {
		// Under the lock: the position and, for the initial events, a
		// snapshot of it; they are selected after, without it.
		v.mu.RLock()
		if v.secrets != "" {
			startErr = sv.forbidden("", v.secrets)
		} else if initial {
			snap = v.snapshotLocked(v.next)
			cursor, rv = v.next, v.rv
		} else {
			cursor, startErr = v.positionLocked(opts.ResourceVersion)
			rv = opts.ResourceVersion
			if startErr == errTooOld {
				startErr = expired(opts.ResourceVersion, v.startRV)
			} else if startErr == errTooNew {
				startErr = tooLarge(opts.ResourceVersion, v.rv)
			}
		}
		v.mu.RUnlock()
	}
	if snap != nil {
		n := 0
		snap.walk("", s.prefix, func(_ string, it *item) bool {
			if n++; n%cancelCheckEvery == 0 && ctx.Err() != nil {
				return false // the client is gone, or the watch timed out
			}
			h.selecting()
			if sel.matches(it.obj) {
				objs = append(objs, it.obj)
			}
			return true
		})
		if ctx.Err() != nil {
			return // no partial initial events: the stream just ends
		}
	}

	ct := out.format.mediaType()
	if out.format == formatProtobuf {
		ct += ";stream=watch"
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	if startErr != nil {
		_ = s.sendError(startErr)
		return
	}
	for _, obj := range objs {
		if err := s.send(string(watch.Added), obj, nil); err != nil {
			return
		}
	}
	if sendInitial {
		if err := s.sendBookmark(rv, true); err != nil {
			return
		}
	}
	s.sentRV = rv
	if err := s.flush(); err != nil {
		return
	}
	s.stream(ctx, cursor)
}

// stream follows the window from cursor until ctx is done, the client
// goes away, the view closes or the watch falls out of the window.
func (s *watchStream) stream(ctx context.Context, cursor uint64) {
	v := s.sv.view
	ticker := time.NewTicker(s.h.opts.BookmarkInterval)
	defer ticker.Stop()
	batch := make([]*event, 0, watchBatch)
	for {
		v.mu.RLock()
		closed, secrets := v.closed, v.secrets
		tooOld := cursor < v.first
		oldest := v.startRV
		batch = v.eventsLocked(batch[:0], cursor, watchBatch)
		rv, changed := v.rv, v.changed
		v.mu.RUnlock()
		switch {
		case closed:
			return
		case secrets != "":
			// A Secret arrived: the watch ends before any of its events.
			_ = s.sendError(s.sv.forbidden("", secrets))
			return
		case tooOld:
			_ = s.sendError(expired(s.sentRV, oldest))
			return
		}
		for _, e := range batch {
			cursor = e.seq + 1
			if err := s.sendEvent(e); err != nil {
				return
			}
			s.sentRV = e.rv
		}
		if len(batch) > 0 {
			if err := s.flush(); err != nil {
				return
			}
			continue
		}
		if s.opts.AllowWatchBookmarks && rv != s.sentRV {
			// The informer got a bookmark: pass it on.
			if err := s.sendBookmark(rv, false); err != nil || s.flush() != nil {
				return
			}
			s.sentRV = rv
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-ticker.C:
			if s.opts.AllowWatchBookmarks {
				if err := s.sendBookmark(rv, false); err != nil || s.flush() != nil {
					return
				}
				s.sentRV = rv
			}
		}
	}
}

// sendEvent writes e as this watch sees it: filtered by namespace and
// selectors, a change across the selector's edge as ADDED or DELETED.
func (s *watchStream) sendEvent(e *event) error {
	if s.prefix != "" && !hasPrefix(e.key, s.prefix) {
		return nil
	}
	cur := e.typ != watch.Deleted && s.sel.matches(e.obj.obj)
	old := e.prev != nil && s.sel.matches(e.prev.obj)
	var typ watch.EventType
	switch {
	case e.typ == watch.Deleted:
		if !old {
			return nil
		}
		typ = watch.Deleted
	case cur && old:
		typ = watch.Modified
	case cur:
		typ = watch.Added
	case old:
		typ = watch.Deleted
	default:
		return nil
	}
	return s.send(string(typ), e.obj.obj, e)
}

// send writes one event of obj; e, when not nil, caches the object's
// encoding for every watch of the same format.
func (s *watchStream) send(typ string, obj runtime.Object, e *event) error {
	raw, err := s.encode(obj, e)
	if err != nil {
		return err
	}
	s.buf.Reset()
	if err := encodeWatchEvent(&s.buf, s.out.format, typ, raw); err != nil {
		return err
	}
	_, err = s.w.Write(s.buf.Bytes())
	return err
}

// encode returns obj as the watch's target in its format.
func (s *watchStream) encode(obj runtime.Object, e *event) ([]byte, error) {
	f := s.out.format
	if s.out.target == targetObject && e != nil {
		if b := e.enc[f].Load(); b != nil {
			return *b, nil
		}
	}
	s.tmp.Reset()
	var err error
	switch s.out.target {
	case targetTable:
		err = s.h.encodeTable(&s.tmp, s.out, s.sv, []runtime.Object{obj}, metav1.ListMeta{}, s.opts, s.headers)
		s.headers = false
	case targetPartial:
		err = encodeObject(&s.tmp, f, partialMetadata(obj, s.out.version))
	default:
		err = encodeObject(&s.tmp, f, withKind(obj, s.sv.res.gvk()))
	}
	if err != nil {
		return nil, err
	}
	b := bytes.Clone(s.tmp.Bytes())
	if s.out.target == targetObject && e != nil {
		e.enc[f].Store(&b)
	}
	return b, nil
}

// sendBookmark writes a BOOKMARK at rv: an object of the resource's kind
// with only its resourceVersion (and the initial-events-end annotation).
func (s *watchStream) sendBookmark(rv string, initialEnd bool) error {
	obj := bookmarkObject(s.sv.example, rv, initialEnd)
	if s.out.target == targetTable {
		s.tmp.Reset()
		t := &metav1.Table{TypeMeta: metav1.TypeMeta{APIVersion: metav1.GroupName + "/" + s.out.version, Kind: "Table"},
			ListMeta: metav1.ListMeta{ResourceVersion: rv}, Rows: []metav1.TableRow{}}
		if initialEnd {
			p := partialMetadata(obj, s.out.version)
			var b bytes.Buffer
			if err := encodeObject(&b, formatJSON, p); err != nil {
				return err
			}
			t.Rows = append(t.Rows, metav1.TableRow{Cells: []any{}, Object: runtime.RawExtension{Raw: bytes.TrimRight(b.Bytes(), "\n")}})
		}
		if err := encodeObject(&s.tmp, s.out.format, t); err != nil {
			return err
		}
		s.buf.Reset()
		if err := encodeWatchEvent(&s.buf, s.out.format, string(watch.Bookmark), s.tmp.Bytes()); err != nil {
			return err
		}
		_, err := s.w.Write(s.buf.Bytes())
		return err
	}
	return s.send(string(watch.Bookmark), obj, nil)
}

// bookmarkObject is a new object like example carrying only rv (and the
// annotation that ends the initial events).
func bookmarkObject(example runtime.Object, rv string, initialEnd bool) runtime.Object {
	gvk := example.GetObjectKind().GroupVersionKind()
	var obj runtime.Object
	if _, ok := example.(*unstructured.Unstructured); ok {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvk)
		obj = u
	} else {
		obj = reflect.New(reflect.TypeOf(example).Elem()).Interface().(runtime.Object)
	}
	m, err := meta.Accessor(obj)
	if err == nil {
		m.SetResourceVersion(rv)
		if initialEnd {
			m.SetAnnotations(map[string]string{initialEventsEnd: "true"})
		}
	}
	return obj
}

// sendError writes an ERROR event with err's Status and flushes.
func (s *watchStream) sendError(err error) error {
	st := toStatus(err)
	st.APIVersion, st.Kind = "v1", "Status"
	s.tmp.Reset()
	if e := encodeObject(&s.tmp, s.out.format, st); e != nil {
		return e
	}
	s.buf.Reset()
	if e := encodeWatchEvent(&s.buf, s.out.format, string(watch.Error), s.tmp.Bytes()); e != nil {
		return e
	}
	if _, e := s.w.Write(s.buf.Bytes()); e != nil {
		return e
	}
	return s.flush()
}

func (s *watchStream) flush() error {
	if err := s.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}
