package localapi

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/validate/content"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// serveResource answers a GET, LIST or WATCH of a served resource, and
// refuses everything else.
func (h *Handler) serveResource(w http.ResponseWriter, r *http.Request) {
	req, ok := parsePath(r.URL.Path)
	if !ok {
		h.writeError(w, r, pathNotFound())
		return
	}
	sv, err := h.lookup(req.gv.WithResource(req.resource))
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	if sv == nil {
		h.writeError(w, r, h.notServed(&req))
		return
	}
	gr := sv.res.GroupVersionResource.GroupResource()
	if req.subresource != "" && req.subresource != "status" {
		h.writeError(w, r, h.subresourceNotServed(gr, &req))
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.writeError(w, r, readOnly(gr, methodVerb(r.Method, req.name != "")))
		return
	}
	if sv.refused != "" {
		h.writeError(w, r, sv.forbidden(req.name, sv.refused))
		return
	}
	// A namespace in the path of a cluster-wide resource, or a name
	// without one for a namespaced resource, is no path of the API.
	if (req.namespace != "" && !sv.res.namespaced()) || (req.name != "" && req.namespace == "" && sv.res.namespaced()) {
		h.writeError(w, r, pathNotFound())
		return
	}
	opts, err := parseListOptions(r.URL.Query())
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	watching := isWatch(&req, opts)
	if req.subresource != "" && watching {
		h.writeError(w, r, pathNotFound())
		return
	}
	out, err := negotiate(r.Header.Get("Accept"), req.name == "", watching, sv.protobuf)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	sel, err := newSelector(&sv.res, opts.labels, opts.fields)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	v := sv.view
	if err := v.checkRV(opts.ResourceVersion); err != nil {
		h.writeError(w, r, err)
		return
	}
	v.mu.RLock()
	synced, secrets := v.synced, v.secrets
	v.mu.RUnlock()
	if secrets != "" {
		h.writeError(w, r, sv.forbidden(req.name, secrets))
		return
	}
	if !synced {
		h.writeError(w, r, notSynced(gr))
		return
	}
	if req.name == "" && sv.scope.wider(req.namespace, opts.labels, opts.fields) {
		sv.scope.warnPartial(w, gr.Resource)
	}
	switch {
	case watching:
		if req.name != "" {
			// The deprecated /watch/.../{name}: a watch of one object.
			opts.FieldSelector = "metadata.name=" + req.name
			if sel, err = newSelector(&sv.res, opts.labels, fields.OneTermEqualSelector("metadata.name", req.name)); err != nil {
				h.writeError(w, r, err)
				return
			}
		}
		h.serveWatch(w, r, sv, req.namespace, opts, sel, out)
	case req.name != "":
		h.serveGet(w, r, sv, &req, opts, out)
	default:
		h.serveList(w, r, sv, req.namespace, opts, sel, out)
	}
}

// forbidden is the 403 of a request of the resource refused for why.
func (sv *served) forbidden(name, why string) error {
	return apierrors.NewForbidden(sv.res.GroupVersionResource.GroupResource(), name, errString(why))
}

type errString string

func (e errString) Error() string { return string(e) }

// objectKey is the view's key of a name in a namespace.
func objectKey(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// waitFor waits until the view has reached rv ("" and "0": at once), for
// at most Options.WaitForResourceVersion; then it is the apiserver's "Too
// large resource version". Caller holds no lock.
func (h *Handler) waitFor(ctx context.Context, v *view, rv string) error {
	if rv == "" || rv == "0" {
		return nil
	}
	deadline := time.NewTimer(h.opts.WaitForResourceVersion)
	defer deadline.Stop()
	for {
		v.mu.RLock()
		ok, changed, current := v.newerOrEqualLocked(rv), v.changed, v.rv
		v.mu.RUnlock()
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return apierrors.NewTimeoutError("the request was cancelled while waiting for the cache", 1)
		case <-deadline.C:
			return tooLarge(rv, current)
		}
	}
}

