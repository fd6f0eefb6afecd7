package localapi

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/boltinformer/boltinformer"
)

func testPod(key string, rv int) *corev1.Pod {
	ns, name, _ := strings.Cut(key, "/")
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: strconv.Itoa(rv)}}
}

// TestViewAgainstModel applies random changes to a view with a small
// window and checks, after each, that every position in the window
// rebuilds exactly the state the model had there (objects, their order,
// a namespace's range, a page after a key), that resourceVersions map to
// the right positions, and that older ones are too old.
func TestViewAgainstModel(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { checkViewModel(t, seed) })
	}
}

func checkViewModel(t *testing.T, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 7))
	const capacity = 16
	v := newView(capacity, nil)
	v.initLocked(boltinformer.ObservedState{ResourceVersion: "1", Synced: true})
	type snap struct {
		rv   string
		objs map[string]string // key -> rv
	}
	// states[i] is the state after the i-th recorded event; states[0]
	// the start (or the last Replace).
	states := []snap{{rv: "1", objs: map[string]string{}}}
	rv := 1
	keys := []string{"a/x", "a/y", "a/z", "b/x", "b/yy", "c/q", "aa/x", "a/"}
	for step := range 300 {
		cur := states[len(states)-1]
		next := snap{objs: map[string]string{}}
		for k, v := range cur.objs {
			next.objs[k] = v
		}
		rv += 1 + r.IntN(3)
		key := keys[r.IntN(len(keys))]
		switch op := r.IntN(20); {
		case op < 12:
			v.apply(boltinformer.Change{Type: boltinformer.ChangeUpsert, Key: key, Object: testPod(key, rv), ResourceVersion: strconv.Itoa(rv)})
			next.objs[key] = strconv.Itoa(rv)
		case op < 17:
			if _, ok := cur.objs[key]; !ok {
				continue
			}
			v.apply(boltinformer.Change{Type: boltinformer.ChangeDelete, Key: key, Object: testPod(key, rv), ResourceVersion: strconv.Itoa(rv)})
			delete(next.objs, key)
		case op < 19:
			v.apply(boltinformer.Change{Type: boltinformer.ChangeBookmark, ResourceVersion: strconv.Itoa(rv)})
			// A bookmark moves the state's resourceVersion, not the state.
			states[len(states)-1].rv = strconv.Itoa(rv)
			continue
		default:
			var objs []any
			for k := range next.objs {
				next.objs[k] = strconv.Itoa(rv)
				objs = append(objs, testPod(k, rv))
			}
			v.apply(boltinformer.Change{Type: boltinformer.ChangeReplace, Objects: objs, ResourceVersion: strconv.Itoa(rv)})
			next.rv = strconv.Itoa(rv)
			states = []snap{next}
			continue
		}
		next.rv = strconv.Itoa(rv)
		states = append(states, next)
		if len(states) > capacity+1 {
			states = states[len(states)-capacity-1:]
		}
		v.mu.RLock()
		// Every retained position rebuilds its state.
		for i, st := range states {
			seq := v.next - uint64(len(states)-1-i)
			got, err := v.positionLocked(st.rv)
			if err != nil || got != seq {
				t.Fatalf("step %d: position(%s) = %d, %v; want %d", step, st.rv, got, err, seq)
			}
			for _, prefix := range []string{"", "a/", "b/"} {
				for _, start := range []string{"", "a/x", "a/z", "b/x"} {
					var want []string
					for k, krv := range st.objs {
						if strings.HasPrefix(k, prefix) && k > start {
							want = append(want, k+"@"+krv)
						}
					}
					sort.Strings(want)
					var gotObjs []string
					snap := v.snapshotLocked(seq)
					snap.walk(start, prefix, func(key string, it *item) bool {
						gotObjs = append(gotObjs, key+"@"+rvOf(it.obj))
						return true
					})
					if !slices.Equal(gotObjs, want) {
						t.Fatalf("step %d, state %d (rv %s), prefix %q after %q:\n got %v\nwant %v", step, i, st.rv, prefix, start, gotObjs, want)
					}
					if i == len(states)-1 && start != "" {
						if n := snap.countAfter(start, prefix); n != len(want) {
							t.Fatalf("step %d: countAfter(%q, %q) = %d, want %d", step, start, prefix, n, len(want))
						}
					}
				}
			}
		}
		// Older than the window: too old; newer than the view: too new.
		if n, _ := strconv.Atoi(v.startRV); n > 1 {
			if _, err := v.positionLocked(strconv.Itoa(n - 1)); err != errTooOld {
				t.Fatalf("step %d: position(%d) = %v, want too old", step, n-1, err)
			}
		}
		if _, err := v.positionLocked(strconv.Itoa(rv + 1)); err != errTooNew {
			t.Fatalf("step %d: position(%d) = %v, want too new", step, rv+1, err)
		}
		v.mu.RUnlock()
	}
}

// TestViewReplaceExpiresWatches: after a relist, even a cursor that was
// up to date is behind the window (its client must relist).
func TestViewReplaceExpiresWatches(t *testing.T) {
	v := newView(8, nil)
	v.initLocked(boltinformer.ObservedState{ResourceVersion: "5", Synced: true})
	v.apply(boltinformer.Change{Type: boltinformer.ChangeUpsert, Key: "a/b", Object: testPod("a/b", 6), ResourceVersion: "6"})
	cursor := v.next
	v.apply(boltinformer.Change{Type: boltinformer.ChangeReplace, Objects: []any{testPod("a/b", 9)}, ResourceVersion: "9"})
	if cursor >= v.first {
		t.Fatalf("cursor %d still in the window [%d, %d)", cursor, v.first, v.next)
	}
	if _, err := v.positionLocked("6"); err != errTooOld {
		t.Fatalf("position(6) after a relist at 9: %v, want too old", err)
	}
	if p, err := v.positionLocked("9"); err != nil || p != v.next {
		t.Fatalf("position(9) = %d, %v; want %d", p, err, v.next)
	}
}
