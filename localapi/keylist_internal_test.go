package localapi

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"sync"
	"testing"

	"github.com/boltinformer/boltinformer"
)

// TestKeyListAgainstModel applies random inserts, updates and removes to a
// keyList (enough keys to split and merge chunks) and checks, after each
// batch, its content, chunk sizes, seek and counts against a sorted map;
// every snapshot taken on the way must still hold what it held when taken
// (copy on write: a change never writes a chunk a snapshot holds).
func TestKeyListAgainstModel(t *testing.T) {
	for seed := range uint64(8) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 11))
			var l keyList
			model := map[string]*item{}
			type snap struct {
				chunks []*chunk
				want   []string
			}
			var snaps []snap
			flat := func(chunks []*chunk) []string {
				var out []string
				for _, c := range chunks {
					if len(c.keys) != len(c.items) || len(c.keys) == 0 {
						t.Fatalf("chunk of %d keys, %d items", len(c.keys), len(c.items))
					}
					for i, k := range c.keys {
						out = append(out, k+"="+rvOf(c.items[i].obj))
					}
				}
				return out
			}
			modelFlat := func() []string {
				var out []string
				for k, it := range model {
					out = append(out, k+"="+rvOf(it.obj))
				}
				sort.Strings(out)
				return out
			}
			keyspace := 1 + r.IntN(4000)
			for step := range 40 {
				for range 200 {
					k := fmt.Sprintf("ns-%d/p-%05d", r.IntN(7), r.IntN(keyspace))
					if r.IntN(3) == 0 {
						l.remove(k)
						delete(model, k)
					} else {
						it := &item{obj: testPod(k, step*1000+r.IntN(1000))}
						l.set(k, it)
						model[k] = it
					}
				}
				if step == 20 {
					// A reset, as a relist.
					keys := make([]string, 0, len(model))
					for k := range model {
						keys = append(keys, k)
					}
					sort.Strings(keys)
					items := make([]*item, len(keys))
					for i, k := range keys {
						items[i] = model[k]
					}
					l.reset(keys, items)
				}
				want := modelFlat()
				if got := flat(l.chunks); !slices.Equal(got, want) {
					t.Fatalf("step %d: %d entries, want %d", step, len(got), len(want))
				}
				for _, c := range l.chunks {
					if len(c.keys) > chunkMax {
						t.Fatalf("step %d: a chunk of %d keys", step, len(c.keys))
					}
				}
				if r.IntN(2) == 0 {
					snaps = append(snaps, snap{chunks: l.snapshot(), want: want})
				}
				for i, s := range snaps {
					if got := flat(s.chunks); !slices.Equal(got, s.want) {
						t.Fatalf("step %d: snapshot %d changed", step, i)
					}
				}
				// countAfter of a snapshot of now, against the model.
				sn := &snapshot{chunks: l.snapshot()}
				for _, prefix := range []string{"", "ns-3/", "ns-9/"} {
					for _, after := range []string{"", "ns-3/p-00100", "ns-5/p-03999"} {
						n := 0
						for k := range model {
							if k > after && hasPrefix(k, prefix) {
								n++
							}
						}
						if got := sn.countAfter(after, prefix); got != n {
							t.Fatalf("step %d: countAfter(%q, %q) = %d, want %d", step, after, prefix, got, n)
						}
					}
				}
			}
		})
	}
}

// TestSnapshotsUnderConcurrentChanges: readers take snapshots under the
// view's read lock and walk them outside it while the informer applies
// inserts, updates and deletes (chunks split and merge); each walk is
// exactly the state at the resourceVersion taken with its snapshot
// (run with -race: no snapshot is written after it is taken).
func TestSnapshotsUnderConcurrentChanges(t *testing.T) {
	v := newView(64, nil)
	v.initLocked(boltinformer.ObservedState{ResourceVersion: "1", Synced: true})
	const keys = 3000
	type version struct {
		rv      int
		present bool
	}
	var histMu sync.Mutex
	hist := make([][]version, keys) // per key, in rv order
	key := func(i int) string { return fmt.Sprintf("ns-%d/p-%05d", i%5, i) }
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				v.mu.RLock()
				snap, rv := v.snapshotLocked(v.next), v.rv
				v.mu.RUnlock()
				at, _ := strconv.Atoi(rv)
				got := map[string]int{}
				prev := ""
				snap.walk("", "", func(k string, it *item) bool {
					if k <= prev {
						t.Errorf("keys out of order: %q after %q", k, prev)
					}
					prev = k
					got[k], _ = strconv.Atoi(rvOf(it.obj))
					return true
				})
				histMu.Lock()
				for i := range keys {
					want := 0
					for _, h := range hist[i] {
						if h.rv > at {
							break
						}
						want = 0
						if h.present {
							want = h.rv
						}
					}
					if got[key(i)] != want {
						t.Errorf("at rv %d, %s is at %d, want %d", at, key(i), got[key(i)], want)
						histMu.Unlock()
						return
					}
				}
				histMu.Unlock()
			}
		}()
	}
	r := rand.New(rand.NewPCG(3, 4))
	for rv := 2; rv < 6000; rv++ {
		i := r.IntN(keys)
		k := key(i)
		present := r.IntN(4) != 0
		histMu.Lock()
		hist[i] = append(hist[i], version{rv: rv, present: present})
		histMu.Unlock()
		if present {
			v.apply(boltinformer.Change{Type: boltinformer.ChangeUpsert, Key: k, Object: testPod(k, rv), ResourceVersion: strconv.Itoa(rv)})
		} else {
			v.apply(boltinformer.Change{Type: boltinformer.ChangeDelete, Key: k, Object: testPod(k, rv), ResourceVersion: strconv.Itoa(rv)})
		}
	}
	close(done)
	wg.Wait()
}
