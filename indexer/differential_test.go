package indexer_test

import (
	"fmt"
	"math/rand"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer/indexer"
	"github.com/boltinformer/boltinformer/store"
)

// diffKeys compares what both indexers hold without reading objects: keys,
// index names, index values and their keys, and the resourceVersion. It is
// cheap enough for every step of a long random history.
func diffKeys(want, got cache.Indexer) error {
	wantKeys, gotKeys := sortedCopy(want.ListKeys()), sortedCopy(got.ListKeys())
	if !slices.Equal(wantKeys, gotKeys) {
		return fmt.Errorf("ListKeys: want %v, got %v", wantKeys, gotKeys)
	}
	wn, gn := indexNames(want.GetIndexers()), indexNames(got.GetIndexers())
	if !slices.Equal(wn, gn) {
		return fmt.Errorf("GetIndexers: want %v, got %v", wn, gn)
	}
	for _, name := range wn {
		wv, gv := sortedCopy(want.ListIndexFuncValues(name)), sortedCopy(got.ListIndexFuncValues(name))
		if !slices.Equal(wv, gv) {
			return fmt.Errorf("ListIndexFuncValues(%q): want %q, got %q", name, wv, gv)
		}
		for _, v := range wv {
			wik, _ := want.IndexKeys(name, v)
			gik, err := got.IndexKeys(name, v)
			if err != nil || !slices.Equal(wik, gik) {
				return fmt.Errorf("IndexKeys(%q, %q): want %v, got %v (err %v)", name, v, wik, gik, err)
			}
		}
	}
	if w, g := want.LastStoreSyncResourceVersion(), got.LastStoreSyncResourceVersion(); w != g {
		return fmt.Errorf("LastStoreSyncResourceVersion: want %q, got %q", w, g)
	}
	return nil
}

// diffGet compares GetByKey of the given keys by key, UID and
// resourceVersion (the histories change content only with the
// resourceVersion; the periodic full comparisons compare content).
func diffGet(want, got cache.Indexer, keys []string) error {
	for _, k := range keys {
		w, wok, _ := want.GetByKey(k)
		g, gok, err := got.GetByKey(k)
		if err != nil || wok != gok {
			return fmt.Errorf("GetByKey(%q): want exists=%v, got exists=%v err=%v", k, wok, gok, err)
		}
		if !wok {
			continue
		}
		wm, _ := meta.Accessor(w)
		gm, err := meta.Accessor(g)
		if err != nil || keyOf(g) != k || gm.GetUID() != wm.GetUID() || gm.GetResourceVersion() != wm.GetResourceVersion() {
			return fmt.Errorf("GetByKey(%q): want %s, got %s", k, describe(w), describe(g))
		}
	}
	return nil
}

// history generates a random stream of operations over a small key space,
// so that keys are often re-added, moved between index values and deleted.
type history struct {
	r   *rand.Rand
	ref cache.Indexer // the reference, to pick current and stale objects
	rv  int
	// last holds every key's last generated version (a stale object once
	// the key is updated or deleted).
	last map[string]*corev1.Pod
}

var (
	histNamespaces = []string{"ns-a", "ns-b", "ns-c", ""}
	histNodes      = []string{"node-a", "node-b", "node-c", ""}
	histPhases     = []corev1.PodPhase{corev1.PodPending, corev1.PodRunning, corev1.PodSucceeded}
	// extraIndexers are added at random; adding one twice is a conflict.
	extraIndexers = cache.Indexers{"phase": phaseIndexFunc, "tier": tierIndexFunc}
)

const histNames = 12

func (h *history) nextRV() string {
	h.rv++
	return strconv.Itoa(h.rv)
}

func (h *history) randomKey() (ns, name string) {
	return histNamespaces[h.r.Intn(len(histNamespaces))], fmt.Sprintf("pod-%d", h.r.Intn(histNames))
}

// version makes a new version of ns/name with a new resourceVersion and
// random node, labels and phase.
func (h *history) version(ns, name string) *corev1.Pod {
	var kv []string
	if h.r.Intn(4) > 0 {
		kv = append(kv, "app", []string{"web", "db", "cache"}[h.r.Intn(3)])
	}
	if h.r.Intn(2) == 0 {
		kv = append(kv, "tier", []string{"front", "back"}[h.r.Intn(2)])
	}
	if h.r.Intn(5) == 0 {
		kv = append(kv, "extra", strconv.Itoa(h.r.Intn(2)))
	}
	p := newPod(ns, name, h.nextRV(), onNode(histNodes[h.r.Intn(len(histNodes))]), labeled(kv...),
		inPhase(histPhases[h.r.Intn(len(histPhases))]))
	h.last[keyOf(p)] = p
	return p
}

// deletable returns an object to delete: the current one, a stale one, or
// one that is absent.
func (h *history) deletable() any {
	ns, name := h.randomKey()
	key := keyOf(newPod(ns, name, "0"))
	cur, ok, _ := h.ref.GetByKey(key)
	switch {
	case ok && h.r.Intn(3) > 0:
		return cur
	case h.last[key] != nil:
		return h.last[key]
	default:
		return newPod(ns, name, h.nextRV())
	}
}

func (h *history) tombstone() any {
	obj := h.deletable()
	t := cache.DeletedFinalStateUnknown{Key: keyOf(obj)}
	if h.r.Intn(2) == 0 {
		t.Obj = obj
	}
	return t
}

