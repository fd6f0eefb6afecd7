package boltinformer_test

// Identity (invariant 5 of docs/ARCHITECTURE.md): a file saved for another
// cluster, resource, list options or transform is not resumed; the informer
// cold-starts, and the old objects stay on disk until the new list commits.

import (
	"context"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/internal/testobj"
	"github.com/boltinformer/boltinformer/recovery"
	"github.com/boltinformer/boltinformer/store"
)

// dropAnnotations is the transform of these tests.
func dropAnnotations(obj any) (any, error) {
	if p, ok := obj.(*corev1.Pod); ok {
		p = p.DeepCopy()
		p.Annotations = nil
		return p, nil
	}
	return obj, nil
}

// fileState reads an informer (default "pods") from the open DB's file:
// its state record and its object keys.
func fileState(t *testing.T, db *boltinformer.DB, informer ...string) (*store.State, []string) {
	name := "pods"
	if len(informer) > 0 {
		name = informer[0]
	}
	t.Helper()
	var st *store.State
	var keys []string
	err := db.Store().View(func(tx *store.Tx) error {
		var err error
		if st, err = tx.State(name); err != nil {
			return err
		}
		return tx.ForEach(name, func(key string, _ *store.Record) error {
			keys = append(keys, key)
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if st == nil {
		t.Fatalf("no state record for %s", name)
	}
	return st, keys
}

func TestIdentityChangeColdStarts(t *testing.T) {
	base := boltinformer.InformerOptions{
		ClusterID:   "cluster-a",
		Resource:    "/v1, Resource=pods",
		ListOptions: boltinformer.ListOptionsFingerprint("", metav1.ListOptions{LabelSelector: "tier=web"}),
		TransformID: "none",
	}
	cases := []struct {
		name   string
		change func(*boltinformer.InformerOptions)
		reason string
		xform  bool
	}{
		{"list-options", func(o *boltinformer.InformerOptions) {
			o.ListOptions = boltinformer.ListOptionsFingerprint("", metav1.ListOptions{LabelSelector: "tier=db"})
		}, recovery.ReasonListOptions, false},
		{"cluster", func(o *boltinformer.InformerOptions) { o.ClusterID = "cluster-b" }, recovery.ReasonCluster, false},
		{"resource", func(o *boltinformer.InformerOptions) { o.Resource = "/v1, Resource=pods-renamed" }, recovery.ReasonResource, false},
		{"transform", func(o *boltinformer.InformerOptions) { o.TransformID = "drop-annotations/v1" }, recovery.ReasonTransform, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "cache.db")
			old := &cacheFile{t: t, path: path, src: newPodSource()}
			for i := range 10 {
				if _, err := old.src.Create(testobj.Pod(i, 3, 2, "")); err != nil {
					t.Fatal(err)
				}
			}
			opts := base
			r := old.open(nil, &opts)
			r.run()
			r.waitSynced()
			r.waitApplied()
			r.close()
			oldKeys := sortedKeys(old.src.Objects())
			oldRV := old.src.ResourceVersion()

			// What the changed informer selects: other objects, from a
			// Source that is down at first.
			f := &cacheFile{t: t, path: path, src: newPodSource()}
			for i := 100; i < 105; i++ {
				if _, err := f.src.Create(testobj.Pod(i, 3, 2, "")); err != nil {
					t.Fatal(err)
				}
			}
			f.src.SetDown(true)
			changed := base
			tc.change(&changed)
			r = f.open(nil, &changed)
			if tc.xform {
				if err := r.inf.SetTransform(dropAnnotations); err != nil {
					t.Fatal(err)
				}
			}
			if d := r.inf.Decision(); d.Warm || d.Reason != tc.reason {
				t.Fatalf("decision %+v, want a cold start for %s", d, tc.reason)
			}
			if n := len(r.inf.GetIndexer().ListKeys()); n != 0 {
				t.Fatalf("cold start serves %d objects of the old identity", n)
			}
			checkOld := func(when string) {
				t.Helper()
				st, keys := fileState(t, r.db)
				if st.ResourceVersion != oldRV || st.ClusterID != base.ClusterID || st.Resource != base.Resource ||
					st.ListOptions != base.ListOptions || st.Transform != base.TransformID {
					t.Fatalf("%s: the file's state %+v is no longer the old one", when, st)
				}
				if fmtKeys(keys) != fmtKeys(oldKeys) {
					t.Fatalf("%s: the file holds %v, want the old objects %v", when, keys, oldKeys)
				}
			}
			checkOld("before Run")
			r.run()
			waitFor(t, "a failed list", func() bool { return f.src.Calls().Errors >= 1 })
			if err := r.db.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			checkOld("while the list fails")
			if r.inf.HasSynced() {
				t.Fatal("a cold start synced without a list")
			}

			f.src.SetDown(false)
			r.waitSynced()
			want := f.src.Objects()
			if tc.xform {
				for k, o := range want {
					p, _ := dropAnnotations(o)
					want[k] = p.(*corev1.Pod)
				}
			}
			waitFor(t, "the new objects", func() bool { return diffObjects(want, r.inf.GetStore().List()) == "" })
			if c := f.src.Calls(); c.Lists != 1 {
				t.Fatalf("%d lists (calls %v), want 1", c.Lists, c.Log)
			}
			if err := r.db.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			st, keys := fileState(t, r.db)
			if st.ResourceVersion != f.src.ResourceVersion() || st.ClusterID != changed.ClusterID || st.Resource != changed.Resource ||
				st.ListOptions != changed.ListOptions || st.Transform != changed.TransformID || !st.Synced {
				t.Fatalf("after the list committed: state %+v, want the new identity at rv %s", st, f.src.ResourceVersion())
			}
			if fmtKeys(keys) != fmtKeys(sortedKeys(want)) {
				t.Fatalf("after the list committed: the file holds %v, want %v", keys, sortedKeys(want))
			}
			r.close()

			// The new identity resumes.
			r = f.open(nil, &changed)
			if d := r.inf.Decision(); !d.Warm {
				t.Fatalf("decision %+v after the new list, want warm", d)
			}
			if d := diffObjects(want, r.inf.GetIndexer().List()); d != "" {
				t.Fatalf("reopened: %s", d)
			}
		})
	}
}

// fmtKeys returns keys sorted and joined, to compare sets of keys.
func fmtKeys(keys []string) string {
	s := append([]string(nil), keys...)
	sort.Strings(s)
	return strings.Join(s, ",")
}

// TestUnknownClusterResumes: an informer that could not learn its cluster
// identity (ClusterID "", e.g. an agent starting offline) trusts its file.
func TestUnknownClusterResumes(t *testing.T) {
	f := &cacheFile{t: t, path: filepath.Join(t.TempDir(), "cache.db"), src: newPodSource()}
	for i := range 5 {
		if _, err := f.src.Create(testobj.Pod(i, 3, 2, "")); err != nil {
			t.Fatal(err)
		}
	}
	r := f.open(nil, &boltinformer.InformerOptions{ClusterID: "cluster-a"})
	r.run()
	r.waitSynced()
	r.waitApplied()
	r.close()
	r = f.open(nil, &boltinformer.InformerOptions{ClusterID: ""})
	if d := r.inf.Decision(); !d.Warm {
		t.Fatalf("decision %+v, want warm", d)
	}
}

// TestTooLargeResourceVersionConverges: the file was saved against a
// server whose history went further than this one's (a restored or other
// cluster with the same identity): the resume gets "Too large resource
// version", the informer relists, and the cache converges to this server,
// the objects it does not have deleted.
func TestTooLargeResourceVersionConverges(t *testing.T) {
	f := newCacheFile(t, 20)
	for i := range 10 {
		if _, err := f.src.Update(bumpPod(f.src.Objects()["ns-0/pod-000000"], i)); err != nil {
			t.Fatal(err)
		}
	}
	r := f.open(nil, nil)
	r.run()
	r.waitApplied()
	r.close()
	before := f.src.Objects()

	other := &cacheFile{t: t, path: f.path, src: newPodSource()}
	for i := 15; i < 25; i++ {
		if _, err := other.src.Create(testobj.Pod(i, 3, 2, "")); err != nil {
			t.Fatal(err)
		}
	}
	r = other.open(nil, nil)
	if !r.inf.Decision().Warm {
		t.Fatalf("decision %+v", r.inf.Decision())
	}
	r.run()
	waitFor(t, "the store to converge to the other server", func() bool {
		return diffObjects(other.src.Objects(), r.inf.GetStore().List()) == ""
	})
	// Its resourceVersions are not comparable with the file's, so the
	// handler is checked by what it was told, not with the model.
	deleted := map[string]bool{}
	waitFor(t, "the deletes of the objects the other server lacks", func() bool {
		for _, e := range r.rec.events()[len(before):] {
			if e.Kind == "delete" {
				deleted[e.Key] = true
			}
		}
		return len(deleted) == 15
	})
	for k := range deleted {
		if _, ok := other.src.Objects()[k]; ok {
			t.Fatalf("%s deleted but the other server has it", k)
		}
	}
	if err := r.inf.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := r.inf.Indexer().SavedState().ResourceVersion; got != other.src.ResourceVersion() {
		t.Fatalf("saved resourceVersion %s, want %s", got, other.src.ResourceVersion())
	}
}
