package localapi

import (
	"fmt"
	"net/http"
	"strings"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	"github.com/boltinformer/boltinformer"
)

// scope is what an informer lists from the cluster (its namespace and
// selectors): a request that asks for more gets the objects of the scope
// only, and a warning that says so, as kube-apiserver warns of what a
// client should know (a Warning header, which kubectl prints).
type scope struct {
	namespace string
	labels    labels.Requirements
	fields    []fields.Requirement
	text      string // "namespace edge, fieldSelector spec.nodeName=node-1"
}

// newScope reads an informer's ListOptions fingerprint (a Factory's
// informers record one); nil when it is unknown or everything.
func newScope(fingerprint string) *scope {
	ns, opts, ok := boltinformer.ParseListOptionsFingerprint(fingerprint)
	if !ok || (ns == "" && opts.LabelSelector == "" && opts.FieldSelector == "") {
		return nil
	}
	s := &scope{namespace: ns}
	var parts []string
	if ns != "" {
		parts = append(parts, "namespace "+ns)
	}
	if opts.LabelSelector != "" {
		ls, err := labels.Parse(opts.LabelSelector)
		if err != nil {
			return nil
		}
		s.labels, _ = ls.Requirements()
		parts = append(parts, "labelSelector "+opts.LabelSelector)
	}
	if opts.FieldSelector != "" {
		fs, err := fields.ParseSelector(opts.FieldSelector)
		if err != nil {
			return nil
		}
		s.fields = fs.Requirements()
		parts = append(parts, "fieldSelector "+opts.FieldSelector)
	}
	s.text = strings.Join(parts, ", ")
	return s
}

// wider reports whether a request of namespace ns ("": all) with these
// selectors may select objects outside the scope: it does not require
// the scope's namespace and each of its selectors' requirements.
func (s *scope) wider(ns string, ls labels.Selector, fs fields.Selector) bool {
	if s == nil {
		return false
	}
	if s.namespace != "" && ns != s.namespace {
		return true
	}
	for _, r := range s.fields {
		if r.Operator == selection.Equals || r.Operator == selection.DoubleEquals {
			if v, ok := fs.RequiresExactMatch(r.Field); !ok || v != r.Value {
				return true
			}
			continue
		}
		if !hasFieldRequirement(fs, r) {
			return true
		}
	}
	if len(s.labels) > 0 {
		have, _ := ls.Requirements()
		for _, r := range s.labels {
			found := false
			for _, h := range have {
				if h.String() == r.String() {
					found = true
					break
				}
			}
			if !found {
				return true
			}
		}
	}
	return false
}

func hasFieldRequirement(fs fields.Selector, r fields.Requirement) bool {
	for _, h := range fs.Requirements() {
		if h == r {
			return true
		}
	}
	return false
}

// warnPartial adds the Warning header of a list or watch wider than the
// scope of resource.
func (s *scope) warnPartial(w http.ResponseWriter, resource string) {
	addWarning(w, fmt.Sprintf("this local API serves only the %s its agent caches (%s): %s outside it are not listed here; ask the cluster's API server for them", resource, s.text, resource))
}

// warnNotFound adds the Warning header of a GET whose object is not in
// the cache.
func (s *scope) warnNotFound(w http.ResponseWriter, resource string) {
	addWarning(w, fmt.Sprintf("this local API serves only the %s its agent caches (%s): one outside it is not found here", resource, s.text))
}

// addWarning adds a Warning header as kube-apiserver writes them (code
// 299, agent "-", the text quoted), which client-go passes to kubectl's
// "Warning: ..." lines.
func addWarning(w http.ResponseWriter, text string) {
	text = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", " ").Replace(text)
	w.Header().Add("Warning", `299 - "`+text+`"`)
}
