package indexer_test

import (
	"fmt"
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer/indexer"
	"github.com/boltinformer/boltinformer/internal/testobj"
)

func podKeys(pods []*corev1.Pod) ([]string, map[string]*corev1.Pod) {
	keys := make([]string, 0, len(pods))
	m := make(map[string]*corev1.Pod, len(pods))
	for _, p := range pods {
		k := keyOf(p)
		keys = append(keys, k)
		m[k] = p
	}
	sort.Strings(keys)
	return keys, m
}

func samePods(what string, want, got []*corev1.Pod) error {
	wk, wm := podKeys(want)
	gk, gm := podKeys(got)
	if fmt.Sprint(wk) != fmt.Sprint(gk) {
		return fmt.Errorf("%s: want %d pods %v, got %d pods %v", what, len(wk), wk, len(gk), gk)
	}
	for _, k := range wk {
		if err := sameObject(wm[k], gm[k]); err != nil {
			return fmt.Errorf("%s: %s: %w", what, k, err)
		}
	}
	return nil
}

var listerSelectors = []string{
	"",
	"app=app-3",
	"tier in (web,db)",
	"tier!=web,app",
	"app.kubernetes.io/component=backend,tier=cache",
	"missing-label",
}

// compareListers compares a generated lister over client-go's indexer with
// the same lister over ours.
func compareListers(want, got corev1listers.PodLister, namespaces []string, names []string) error {
	sels := []labels.Selector{labels.Everything(), labels.Nothing()}
	for _, s := range listerSelectors[1:] {
		sel, err := labels.Parse(s)
		if err != nil {
			return err
		}
		sels = append(sels, sel)
	}
	for _, sel := range sels {
		w, werr := want.List(sel)
		g, gerr := got.List(sel)
		if err := errorParity("List", werr, gerr); err != nil {
			return err
		}
		if err := samePods(fmt.Sprintf("List(%q)", sel), w, g); err != nil {
			return err
		}
		for _, ns := range namespaces {
			w, werr := want.Pods(ns).List(sel)
			g, gerr := got.Pods(ns).List(sel)
			if err := errorParity("Pods.List", werr, gerr); err != nil {
				return err
			}
			if err := samePods(fmt.Sprintf("Pods(%q).List(%q)", ns, sel), w, g); err != nil {
				return err
			}
		}
	}
	for _, ns := range namespaces {
		for _, name := range names {
			w, werr := want.Pods(ns).Get(name)
			g, gerr := got.Pods(ns).Get(name)
			what := fmt.Sprintf("Pods(%q).Get(%q)", ns, name)
			if err := errorParity(what, werr, gerr); err != nil {
				return err
			}
			if werr != nil {
				if apierrors.IsNotFound(werr) != apierrors.IsNotFound(gerr) {
					return fmt.Errorf("%s: want %v, got %v", what, werr, gerr)
				}
				continue
			}
			if err := sameObject(w, g); err != nil {
				return fmt.Errorf("%s: %w", what, err)
			}
		}
	}
	return nil
}

// TestPodLister checks that corev1listers.NewPodLister over our indexer
// answers exactly as over client-go's, in both modes, before and after a
// reopen, with and without a namespace index (without one, the lister
// falls back to List).
func TestPodLister(t *testing.T) {
	namespaces := []string{"ns-0", "ns-1", "ns-2", "ns-4", "ns-absent"}
	names := []string{"pod-000000", "pod-000001", "pod-000007", "pod-000299", "pod-999999"}
	for _, mode := range []indexer.Mode{indexer.Full, indexer.Bounded} {
		for _, withIndex := range []bool{true, false} {
			t.Run(fmt.Sprintf("mode=%s/namespace-index=%v", modeName(mode), withIndex), func(t *testing.T) {
				t.Parallel()
				ixs := func() cache.Indexers {
					if withIndex {
						return cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
					}
					return cache.Indexers{}
				}
				ref := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, ixs())
				sub := newSubject(t, subjectConfig{mode: mode, cacheSize: 10}, ixs())
				var list []any
				for i := range 300 {
					list = append(list, testobj.Pod(i, 5, 3, "100"))
				}
				for _, ix := range []cache.Indexer{ref, sub.x} {
					if err := ix.Replace(append([]any(nil), list...), "100"); err != nil {
						t.Fatal(err)
					}
					// Move one pod's labels and delete another.
					if err := ix.Update(newPod("ns-1", "pod-000001", "101", labeled("app", "app-3", "tier", "db"))); err != nil {
						t.Fatal(err)
					}
					if err := ix.Delete(list[7]); err != nil {
						t.Fatal(err)
					}
				}
				wantL, gotL := corev1listers.NewPodLister(ref), corev1listers.NewPodLister(sub.x)
				if err := compareListers(wantL, gotL, namespaces, names); err != nil {
					t.Fatal(err)
				}
				sub.reopen()
				gotL = corev1listers.NewPodLister(sub.x)
				if err := compareListers(wantL, gotL, namespaces, names); err != nil {
					t.Fatalf("after reopen: %v", err)
				}
				p, err := gotL.Pods("ns-1").Get("pod-000001")
				if err != nil || p.Labels["tier"] != "db" {
					t.Fatalf("Get after reopen: %v %v", p, err)
				}
			})
		}
	}
}
