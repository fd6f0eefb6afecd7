package boltinformer

import (
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes/scheme"
)

// keyringEntry is one FactoryOptions.Keyrings entry, parsed: it names a
// resource by its plural name in one group, or in any group (anyGroup).
// The version, when the entry gives one, is checked but not matched: the
// objects of every version of a resource are the same data.
type keyringEntry struct {
	entry    string // as the user wrote it
	anyGroup bool
	group    string
	resource string // plural, lower case
	keyring  *Keyring
}

func (e *keyringEntry) matches(gr schema.GroupResource) bool {
	return e.resource == gr.Resource && (e.anyGroup || e.group == gr.Group)
}

// overlaps reports whether some resource matches both entries.
func (e *keyringEntry) overlaps(o *keyringEntry) bool {
	return e.resource == o.resource && (e.anyGroup || o.anyGroup || e.group == o.group)
}

// versionRE is what a Kubernetes API version looks like (v1, v1beta2,
// v2alpha1): the middle part of "deployments.v1.apps".
var versionRE = regexp.MustCompile(`^v[0-9]+((alpha|beta)[0-9]+)?$`)

// builtinResources is what client-go's scheme knows: for each group ("" is
// the core group), the plural names of its resources with their versions,
// and the singular (lower-case kind) names mapped to the plurals.
type builtinResources struct {
	plural   map[string]map[string]sets.Set[string] // group -> plural -> versions
	singular map[string]map[string]string           // group -> singular -> plural
}

var builtins = sync.OnceValue(func() *builtinResources {
	b := &builtinResources{plural: map[string]map[string]sets.Set[string]{}, singular: map[string]map[string]string{}}
	for gvk, typ := range scheme.Scheme.AllKnownTypes() {
		if gvk.Version == runtime.APIVersionInternal {
			continue
		}
		obj, ok := reflect.New(typ).Interface().(runtime.Object)
		if !ok || meta.IsListType(obj) {
			continue
		}
		if _, err := meta.Accessor(obj); err != nil {
			continue // options, WatchEvent, Status: not resources
		}
		plural, singular := meta.UnsafeGuessKindToResource(gvk)
		if b.plural[gvk.Group] == nil {
			b.plural[gvk.Group] = map[string]sets.Set[string]{}
			b.singular[gvk.Group] = map[string]string{}
		}
		if b.plural[gvk.Group][plural.Resource] == nil {
			b.plural[gvk.Group][plural.Resource] = sets.New[string]()
		}
		b.plural[gvk.Group][plural.Resource].Insert(gvk.Version)
		b.singular[gvk.Group][singular.Resource] = plural.Resource
	}
	return b
})

// lookup returns the plural of name (a plural or singular resource name)
// in group, and whether the group is built in.
func (b *builtinResources) lookup(group, name string) (plural string, builtinGroup bool) {
	ps, ok := b.plural[group]
	if !ok {
		return "", false
	}
	if _, ok := ps[name]; ok {
		return name, true
	}
	return b.singular[group][name], true
}

// lookupAnyGroup returns the plural of name in any built-in group.
func (b *builtinResources) lookupAnyGroup(name string) string {
	for g := range b.plural {
		if p, _ := b.lookup(g, name); p != "" {
			return p
		}
	}
	return ""
}

// parseKeyrings parses and checks FactoryOptions.Keyrings. Every entry must
// be able to match a resource: an entry naming no built-in resource, or a
// group that cannot be a custom resource's, is an error, as is an entry
// without a keyring, a keyring that does not build, and two entries with
// different keyrings that name a common resource.
func parseKeyrings(m map[string]*Keyring) ([]*keyringEntry, error) {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	var out []*keyringEntry
	for _, name := range names {
		k := m[name]
		if k == nil {
			return nil, fmt.Errorf("boltinformer: factory: Keyrings[%q] is nil: remove the entry, or give its keyring", name)
		}
		if err := k.Validate(); err != nil {
			return nil, fmt.Errorf("boltinformer: factory: Keyrings[%q]: %w", name, err)
		}
		e, err := parseKeyringEntry(name)
		if err != nil {
			return nil, fmt.Errorf("boltinformer: factory: Keyrings[%q] can never match a resource: %w", name, err)
		}
		e.keyring = k
		for _, o := range out {
			if o.keyring != k && e.overlaps(o) {
				return nil, fmt.Errorf("boltinformer: factory: Keyrings[%q] and Keyrings[%q] name the same resource with different keyrings", o.entry, name)
			}
		}
		out = append(out, e)
	}
	return out, nil
}

