package crashtest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/internal/codec"
	"github.com/boltinformer/boltinformer/store"
)

// ErrMismatch is wrapped by VerifyFile's and Compare's errors when the
// cache differs from the truth.
var ErrMismatch = errors.New("crashtest: cache differs from the truth")

// VerifyOptions configure VerifyFile. A nil *VerifyOptions means the
// defaults.
type VerifyOptions struct {
	// Example is an object of the informer's type. Default &corev1.Pod{}.
	Example runtime.Object
	// Scheme knows the informer's types when they are your own (what the
	// informer had as InformerOptions.Scheme); client-go's scheme is
	// consulted after it. Default: client-go's alone.
	Scheme *runtime.Scheme
	// Indexers are the informer's index functions: the values stored for
	// each index the state record names, and that has a function here, are
	// recomputed from the true object and compared.
	Indexers cache.Indexers
	// Sample decodes and compares the payloads of about this many objects
	// (spread over the keys); 0 decodes all of them, negative none.
	Sample int
	// Keyring opens encrypted payloads (the informer's).
	Keyring *boltinformer.Keyring
	// LockTimeout is how long to wait for the file lock. Default 5s.
	LockTimeout time.Duration
	// MaxDiffs bounds the differences reported. Default 20.
	MaxDiffs int
}

// FileState is what VerifyFile found in the file.
type FileState struct {
	// Size is the file's size in bytes.
	Size int64
	// State is the informer's state record, nil if it has none.
	State *store.State
	// RV is State.ResourceVersion as a number (0 when there is no state
	// or it is empty).
	RV int64
	// Objects is the number of object records.
	Objects int
	// Decoded is the number of payloads decoded and compared.
	Decoded int
}

// VerifyFile opens the cache file at path read-only and checks the
// informer's saved state against the truth with VerifyDB. The file must
// not be open for writing elsewhere (it waits LockTimeout for the lock).
func VerifyFile(path, informer string, truth func(rv int64) map[string]runtime.Object, opts *VerifyOptions) (*FileState, error) {
	timeout := 5 * time.Second
	if opts != nil && opts.LockTimeout > 0 {
		timeout = opts.LockTimeout
	}
	db, err := store.Open(path, &store.Options{ReadOnly: true, Timeout: timeout})
	if err != nil {
		return nil, fmt.Errorf("crashtest: open %s: %w", path, err)
	}
	defer db.Close()
	return VerifyDB(db, informer, truth, opts)
}

// VerifyDB checks the informer's saved state in db (what is on disk, not
// what an informer holds in memory) against the truth, invariant 1 of
// docs/ARCHITECTURE.md (the atomic resume point): store.DB.Check finds
// nothing; with r the saved resourceVersion, the objects are exactly
// truth(r): the same keys (no lost or phantom object), each with the true
// resourceVersion and UID (no stale one), payloads that decode to the true
// object (for Sample of them), and stored index values equal to the index
// functions applied to the true object. An informer without a state record
// must have no objects. It returns what it found, and an error wrapping
// ErrMismatch (or the check's error) listing the differences.
func VerifyDB(db *store.DB, informer string, truth func(rv int64) map[string]runtime.Object, opts *VerifyOptions) (*FileState, error) {
	o := VerifyOptions{}
	if opts != nil {
		o = *opts
	}
	if o.Example == nil {
		o.Example = &corev1.Pod{}
	}
	if o.MaxDiffs <= 0 {
		o.MaxDiffs = 20
	}
	path := db.Path()
	c, err := codec.New(o.Example, &codec.Options{Keyring: (*codec.Keyring)(o.Keyring), Scheme: o.Scheme})
	if err != nil {
		return nil, err
	}
	fs := &FileState{}
	if fs.Size, err = db.Size(); err != nil {
		return fs, err
	}
	probs, err := db.Check(nil)
	if err != nil {
		return fs, fmt.Errorf("crashtest: check %s: %w", path, err)
	}
	if len(probs) > 0 {
		errs := make([]error, 0, len(probs))
		for _, p := range probs {
			errs = append(errs, p)
		}
		return fs, fmt.Errorf("crashtest: check %s: %d problems: %w", path, len(probs), errors.Join(errs...))
	}
	d := &diffs{max: o.MaxDiffs}
	err = db.View(func(tx *store.Tx) error {
		st, err := tx.State(informer)
		if err != nil {
			return err
		}
		fs.State = st
		want := map[string]runtime.Object{}
		if st != nil && st.ResourceVersion != "" {
			fs.RV, err = strconv.ParseInt(st.ResourceVersion, 10, 64)
			if err != nil {
				return fmt.Errorf("crashtest: saved resourceVersion %q: %w", st.ResourceVersion, err)
			}
			want = truth(fs.RV)
		}
		var keys []string
		if err := tx.ForEachRaw(informer, func(key string, _ []byte) error {
			keys = append(keys, key)
			return nil
		}); err != nil {
			return err
		}
		fs.Objects = len(keys)
		every := 1
		if o.Sample > 0 && len(keys) > o.Sample {
			every = len(keys) / o.Sample
		}
		seen := make(map[string]bool, len(keys))
		for n, key := range keys {
			seen[key] = true
			r, err := tx.Get(informer, key)
			if err != nil {
				d.add("object %q: %v", key, err)
				continue
			}
			obj, ok := want[key]
			if !ok {
				d.add("phantom object %q (resourceVersion %s) not in the truth at %d", key, r.ResourceVersion, fs.RV)
				continue
			}
			m, err := meta.Accessor(obj)
			if err != nil {
				return err
			}
			if r.ResourceVersion != m.GetResourceVersion() || r.UID != string(m.GetUID()) {
				d.add("stale object %q: resourceVersion %s uid %s, truth at %d has %s uid %s", key, r.ResourceVersion, r.UID, fs.RV, m.GetResourceVersion(), m.GetUID())
				continue
			}
			if st != nil {
				for _, name := range st.Indexes {
					f := o.Indexers[name]
					if f == nil {
						continue
					}
					vals, err := f(obj)
					if err != nil {
						return err
					}
					if got, want := normalize(r.Values(name)), normalize(vals); !reflect.DeepEqual(got, want) {
						d.add("object %q index %q: stored values %q, want %q", key, name, got, want)
					}
				}
			}
			if o.Sample >= 0 && n%every == 0 {
				got, err := c.Decode(key, r)
				if err != nil {
					d.add("object %q: %v", key, err)
					continue
				}
				fs.Decoded++
				if !sameObject(got, obj) {
					d.add("object %q: payload differs from the truth at resourceVersion %s", key, m.GetResourceVersion())
				}
			}
		}
		var lost []string
		for key := range want {
			if !seen[key] {
				lost = append(lost, key)
			}
		}
		sort.Strings(lost)
		for _, key := range lost {
			d.add("lost object %q: in the truth at %d, not in the file", key, fs.RV)
		}
		return nil
	})
	if err != nil {
		return fs, fmt.Errorf("crashtest: read %s: %w", path, err)
	}
	return fs, d.err(fmt.Sprintf("%s informer %q at resourceVersion %d", path, informer, fs.RV))
}