// serveGet answers a GET of one object, as the cache holds it now (after
// waiting for a resourceVersion the request names).
func (h *Handler) serveGet(w http.ResponseWriter, r *http.Request, sv *served, req *request, opts *listOptions, out output) {
	v := sv.view
	gr := sv.res.GroupVersionResource.GroupResource()
	if msgs := content.IsPathSegmentName(req.name); len(msgs) != 0 {
		// The apiserver's storage refuses such a name before it looks.
		h.writeError(w, r, badRequest(fmt.Sprintf("Name parameter invalid: %q: %s", req.name, strings.Join(msgs, ";"))))
		return
	}
	if err := h.waitFor(r.Context(), v, opts.ResourceVersion); err != nil {
		h.writeError(w, r, err)
		return
	}
	v.mu.RLock()
	it, secrets := v.objs[objectKey(req.namespace, req.name)], v.secrets
	v.mu.RUnlock()
	if secrets != "" {
		h.writeError(w, r, sv.forbidden(req.name, secrets))
		return
	}
	if it == nil {
		if sv.scope != nil {
			sv.scope.warnNotFound(w, gr.Resource)
		}
		h.writeError(w, r, notFound(gr, req.name))
		return
	}
	obj := it.obj
	var buf bytes.Buffer
	var err error
	switch out.target {
	case targetTable:
		err = h.encodeTable(&buf, out, sv, []runtime.Object{obj}, metav1.ListMeta{}, opts, true)
	case targetPartial:
		err = encodeObject(&buf, out.format, partialMetadata(obj, out.version))
	default:
		err = encodeObject(&buf, out.format, withKind(obj, sv.res.gvk()))
	}
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeBody(w, r, out.format, buf.Bytes())
}

// page is what a LIST selected: objects and their ListMeta.
type page struct {
	items []*item
	meta  metav1.ListMeta
}

// objects returns the page's objects.
func (p *page) objects() []runtime.Object {
	objs := make([]runtime.Object, len(p.items))
	for i, it := range p.items {
		objs[i] = it.obj
	}
	return objs
}

// selectPage runs a LIST against the view: the state now (or at the
// resourceVersion of a continue token or of an Exact match), in key order,
// filtered, at most limit objects (0: all), with the continue token and
// remaining count of a truncated page.
func (h *Handler) selectPage(ctx context.Context, sv *served, namespace string, opts *listOptions, sel *selector) (*page, error) {
	v := sv.view
	var start, atRV string
	switch {
	case opts.Continue != "":
		tok, err := decodeContinue(opts.Continue)
		if err != nil {
			return nil, err
		}
		start, atRV = tok.Start, tok.ResourceVersion
	case opts.ResourceVersionMatch == metav1.ResourceVersionMatchExact:
		atRV = opts.ResourceVersion
	default:
		if err := h.waitFor(ctx, v, opts.ResourceVersion); err != nil {
			return nil, err
		}
	}
	prefix := ""
	if namespace != "" {
		prefix = namespace + "/"
	}
	exact := ""
	if name, ok := sel.singleName(); ok && (namespace != "" || !sel.namespaced) {
		exact = objectKey(namespace, name) // one key to look at
	}
	// Under the lock: the position and a snapshot of it, in steps bounded
	// by the window. The selection runs after, without it.
	v.mu.RLock()
	if v.secrets != "" {
		v.mu.RUnlock()
		return nil, sv.forbidden("", v.secrets)
	}
	seq := v.next
	rv := v.rv
	if atRV != "" && atRV != v.rv {
		s, err := v.positionLocked(atRV)
		if err != nil {
			startRV, current := v.startRV, v.rv
			v.mu.RUnlock()
			if opts.Continue != "" {
				// Too old to continue consistently: say so, with a token
				// that continues (inconsistently) from the current state.
				e := apierrors.NewResourceExpired("the continue token is older than the local API's window of events; start a new list, or continue from the current state with the token in this Status (objects changed since the first page may then be missed or repeated)")
				e.ErrStatus.ListMeta.Continue = encodeContinue(current, start)
				return nil, e
			}
			if err == errTooNew {
				return nil, tooLarge(atRV, current)
			}
			return nil, expired(atRV, startRV)
		}
		seq, rv = s, atRV
	}
	now := seq == v.next
	var one *item
	var snap *snapshot
	if exact != "" {
		one = v.getLocked(seq, exact)
	} else {
		snap = v.snapshotLocked(seq)
	}
	v.mu.RUnlock()

	p := &page{meta: metav1.ListMeta{ResourceVersion: rv}}
	if exact != "" {
		if one != nil && exact > start {
			h.selecting()
			if sel.matches(one.obj) {
				p.items = append(p.items, one)
			}
		}
		return p, nil
	}
	limit := int(opts.Limit)
	if opts.ResourceVersion == "0" && opts.Continue == "" {
		// The whole list, as kube-apiserver's watch cache answers
		// resourceVersion=0 whatever the limit (computeListLimit).
		limit = 0
	}
	var lastKey string
	more := false
	var err error
	n := 0
	snap.walk(start, prefix, func(key string, it *item) bool {
		if n++; n%cancelCheckEvery == 0 {
			if err = ctx.Err(); err != nil {
				return false
			}
		}
		h.selecting()
		if !sel.matches(it.obj) {
			return true
		}
		if limit > 0 && len(p.items) == limit {
			more = true
			return false
		}
		p.items = append(p.items, it)
		lastKey = key
		return true
	})
	if err != nil {
		return nil, apierrors.NewTimeoutError(fmt.Sprintf("the list was not completed: %v", err), 0)
	}
	if more {
		p.meta.Continue = encodeContinue(rv, lastKey)
		if sel.everything && now {
			n := int64(snap.countAfter(lastKey, prefix))
			p.meta.RemainingItemCount = &n
		}
	}
	return p, nil
}

