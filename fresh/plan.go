package fresh

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/resourceversion"
)

// MetadataLister lists, metadata only, what an informer's ListerWatcher
// lists (the same resource, namespace and selectors): every object's name,
// namespace, UID and resourceVersion, and the list's resourceVersion. A
// kube-apiserver serves it from its watch cache as a
// PartialObjectMetadataList (k8s.io/client-go/metadata).
type MetadataLister interface {
	ListMetadata(ctx context.Context, opts metav1.ListOptions) (*metav1.PartialObjectMetadataList, error)
}

// ListAllMetadata lists every page of a consistent, most recent metadata
// list (resourceVersion ""), following continue tokens.
func ListAllMetadata(ctx context.Context, l MetadataLister) (*metav1.PartialObjectMetadataList, error) {
	var out *metav1.PartialObjectMetadataList
	opts := metav1.ListOptions{}
	for {
		page, err := l.ListMetadata(ctx, opts)
		if err != nil {
			return nil, err
		}
		if out == nil {
			out = page
		} else {
			out.Items = append(out.Items, page.Items...)
		}
		if page.Continue == "" {
			out.Continue = ""
			return out, nil
		}
		opts.Continue = page.Continue
	}
}

// ErrNotComparable means resourceVersions could not be ordered (a server
// whose resourceVersions are not kube-apiserver's decimal integers, such
// as some aggregated APIs): freshness falls back to the first watch event.
var ErrNotComparable = errors.New("fresh: resourceVersions are not comparable")

// ErrOtherTimeline means the server's list is older than the cache: the
// server was restored from a backup or replaced, so the cache belongs to
// another history and must be replaced by a list.
var ErrOtherTimeline = errors.New("fresh: the server's resourceVersion is behind the cache's: restored or replaced cluster")

// Catchup is the diff between a cache and a metadata list taken at
// resourceVersion R, and what the resumed watch must still bring for the
// cache to equal the server's state at R: for each changed or new key, an
// event at or after its listed resourceVersion; for each key the list does
// not have, its deletion. It is not safe for concurrent use: its owner
// (the informer loop) serializes Observe with the events it applies.
type Catchup struct {
	// ResourceVersion is the list's, R.
	ResourceVersion string
	// Changed, Created and Gone count the keys the watch must bring, as
	// planned: changed while the cache was not watching, created, deleted.
	// Unchanged counts the keys that already match the list.
	Changed, Created, Gone, Unchanged int
	// want maps a key to the resourceVersion it must reach, or "" for a
	// key that must be deleted.
	want map[string]string
	// goneKeys are the keys to be deleted, as planned.
	goneKeys []string
	// listed maps each key of the list to its resourceVersion: an event
	// before R sets what the key still needs (a key deleted as planned
	// may be created again before R, and one the list does not have
	// created and deleted again).
	listed map[string]string
	// complete: the catch-up is over (Complete; passed).
	complete bool
	// missed are the keys still pending when the watch passed R (set by
	// Observe and ObserveProgress): in one history there are none.
	missed []string
}

// Plan compares the cache (cached yields each key and its
// resourceVersion; applied is the cache's resourceVersion) with list. It
// fails with ErrNotComparable when a resourceVersion does not parse, and
// ErrOtherTimeline when the list is older than what the cache has applied
// or has an object at an older resourceVersion than the cache's (a
// restored cluster whose resourceVersion has passed the cache's since).
func Plan(list *metav1.PartialObjectMetadataList, keyOf func(*metav1.PartialObjectMetadata) (string, error), applied string, cached iter.Seq2[string, string]) (*Catchup, error) {
	return plan(list, keyOf, applied, cached, false)
}

