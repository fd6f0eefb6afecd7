package localapi

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
)

// The access reviews a client may ask about itself (kubectl auth can-i):
// whoever reached the handler (the token, the socket) may get, list and
// watch every served resource, and nothing else.
const (
	accessReviewPath = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"
	rulesReviewPath  = "/apis/authorization.k8s.io/v1/selfsubjectrulesreviews"
	// maxReviewBytes bounds a review's body.
	maxReviewBytes = 64 << 10
)

// serveReview answers a POST of a SelfSubjectAccessReview or a
// SelfSubjectRulesReview, as kube-apiserver does (201 with the review and
// its status); it reports false for any other request.
func (h *Handler) serveReview(w http.ResponseWriter, r *http.Request) bool {
	path := strings.TrimSuffix(r.URL.Path, "/")
	if r.Method != http.MethodPost || (path != accessReviewPath && path != rulesReviewPath) {
		return false
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxReviewBytes+1))
	if err != nil {
		h.writeError(w, r, badRequest(fmt.Sprintf("reading the review: %v", err)))
		return true
	}
	if len(body) > maxReviewBytes {
		h.writeError(w, r, badRequest(fmt.Sprintf("the review is larger than %d bytes", maxReviewBytes)))
		return true
	}
	var out runtime.Object
	if path == accessReviewPath {
		rev := &authorizationv1.SelfSubjectAccessReview{}
		if err := runtime.DecodeInto(decoder, body, rev); err != nil {
			h.writeError(w, r, badRequest(fmt.Sprintf("the review does not decode: %v", err)))
			return true
		}
		rev.Status = h.review(&rev.Spec)
		out = rev
	} else {
		rev := &authorizationv1.SelfSubjectRulesReview{}
		if err := runtime.DecodeInto(decoder, body, rev); err != nil {
			h.writeError(w, r, badRequest(fmt.Sprintf("the review does not decode: %v", err)))
			return true
		}
		rev.Status = h.rules(rev.Spec.Namespace)
		out = rev
	}
	var buf bytes.Buffer
	if err := encodeObject(&buf, formatJSON, withKind(out, authorizationv1.SchemeGroupVersion.WithKind(kindName(out)))); err != nil {
		h.writeError(w, r, err)
		return true
	}
	respond(w, r, formatJSON, http.StatusCreated, buf.Bytes())
	return true
}

// kindName is the Go type name of a review.
func kindName(obj runtime.Object) string {
	if _, ok := obj.(*authorizationv1.SelfSubjectAccessReview); ok {
		return "SelfSubjectAccessReview"
	}
	return "SelfSubjectRulesReview"
}

// review decides one access review.
func (h *Handler) review(spec *authorizationv1.SelfSubjectAccessReviewSpec) authorizationv1.SubjectAccessReviewStatus {
	deny := func(format string, args ...any) authorizationv1.SubjectAccessReviewStatus {
		return authorizationv1.SubjectAccessReviewStatus{Reason: fmt.Sprintf(format, args...)}
	}
	if nr := spec.NonResourceAttributes; nr != nil {
		if nr.Verb == "get" || nr.Verb == "head" {
			return authorizationv1.SubjectAccessReviewStatus{Allowed: true, Reason: "the local API serves its discovery, version and health paths to every client"}
		}
		return deny("the local API is read-only")
	}
	ra := spec.ResourceAttributes
	if ra == nil {
		return deny("the review names no resource")
	}
	switch ra.Verb {
	case "get", "list", "watch":
	default:
		return deny("the local API is read-only: it serves get, list and watch")
	}
	if ra.Subresource != "" && (ra.Subresource != "status" || ra.Verb != "get") {
		return deny("the local API does not serve %s/%s", ra.Resource, ra.Subresource)
	}
	for _, sv := range h.describedResources() {
		gvr := sv.res.GroupVersionResource
		if gvr.Group != ra.Group || gvr.Resource != ra.Resource || (ra.Version != "" && ra.Version != "*" && ra.Version != gvr.Version) {
			continue
		}
		if why := sv.refusedWhy(); why != "" {
			return deny("%s", why)
		}
		return authorizationv1.SubjectAccessReviewStatus{Allowed: true, Reason: "the local API serves get, list and watch of what this agent caches"}
	}
	gr := schema.GroupResource{Group: ra.Group, Resource: ra.Resource}
	return deny("the local API does not serve %s: it serves only what this agent caches (%s)", gr, h.servedNames())
}

// rules is the rules review: get, list and watch of every served
// resource, get of its status, and get of every non-resource path.
func (h *Handler) rules(string) authorizationv1.SubjectRulesReviewStatus {
	st := authorizationv1.SubjectRulesReviewStatus{
		ResourceRules:    []authorizationv1.ResourceRule{},
		NonResourceRules: []authorizationv1.NonResourceRule{{Verbs: []string{"get"}, NonResourceURLs: []string{"*"}}},
	}
	for _, sv := range h.resources() {
		g, res := sv.res.Group, sv.res.Resource
		st.ResourceRules = append(st.ResourceRules,
			authorizationv1.ResourceRule{Verbs: []string(readOnlyVerbs), APIGroups: []string{g}, Resources: []string{res}},
			authorizationv1.ResourceRule{Verbs: []string{"get"}, APIGroups: []string{g}, Resources: []string{res + "/status"}})
	}
	return st
}

// describedResources are every resource with a description: served and
// refused.
func (h *Handler) describedResources() []*served {
	h.refresh()
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*served, 0, len(h.byGVR))
	for _, sv := range h.byGVR {
		out = append(out, sv)
	}
	return out
}

// refusedWhy is why the resource is refused, or "".
func (sv *served) refusedWhy() string {
	if sv.refused != "" {
		return sv.refused
	}
	return sv.view.refused()
}

// decoder decodes request bodies (JSON, YAML or protobuf) of the
// scheme's kinds.
var decoder = scheme.Codecs.UniversalDeserializer()