// parseKeyringEntry parses one Keyrings key. The forms (case does not
// matter):
//
//	secrets, secret              a built-in resource, plural or singular, in any group
//	deployments.apps             resource.group
//	deployments.v1.apps          resource.version.group
//	secrets.v1.                  resource.version. (the core group, as kubectl writes it)
//	v1/secrets, apps/v1/deployments   version/resource, group/version/resource
//	/v1, Resource=secrets        schema.GroupVersionResource.String()
//
// A group that is not built in is a custom resource's: it must contain a
// dot (as a CRD's group must), and is taken as given (only the API server
// knows its resources); name a custom resource by its CRD's name,
// <plural>.<group>.
func parseKeyringEntry(entry string) (*keyringEntry, error) {
	s := strings.ToLower(strings.TrimSpace(entry))
	var group, version, resource string
	qualified := true
	switch {
	case strings.Contains(s, ", resource="):
		gv, res, _ := strings.Cut(s, ", resource=")
		parsed, err := schema.ParseGroupVersion(gv)
		if err != nil || parsed.Version == "" {
			return nil, fmt.Errorf("%q is not a group/version", gv)
		}
		group, version, resource = parsed.Group, parsed.Version, res
	case strings.Contains(s, "/"):
		parts := strings.Split(s, "/")
		switch len(parts) {
		case 2:
			version, resource = parts[0], parts[1]
		case 3:
			group, version, resource = parts[0], parts[1], parts[2]
		default:
			return nil, fmt.Errorf("want version/resource or group/version/resource")
		}
	case strings.Contains(s, "."):
		parts := strings.SplitN(s, ".", 3)
		if len(parts) == 3 && versionRE.MatchString(parts[1]) {
			resource, version, group = parts[0], parts[1], parts[2]
		} else {
			resource, group, _ = strings.Cut(s, ".")
			if versionRE.MatchString(group) {
				return nil, fmt.Errorf("%q is a version, not a group: write %q (any group), %q (the core group) or %s.%s.<group>", group, resource, resource+"."+group+".", resource, group)
			}
		}
	default:
		resource, qualified = s, false
	}
	if resource == "" {
		return nil, fmt.Errorf("no resource name")
	}
	if version != "" && !versionRE.MatchString(version) {
		return nil, fmt.Errorf("%q is not an API version", version)
	}
	b := builtins()
	if !qualified {
		plural := b.lookupAnyGroup(resource)
		if plural == "" {
			return nil, fmt.Errorf("%q is not a built-in resource; name a custom resource by its CRD's name, <plural>.<group> (e.g. widgets.example.com)", resource)
		}
		return &keyringEntry{entry: entry, anyGroup: true, resource: plural}, nil
	}
	plural, builtinGroup := b.lookup(group, resource)
	switch {
	case builtinGroup && plural == "":
		return nil, fmt.Errorf("group %q has no resource %q", displayGroup(group), resource)
	case builtinGroup && version != "" && !b.plural[group][plural].Has(version):
		return nil, fmt.Errorf("%s %q has no version %q (it has %s)", displayGroup(group), plural, version, strings.Join(sets.List(b.plural[group][plural]), ", "))
	case builtinGroup:
		return &keyringEntry{entry: entry, group: group, resource: plural}, nil
	}
	// A custom resource: only its form can be checked here.
	if !strings.Contains(group, ".") {
		return nil, fmt.Errorf("%q is neither a built-in group nor a custom resource's (whose group contains a dot)", group)
	}
	if errs := validation.IsDNS1123Subdomain(group); len(errs) > 0 {
		return nil, fmt.Errorf("group %q: %s", group, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Label(resource); len(errs) > 0 {
		return nil, fmt.Errorf("resource %q: %s", resource, strings.Join(errs, "; "))
	}
	return &keyringEntry{entry: entry, group: group, resource: resource}, nil
}

func displayGroup(g string) string {
	if g == "" {
		return "core"
	}
	return g
}