// plan is Plan; strict also fails with ErrOtherTimeline when the list has
// an object at a resourceVersion not after applied that the cache does
// not hold at that version. In one history a cache at resourceVersion A
// holds every object that exists later at a resourceVersion not after A,
// as it was then; a catch-up by the watch resumed from A could never bring
// it (its event is before A). A relist's patch, which reads each object
// the diff names, needs no such check.
func plan(list *metav1.PartialObjectMetadataList, keyOf func(*metav1.PartialObjectMetadata) (string, error), applied string, cached iter.Seq2[string, string], strict bool) (*Catchup, error) {
	r := list.ResourceVersion
	if applied != "" {
		c, err := resourceversion.CompareResourceVersion(r, applied)
		if err != nil {
			return nil, fmt.Errorf("%w: list %q, cache %q: %w", ErrNotComparable, r, applied, err)
		}
		if c < 0 {
			return nil, fmt.Errorf("%w: list at %s, cache at %s", ErrOtherTimeline, r, applied)
		}
	}
	c := &Catchup{ResourceVersion: r, want: map[string]string{}, listed: make(map[string]string, len(list.Items))}
	listed := make(map[string]*metav1.PartialObjectMetadata, len(list.Items))
	for i := range list.Items {
		it := &list.Items[i]
		key, err := keyOf(it)
		if err != nil {
			return nil, fmt.Errorf("fresh: metadata list item: %w", err)
		}
		if _, err := resourceversion.CompareResourceVersion(it.ResourceVersion, r); err != nil {
			return nil, fmt.Errorf("%w: object %q at %q: %w", ErrNotComparable, key, it.ResourceVersion, err)
		}
		listed[key] = it
		c.listed[key] = it.ResourceVersion
	}
	for key, rv := range cached {
		it, ok := listed[key]
		if !ok {
			if cmp, err := resourceversion.CompareResourceVersion(rv, r); err == nil && cmp > 0 {
				// Created after the list: already newer than R.
				continue
			}
			c.want[key] = ""
			c.goneKeys = append(c.goneKeys, key)
			c.Gone++
			continue
		}
		delete(listed, key)
		cmp, err := resourceversion.CompareResourceVersion(rv, it.ResourceVersion)
		if err != nil {
			return nil, fmt.Errorf("%w: cached %q at %q: %w", ErrNotComparable, key, rv, err)
		}
		if cmp > 0 && applied != "" {
			// The list is not older than the cache, so in one history
			// every object it has is at its cached version or later.
			return nil, fmt.Errorf("%w: %q is at %s in the cache, at %s on the server", ErrOtherTimeline, key, rv, it.ResourceVersion)
		}
		if cmp >= 0 {
			c.Unchanged++
			continue
		}
		if strict && notAfter(it.ResourceVersion, applied) {
			return nil, fmt.Errorf("%w: %q is at %s in the cache, at %s on the server, not after the cache's resourceVersion %s", ErrOtherTimeline, key, rv, it.ResourceVersion, applied)
		}
		c.want[key] = it.ResourceVersion
		c.Changed++
	}
	for key, it := range listed {
		if strict && notAfter(it.ResourceVersion, applied) {
			return nil, fmt.Errorf("%w: %q is at %s on the server, not after the cache's resourceVersion %s, and not in the cache", ErrOtherTimeline, key, it.ResourceVersion, applied)
		}
		c.want[key] = it.ResourceVersion
		c.Created++
	}
	return c, nil
}

// notAfter reports whether resourceVersion a is at or before b (false
// when b is "" or they do not compare).
func notAfter(a, b string) bool {
	if b == "" {
		return false
	}
	c, err := resourceversion.CompareResourceVersion(a, b)
	return err == nil && c <= 0
}

// PlanResume is Plan for a watch resumed from resourceVersion from, whose
// events the cache may have applied past the list's resourceVersion R by
// the time it is compared (the list is taken first, then compared with
// the cache as the informer loop left it): the timeline is checked
// against from, not against what the cache has applied since, and a cache
// that has applied an event past R is caught up at once (the watch is in
// order, so it holds every change up to R: it is the server's state at
// applied). It fails as Plan does, and with ErrOtherTimeline when the list
// has an object at a resourceVersion not after applied that the cache
// does not hold at that version (the watch would never bring it).
func PlanResume(list *metav1.PartialObjectMetadataList, keyOf func(*metav1.PartialObjectMetadata) (string, error), from, applied string, cached iter.Seq2[string, string]) (*Catchup, error) {
	r := list.ResourceVersion
	if from != "" {
		c, err := resourceversion.CompareResourceVersion(r, from)
		if err != nil {
			return nil, fmt.Errorf("%w: list %q, resumed from %q: %w", ErrNotComparable, r, from, err)
		}
		if c < 0 {
			return nil, fmt.Errorf("%w: list at %s, the watch resumed from %s", ErrOtherTimeline, r, from)
		}
	}
	if applied != "" {
		c, err := resourceversion.CompareResourceVersion(applied, r)
		if err != nil {
			return nil, fmt.Errorf("%w: list %q, cache %q: %w", ErrNotComparable, r, applied, err)
		}
		if c > 0 {
			return &Catchup{ResourceVersion: applied, want: map[string]string{}}, nil
		}
	}
	return plan(list, keyOf, applied, cached, true)
}

// Pending returns how many keys the watch must still bring.
func (c *Catchup) Pending() int { return len(c.want) }