// Compare checks a cache's objects (a cache.Store's List, e.g. an
// informer's indexer) against want by key, resourceVersion and content.
func Compare(got []any, want map[string]runtime.Object) error {
	d := &diffs{max: 20}
	seen := map[string]bool{}
	for _, g := range got {
		key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(g)
		if err != nil {
			return err
		}
		seen[key] = true
		w, ok := want[key]
		if !ok {
			d.add("phantom object %q", key)
			continue
		}
		gm, err1 := meta.Accessor(g)
		wm, err2 := meta.Accessor(w)
		if err := errors.Join(err1, err2); err != nil {
			return err
		}
		if gm.GetResourceVersion() != wm.GetResourceVersion() {
			d.add("stale object %q: resourceVersion %s, want %s", key, gm.GetResourceVersion(), wm.GetResourceVersion())
			continue
		}
		if ro, ok := g.(runtime.Object); !ok || !sameObject(ro, w) {
			d.add("object %q differs from the truth", key)
		}
	}
	var lost []string
	for key := range want {
		if !seen[key] {
			lost = append(lost, key)
		}
	}
	sort.Strings(lost)
	for _, key := range lost {
		d.add("lost object %q", key)
	}
	return d.err(fmt.Sprintf("%d objects, want %d", len(got), len(want)))
}

// sameObject compares two objects ignoring their TypeMeta (typed
// informers store none; a Source's objects may have one).
func sameObject(a, b runtime.Object) bool {
	a, b = a.DeepCopyObject(), b.DeepCopyObject()
	a.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
	b.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
	return apiequality.Semantic.DeepEqual(a, b)
}

func normalize(vals []string) []string {
	if len(vals) == 0 {
		return nil
	}
	out := append([]string(nil), vals...)
	sort.Strings(out)
	n := 1
	for _, v := range out[1:] {
		if v != out[n-1] {
			out[n] = v
			n++
		}
	}
	return out[:n]
}

type diffs struct {
	max, n int
	lines  []string
}

func (d *diffs) add(format string, args ...any) {
	d.n++
	if len(d.lines) < d.max {
		d.lines = append(d.lines, fmt.Sprintf(format, args...))
	}
}

func (d *diffs) err(what string) error {
	if d.n == 0 {
		return nil
	}
	more := ""
	if d.n > len(d.lines) {
		more = fmt.Sprintf("\n\t... and %d more", d.n-len(d.lines))
	}
	return fmt.Errorf("%w: %s: %d differences:\n\t%s%s", ErrMismatch, what, d.n, strings.Join(d.lines, "\n\t"), more)
}

// Quarantined returns the files in dir that recovery quarantined
// (<name>.corrupt-<timestamp>), sorted: after a kill there must be none.
func Quarantined(dir string) ([]string, error) {
	m, err := filepath.Glob(filepath.Join(dir, "*.corrupt-*"))
	if err != nil {
		return nil, err
	}
	sort.Strings(m)
	return m, nil
}

// FileSize returns the size of the file at path (0 if it does not exist).
func FileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}