// cancelCheckEvery is how many objects a selection matches between two
// looks at its request's context (a client gone: it stops).
const cancelCheckEvery = 256

// serveList answers a LIST.
func (h *Handler) serveList(w http.ResponseWriter, r *http.Request, sv *served, namespace string, opts *listOptions, sel *selector, out output) {
	p, err := h.selectPage(r.Context(), sv, namespace, opts, sel)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	if out.target == targetObject {
		h.writeItems(w, r, sv, p, out.format)
		return
	}
	var buf bytes.Buffer
	switch out.target {
	case targetTable:
		err = h.encodeTable(&buf, out, sv, p.objects(), p.meta, opts, true)
	case targetPartial:
		lw := newListWriter(out.format, schema.GroupVersionKind{Group: metav1.GroupName, Version: out.version, Kind: "PartialObjectMetadataList"})
		for _, it := range p.items {
			if err = lw.add(partialMetadata(it.obj, out.version)); err != nil {
				break
			}
		}
		if err == nil {
			err = lw.finish(&buf, p.meta)
		}
	}
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	writeBody(w, r, out.format, buf.Bytes())
}

// writeItems answers a LIST of the resource's own kind: each item's
// cached encoding (encoded now when it has none), and the list around
// them in one buffer of the response's size.
func (h *Handler) writeItems(w http.ResponseWriter, r *http.Request, sv *served, p *page, f format) {
	encs := make([][]byte, len(p.items))
	for i, it := range p.items {
		b, err := it.encoded(f, sv.view.budget)
		if err != nil {
			h.writeError(w, r, err)
			return
		}
		encs[i] = b
	}
	bp := bodyPool.Get().(*[]byte)
	body, err := appendList((*bp)[:0], f, sv.res.GroupVersion().WithKind(sv.res.Kind+"List"), p.meta, encs)
	if err != nil {
		bodyPool.Put(bp)
		h.writeError(w, r, err)
		return
	}
	writeBody(w, r, f, body)
	if cap(body) <= maxPooledBody {
		*bp = body
		bodyPool.Put(bp)
	}
}

// bodyPool holds the buffers of list responses (*[]byte), reused once
// written: a response's Write does not keep its bytes.
var bodyPool = sync.Pool{New: func() any { return new([]byte) }}

// maxPooledBody is the largest buffer kept in bodyPool.
const maxPooledBody = 4 << 20