// Done reports whether the cache has caught up with the list.
func (c *Catchup) Done() bool { return c.complete || len(c.want) == 0 }

// GoneKeys are the keys the list does not have (deleted while the cache
// was not watching), as planned.
func (c *Catchup) GoneKeys() []string { return c.goneKeys }

// Listed reports whether the list has key.
func (c *Catchup) Listed(key string) bool {
	_, ok := c.listed[key]
	return ok
}

// Unlisted returns the keys of cached (each key and its resourceVersion)
// that the list does not have and that are not newer than R: what a cache
// must delete to be the list's state, as it is now (a partial relist
// applies its patch after the events queued before it, which may have
// created objects the plan could not name).
func (c *Catchup) Unlisted(cached iter.Seq2[string, string]) []string {
	var out []string
	for key, rv := range cached {
		if _, ok := c.listed[key]; ok {
			continue
		}
		if cmp, err := resourceversion.CompareResourceVersion(rv, c.ResourceVersion); err == nil && cmp > 0 {
			continue
		}
		out = append(out, key)
	}
	return out
}

// WantKeys are the keys still pending.
func (c *Catchup) WantKeys() []string {
	out := make([]string, 0, len(c.want))
	for k := range c.want {
		out = append(out, k)
	}
	return out
}

// ChangedKeys are the pending keys that the list has (changed or created
// since the cache's state), not those to be deleted.
func (c *Catchup) ChangedKeys() []string {
	out := make([]string, 0, len(c.want))
	for k, rv := range c.want {
		if rv != "" {
			out = append(out, k)
		}
	}
	return out
}

// Observe notes an applied change of key at resourceVersion rv (a delete
// when deleted) and reports whether the cache has now caught up. An event
// at or after R means every event up to R was applied (the watch is in
// order): caught up; a key still pending then was never brought, which
// one history cannot do (Missed names them).
func (c *Catchup) Observe(key, rv string, deleted bool) bool {
	if c.complete {
		return true
	}
	if rv != "" {
		cmp, err := resourceversion.CompareResourceVersion(rv, c.ResourceVersion)
		if err == nil {
			if cmp <= 0 {
				// Up to R (the write at R is in the list): the key is as
				// the list has it only once it reaches its listed
				// resourceVersion (a listed key), or is deleted (a key the
				// list does not have), whatever was planned.
				if lrv, ok := c.listed[key]; ok {
					if cmp, err := resourceversion.CompareResourceVersion(rv, lrv); !deleted && err == nil && cmp >= 0 {
						delete(c.want, key)
					} else {
						c.want[key] = lrv
					}
				} else if deleted {
					delete(c.want, key)
				} else {
					c.want[key] = ""
				}
			}
			if cmp >= 0 {
				c.passed()
				return true
			}
			return len(c.want) == 0
		}
	}
	target, ok := c.want[key]
	if !ok {
		return len(c.want) == 0
	}
	switch {
	case target == "":
		// Must be deleted: a delete, or a newer incarnation after R
		// (handled above).
		if deleted {
			delete(c.want, key)
		}
	case rv != "":
		if cmp, err := resourceversion.CompareResourceVersion(rv, target); err == nil && cmp >= 0 {
			delete(c.want, key)
		}
	}
	return len(c.want) == 0
}

// ObserveProgress notes that the cache is current as of rv (a bookmark)
// and reports whether it has now caught up: at or after R, every event up
// to R was applied, and a key still pending was never brought (Missed).
func (c *Catchup) ObserveProgress(rv string) bool {
	if c.complete || len(c.want) == 0 {
		return true
	}
	if cmp, err := resourceversion.CompareResourceVersion(rv, c.ResourceVersion); err == nil && cmp >= 0 {
		c.passed()
	}
	return len(c.want) == 0
}

// passed ends the catch-up once the watch has passed R: what is still
// pending was missed.
func (c *Catchup) passed() {
	c.missed = c.WantKeys()
	slices.Sort(c.missed)
	c.Complete()
}

// Missed returns the keys the watch had not brought when it passed the
// list's resourceVersion, sorted: a key changed, created or deleted before
// R whose event never came. In one history there is none; any means the
// server's history is not the cache's (ErrOtherTimeline: a cluster
// restored from a backup whose resourceVersion has passed the cache's).
func (c *Catchup) Missed() []string { return c.missed }

// Complete marks the cache caught up (a complete list was applied).
func (c *Catchup) Complete() { c.want, c.listed, c.complete = map[string]string{}, nil, true }