// next returns the next step and the keys it may touch.
func (h *history) next() (step, []string) {
	switch n := h.r.Intn(100); {
	case n < 35:
		p := h.version(h.randomKey())
		if n%2 == 0 {
			return add(p), []string{keyOf(p)}
		}
		return update(p), []string{keyOf(p)}
	case n < 47:
		obj := h.deletable()
		return del(obj), []string{keyOf(obj)}
	case n < 54:
		t := h.tombstone().(cache.DeletedFinalStateUnknown)
		return tombstone(t.Key, t.Obj), []string{t.Key}
	case n < 60:
		var list []any
		var keys []string
		for _, ns := range histNamespaces {
			for i := range histNames {
				name := fmt.Sprintf("pod-%d", i)
				key := keyOf(newPod(ns, name, "0"))
				cur, ok, _ := h.ref.GetByKey(key)
				switch c := h.r.Intn(10); {
				case ok && c < 5:
					list = append(list, cur) // unchanged
				case c < 7:
					list = append(list, h.version(ns, name))
				}
				keys = append(keys, key)
			}
		}
		h.r.Shuffle(len(list), func(i, j int) { list[i], list[j] = list[j], list[i] })
		return replace(h.nextRV(), list...), keys
	case n < 75:
		var txns []cache.Transaction
		var keys []string
		for range 1 + h.r.Intn(8) {
			var t cache.Transaction
			switch c := h.r.Intn(20); {
			case c < 6:
				t = txAdd(h.version(h.randomKey()))
			case c < 12:
				t = txUpdate(h.version(h.randomKey()))
			case c < 16:
				t = txDelete(h.deletable())
			case c < 19:
				t = txDelete(h.tombstone())
			default:
				t = txAdd("not an object")
			}
			if k, err := cache.DeletionHandlingMetaNamespaceKeyFunc(t.Object); err == nil {
				keys = append(keys, k)
			}
			txns = append(txns, t)
		}
		return transaction(txns...), keys
	case n < 80:
		return bookmark(h.nextRV()), nil
	case n < 83:
		return resync, nil
	case n < 85:
		names := indexNames(extraIndexers)
		name := names[h.r.Intn(len(names))]
		return addIndexers(cache.Indexers{name: extraIndexers[name]}), nil
	case n < 88:
		return add("not an object"), nil
	default:
		p := h.version(h.randomKey())
		return update(p), []string{keyOf(p)}
	}
}

// differentialOps is the length of each random history: a few thousand by
// default, fewer under the race detector; BOLTINFORMER_DIFF_OPS overrides.
func differentialOps(t *testing.T) int {
	if s := os.Getenv("BOLTINFORMER_DIFF_OPS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("BOLTINFORMER_DIFF_OPS: %v", err)
		}
		return n
	}
	if raceEnabled || testing.Short() {
		return 600
	}
	return 2500
}

// TestDifferentialRandom applies random histories to client-go's indexer
// and ours, comparing keys, index contents, the resourceVersion and the
// touched objects (by UID and resourceVersion) after every step, everything
// (every object's content, every index query) every 150 steps and after every reopen, and flushing or closing
// and reopening ours at random points.
func TestDifferentialRandom(t *testing.T) {
	ops := differentialOps(t)
	for _, seed := range []int64{1, 2, 3, 4} {
		for _, c := range []struct {
			mode   indexer.Mode
			verify bool // Full loads read the records, not the snapshot
		}{{indexer.Full, false}, {indexer.Full, true}, {indexer.Bounded, false}} {
			mode := c.mode
			t.Run(fmt.Sprintf("seed=%d/mode=%s/verify=%t", seed, modeName(mode), c.verify), func(t *testing.T) {
				t.Parallel()
				r := rand.New(rand.NewSource(seed))
				committer := &store.CommitterOptions{
					MaxOps:   1 + r.Intn(40),
					MaxDelay: time.Duration(1+r.Intn(20)) * time.Millisecond,
				}
				ref := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, testIndexers())
				// fsync is not what this test is about (and costs most of its time).
				sub := newSubject(t, subjectConfig{mode: mode, cacheSize: 3, committer: committer, dbOpts: &store.Options{NoSync: true}, verifyRecords: c.verify}, testIndexers())
				h := &history{r: r, ref: ref, last: map[string]*corev1.Pod{}}
				full := func(when string) {
					t.Helper()
					if err := diffIndexers(ref, sub.x, diffOpts{shallow: true, probes: defaultProbes()}); err != nil {
						t.Fatalf("seed %d, %s: %v", seed, when, err)
					}
				}
				flushes := 0
				for i := range ops {
					s, touched := h.next()
					want, got := s.do(ref), s.do(sub.x)
					if want != got {
						t.Fatalf("seed %d, step %d (%s): client-go returned %q, ours %q", seed, i, s.name, want, got)
					}
					if err := diffKeys(ref, sub.x); err != nil {
						t.Fatalf("seed %d, after step %d (%s): %v", seed, i, s.name, err)
					}
					if err := diffGet(ref, sub.x, touched); err != nil {
						t.Fatalf("seed %d, after step %d (%s): %v", seed, i, s.name, err)
					}
					switch c := r.Intn(100); {
					case c < 1:
						sub.reopen()
						full(fmt.Sprintf("reopen after step %d", i))
					case c < 4:
						sub.flush()
						flushes++
					}
					if i%150 == 149 {
						full(fmt.Sprintf("after step %d", i))
					}
				}
				sub.reopen()
				if err := diffIndexers(ref, sub.x, diffOpts{probes: defaultProbes()}); err != nil {
					t.Fatalf("seed %d, final reopen: %v", seed, err)
				}
				t.Logf("%d ops, %d reopens, %d explicit flushes, %d objects at the end, %d indexes",
					ops, sub.reopens, flushes, len(ref.ListKeys()), len(ref.GetIndexers()))
			})
		}
	}
}

func modeName(m indexer.Mode) string {
	if m == indexer.Bounded {
		return "bounded"
	}
	return "full"
}
