package localapi

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metainternalversionscheme "k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	metainternalversionvalidation "k8s.io/apimachinery/pkg/apis/meta/internalversion/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes/scheme"
)

// request is a parsed resource request: /api/v1/namespaces/ns/pods/name,
// /apis/g/v/resource, with the deprecated /watch/ segment.
type request struct {
	gv          schema.GroupVersion
	namespace   string
	resource    string
	name        string
	subresource string
	watchPath   bool // the /watch/ segment
}

// namespaceSubresources are what may follow /namespaces/{name}/ and is not
// a resource in that namespace.
var namespaceSubresources = sets.New("status", "finalize")

// parsePath splits a resource path; ok is false for a path that is not one
// (discovery is handled before). segments is the path without /api or
// /apis/{group}.
func parsePath(path string) (request, bool) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	var r request
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		r.gv = schema.GroupVersion{Version: parts[1]}
		parts = parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		r.gv = schema.GroupVersion{Group: parts[1], Version: parts[2]}
		parts = parts[3:]
	default:
		return r, false
	}
	if parts[0] == "watch" {
		r.watchPath = true
		parts = parts[1:]
		if len(parts) == 0 {
			return r, false
		}
	}
	if parts[0] == "namespaces" && len(parts) > 1 {
		r.namespace = parts[1]
		if len(parts) > 2 && !namespaceSubresources.Has(parts[2]) {
			parts = parts[2:]
		}
	}
	if len(parts) > 3 {
		return r, false
	}
	for _, p := range parts {
		if p == "" {
			return r, false
		}
	}
	r.resource = parts[0]
	if len(parts) > 1 {
		r.name = parts[1]
	}
	if len(parts) > 2 {
		r.subresource = parts[2]
	}
	if r.resource == "namespaces" && r.gv.Group == "" {
		// /api/v1/namespaces/{name}: the namespace object itself.
		r.namespace = ""
	}
	return r, true
}

// listOptions are a LIST's or WATCH's query, parsed and checked.
type listOptions struct {
	metav1.ListOptions
	labels labels.Selector
	fields fields.Selector
	table  metav1.TableOptions
}

// parseListOptions decodes the query as kube-apiserver does (its
// parameter codec, its validation of the options, its messages: a
// decoding error or a bad selector is BadRequest, options that do not go
// together are Invalid), then checks what the local API adds.
func parseListOptions(q url.Values) (*listOptions, error) {
	var in metainternalversion.ListOptions
	if err := metainternalversionscheme.ParameterCodec.DecodeParameters(q, metav1.SchemeGroupVersion, &in); err != nil {
		return nil, badRequest(err.Error())
	}
	if errs := metainternalversionvalidation.ValidateListOptions(&in, true); len(errs) > 0 {
		return nil, apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: "ListOptions"}, "", errs)
	}
	o := &listOptions{labels: in.LabelSelector, fields: in.FieldSelector}
	if o.labels == nil {
		o.labels = labels.Everything()
	}
	if o.fields == nil {
		o.fields = fields.Everything()
	}
	// ListOptions are registered in every group version ("v1" here).
	if err := scheme.ParameterCodec.DecodeParameters(q, schema.GroupVersion{Version: "v1"}, &o.ListOptions); err != nil {
		return nil, badRequest(err.Error())
	}
	o.table.IncludeObject = metav1.IncludeObjectPolicy(q.Get("includeObject"))
	if o.Limit < 0 {
		o.Limit = 0 // none, as in kube-apiserver
	}
	if o.Continue != "" && o.ResourceVersion != "" && o.ResourceVersion != "0" {
		return nil, badRequest("specifying resource version is not allowed when using continue")
	}
	if o.SendInitialEvents != nil && *o.SendInitialEvents && !o.AllowWatchBookmarks {
		return nil, badRequest("sendInitialEvents requires setting allowWatchBookmarks to true")
	}
	switch o.table.IncludeObject {
	case "", metav1.IncludeNone, metav1.IncludeMetadata, metav1.IncludeObject:
	default:
		return nil, badRequest(fmt.Sprintf("unrecognized includeObject value: %q", o.table.IncludeObject))
	}
	return o, nil
}

// isWatch reports whether the request is a WATCH: the /watch/ path, or the
// query's watch parameter on a collection (on a named object it is a GET,
// as in the apiserver).
func isWatch(r *request, o *listOptions) bool { return r.watchPath || (o.Watch && r.name == "") }

// methodVerb names a write method as the apiserver does in its 405.
func methodVerb(method string, hasName bool) string {
	switch method {
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		if hasName {
			return "delete"
		}
		return "deletecollection"
	}
	return strings.ToLower(method)
}
