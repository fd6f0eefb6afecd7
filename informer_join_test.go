package boltinformer_test

// Handlers that join a busy informer: each must get a consistent sequence
// (its initial list, then every change after it, nothing twice, nothing
// lost) that ends at the Source's objects. Checked for client-go and ours.

import (
	"fmt"
	"math/rand"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer/internal/testobj"
)

func TestDropInHandlersJoinWhileBusy(t *testing.T) {
	forEach(t, func(t *testing.T, build func(cache.ListerWatcher, time.Duration) cache.SharedIndexInformer) {
		s := newStream(t, 7)
		for range 30 {
			s.create()
		}
		inf := build(s.src, 0)
		tg := &target{name: "inf", inf: inf}
		s.start(tg)
		waitFor(t, "HasSynced", inf.HasSynced)

		// The stream runs in its own goroutine without waiting for the
		// informer; handlers join from this one meanwhile.
		rng := rand.New(rand.NewSource(8))
		streamRNG := rand.New(rand.NewSource(9))
		done := make(chan error, 1)
		go func() {
			done <- func() error {
				for i := range 600 {
					var err error
					switch r := i % 10; {
					case r < 4:
						_, err = s.src.Create(podFor(s, i))
					case r < 8:
						if key, ok := pickFrom(streamRNG, s.src.Objects()); ok {
							_, err = s.src.Update(bumpPod(s.src.Objects()[key], i))
						}
					default:
						if key, ok := pickFrom(streamRNG, s.src.Objects()); ok {
							err = s.src.Delete(key)
						}
					}
					if err != nil {
						return err
					}
					if i%150 == 149 {
						s.src.CloseWatches()
					}
				}
				return nil
			}()
		}()
		var joined []*evRecorder
		for i := range 12 {
			r := newEvRecorder(fmt.Sprintf("joined-%d", i))
			if _, err := inf.AddEventHandler(r); err != nil {
				t.Fatal(err)
			}
			joined = append(joined, r)
			time.Sleep(time.Duration(rng.Intn(3)) * time.Millisecond)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		key, _ := s.create()
		truth := s.src.Objects()
		for _, r := range append(joined, tg.early) {
			waitFor(t, r.name+" to get the last object", func() bool { return r.saw(key) })
			m := checkConsistent(t, r.name, r.events())
			if d := diffObjects(truth, m.list()); d != "" {
				t.Errorf("handler %s ends with objects other than the Source's: %s", r.name, d)
			}
		}
	})
}

// podFor returns a new Pod for the stream's next number (i only varies
// the content).
func podFor(s *stream, i int) *corev1.Pod {
	p := testobj.Pod(s.next, 3, 2, "")
	s.next++
	p.Labels["i"] = fmt.Sprint(i)
	return p
}

func pickFrom[V any](rng *rand.Rand, m map[string]V) (string, bool) {
	keys := sortedKeys(m)
	if len(keys) == 0 {
		return "", false
	}
	return keys[rng.Intn(len(keys))], true
}
