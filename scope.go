package boltinformer

import (
	"fmt"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Scope is the namespace and list options of the informers of the
// resources a FactoryOptions.Scopes entry names.
type Scope struct {
	// Namespace limits the informers to one namespace ("" means all).
	Namespace string
	// TweakListOptions edits their list and watch requests (e.g. a
	// spec.nodeName field selector). Its effect is fingerprinted into
	// each informer's identity.
	TweakListOptions func(*metav1.ListOptions)
}

func (s *Scope) tweak(o *metav1.ListOptions) {
	if s.TweakListOptions != nil {
		s.TweakListOptions(o)
	}
}

// scopeEntry is one FactoryOptions.Scopes entry, parsed.
type scopeEntry struct {
	*keyringEntry // the resource it names (its keyring field unused)
	scope         Scope
}

// parseScopes parses and checks FactoryOptions.Scopes: every entry must be
// able to match a resource (as for Keyrings), and no two entries may name
// a common resource.
func parseScopes(m map[string]Scope) ([]*scopeEntry, error) {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	var out []*scopeEntry
	for _, name := range names {
		e, err := parseKeyringEntry(name)
		if err != nil {
			return nil, fmt.Errorf("boltinformer: factory: Scopes[%q] can never match a resource: %w", name, err)
		}
		for _, o := range out {
			if e.overlaps(o.keyringEntry) {
				return nil, fmt.Errorf("boltinformer: factory: Scopes[%q] and Scopes[%q] name the same resource", o.entry, name)
			}
		}
		out = append(out, &scopeEntry{keyringEntry: e, scope: m[name]})
	}
	return out, nil
}

// scope returns the namespace and list options of gr's informers: those
// of the Scopes entry naming it, else the factory's.
func (f *Factory) scope(gr schema.GroupResource) *Scope {
	if sc := f.scopeEntry(gr); sc != nil {
		return sc
	}
	return f.defaultScope()
}

// scopeEntry returns the scope of the Scopes entry naming gr, or nil.
func (f *Factory) scopeEntry(gr schema.GroupResource) *Scope {
	for _, e := range f.scopes {
		if e.matches(gr) {
			return &e.scope
		}
	}
	return nil
}

// defaultScope is the factory's Namespace and TweakListOptions.
func (f *Factory) defaultScope() *Scope {
	return &Scope{Namespace: f.opts.Namespace, TweakListOptions: f.opts.TweakListOptions}
}
