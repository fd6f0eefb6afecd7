package indexer_test

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	bolt "go.etcd.io/bbolt"

	"github.com/boltinformer/boltinformer/indexer"
	"github.com/boltinformer/boltinformer/internal/testobj"
	"github.com/boltinformer/boltinformer/store"
)

// lazySubject writes a history of n Pods to a Full indexer and to
// client-go's, closes ours and opens it again with the background fill
// held, so that every object but the probe is still on disk only.
func lazySubject(t *testing.T, n int) (*subject, cache.Indexer, func()) {
	t.Helper()
	ref := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, testIndexers())
	s := newSubject(t, subjectConfig{}, testIndexers())
	loadHistory(t, n, ref, s.x)
	release := indexer.HoldFill()
	t.Cleanup(func() {
		if release != nil {
			release()
		}
	})
	s.reopen()
	r := release
	release = nil
	return s, ref, r
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestLazyWarmLoad: after a warm load, keys are served before any payload
// is decoded; a Get decodes what it touches; writes to keys still on disk
// win over the disk; an index read first completes the decoding and the
// check of the loaded index values (verify.go), even with the background
// fill held; the result equals client-go's indexer.
func TestLazyWarmLoad(t *testing.T) {
	s, ref, release := lazySubject(t, 200)
	x := s.x
	if got := x.CachedObjects(); got > 1 {
		t.Fatalf("CachedObjects %d right after a warm load with the fill held, want at most the probe", got)
	}
	if isClosed(x.Decoded()) || isClosed(x.IndexesVerified()) {
		t.Fatal("Decoded or IndexesVerified closed before anything was decoded")
	}
	// Keys need no payload.
	if w, g := sortedCopy(ref.ListKeys()), sortedCopy(x.ListKeys()); fmt.Sprint(w) != fmt.Sprint(g) {
		t.Fatalf("ListKeys differ")
	}
	if x.Len() != len(ref.ListKeys()) {
		t.Fatalf("Len %d, want %d", x.Len(), len(ref.ListKeys()))
	}
	if got := x.CachedObjects(); got > 1 {
		t.Fatalf("CachedObjects %d after key-only reads", got)
	}
	// A Get decodes one object.
	keys := sortedCopy(ref.ListKeys())
	want, _, _ := ref.GetByKey(keys[7])
	got, ok, err := x.GetByKey(keys[7])
	if err != nil || !ok {
		t.Fatalf("GetByKey(%s): %v %v", keys[7], ok, err)
	}
	if err := sameObject(want, got); err != nil {
		t.Fatal(err)
	}
	if again, _, _ := x.GetByKey(keys[7]); again != got {
		t.Fatal("a second Get decoded again instead of returning the installed object")
	}
	if c := x.CachedObjects(); c != 2 && c != 1 {
		t.Fatalf("CachedObjects %d after one Get", c)
	}
	// Writes to lazy keys: an update, a delete, an add.
	upd := newPod("ns-2", "pod-000010", "9001", onNode("node-new"))
	if _, ok, _ := ref.GetByKey(keyOf(upd)); !ok {
		t.Fatalf("%s is not in the history", keyOf(upd))
	}
	del := testobj.Pod(20, 4, 3, "9002")
	applyBoth(t, func(ix cache.Indexer) error { return ix.Update(upd) }, ref, x)
	applyBoth(t, func(ix cache.Indexer) error { return ix.Delete(del) }, ref, x)
	applyBoth(t, func(ix cache.Indexer) error { return ix.Add(newPod("ns-9", "fresh", "9003")) }, ref, x)
	if isClosed(x.IndexesVerified()) {
		t.Fatal("IndexesVerified closed after reads by key and writes")
	}
	// An index read completes the decoding and the check first (but for
	// the namespace index's, which the keys check:
	// TestRegressionNamespaceIndexReadWaitsForEveryDecode).
	wantObjs, _ := ref.ByIndex("node", "node-1")
	gotObjs, err := x.ByIndex("node", "node-1")
	if err != nil || len(gotObjs) != len(wantObjs) {
		t.Fatalf("ByIndex: %d objects (%v), want %d", len(gotObjs), err, len(wantObjs))
	}
	wm, wk, _ := byKey(wantObjs)
	if err := (&comparer{}).compareObjects("ByIndex", wm, wk, gotObjs, false); err != nil {
		t.Fatal(err)
	}
	if !isClosed(x.IndexesVerified()) || !isClosed(x.Decoded()) {
		t.Fatal("IndexesVerified or Decoded not closed after an index read")
	}
	if c := x.CachedObjects(); c != x.Len() {
		t.Fatalf("CachedObjects %d after the fill, Len %d", c, x.Len())
	}
	release()
	if err := diffIndexers(ref, x, diffOpts{}); err != nil {
		t.Fatal(err)
	}
	s.reopen()
	if err := diffIndexers(ref, s.x, diffOpts{}); err != nil {
		t.Fatalf("after reopen: %v", err)
	}
}

// TestLazyListDecodesAll: List does not wait for the (held) background
// fill: it decodes what is left itself.
func TestLazyListDecodesAll(t *testing.T) {
	s, ref, release := lazySubject(t, 150)
	defer release()
	if err := diffIndexers(ref, s.x, diffOpts{}); err != nil {
		t.Fatal(err)
	}
	if !isClosed(s.x.Decoded()) {
		t.Fatal("Decoded not closed after List decoded everything")
	}
}

// TestLazyAddIndexers: a backfill after a warm load decodes what it needs.
func TestLazyAddIndexers(t *testing.T) {
	s, ref, release := lazySubject(t, 120)
	defer release()
	extra := cache.Indexers{"phase2": phaseIndexFunc}
	if err := ref.AddIndexers(extra); err != nil {
		t.Fatal(err)
	}
	if err := s.x.AddIndexers(extra); err != nil {
		t.Fatal(err)
	}
	if err := diffIndexers(ref, s.x, diffOpts{}); err != nil {
		t.Fatal(err)
	}
}

// TestLazyConcurrent: readers and writers race the background fill (run
// with -race); the end state equals client-go's.
func TestLazyConcurrent(t *testing.T) {
	s, ref, release := lazySubject(t, 400)
	x := s.x
	keys := sortedCopy(ref.ListKeys())
	var wg sync.WaitGroup
	for r := 0; r < 3; r++ {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			for i := r; i < len(keys); i += 3 {
				if _, _, err := x.GetByKey(keys[i]); err != nil {
					t.Error(err)
					return
				}
				if i%17 == 0 {
					_, _ = x.ByIndex("namespace", "ns-0")
				}
			}
		}(r)
	}
	// The writer is the only one to touch ref (client-go's indexer is
	// safe for concurrent use anyway).
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < len(keys); i += 5 {
			obj, _, _ := ref.GetByKey(keys[i])
			p := obj.(*corev1.Pod).DeepCopy()
			p.ResourceVersion = fmt.Sprint(20000 + i)
			p.Spec.NodeName = "node-raced"
			if i%2 == 0 {
				applyBoth(t, func(ix cache.Indexer) error { return ix.Delete(p) }, ref, x)
			} else {
				applyBoth(t, func(ix cache.Indexer) error { return ix.Update(p) }, ref, x)
			}
		}
	}()
	release()
	wg.Wait()
	<-x.Decoded()
	if err := diffIndexers(ref, x, diffOpts{}); err != nil {
		t.Fatal(err)
	}
	s.reopen()
	if err := diffIndexers(ref, s.x, diffOpts{}); err != nil {
		t.Fatalf("after reopen: %v", err)
	}
}

// closedSubject writes 30 Pods at resourceVersion 100 to a new Full
// indexer and closes it (Close writes the envelope snapshot); bad is a key
// to damage, not the first (that one is decoded at load).
func closedSubject(t *testing.T) (s *subject, list []any, bad string) {
	t.Helper()
	s = newSubject(t, subjectConfig{}, testIndexers())
	for i := range 30 {
		list = append(list, testobj.Pod(i, 3, 2, "100"))
	}
	if err := s.x.Replace(list, "100"); err != nil {
		t.Fatal(err)
	}
	s.close()
	keys := make([]string, len(list))
	for i, o := range list {
		keys[i] = keyOf(o)
	}
	sort.Strings(keys)
	return s, list, keys[len(keys)/2]
}

// updateInformer changes the informer's bucket in the closed file at path
// with bbolt directly.
func updateInformer(t *testing.T, path string, fn func(inf *bolt.Bucket) error) {
	t.Helper()
	b, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = b.Update(func(tx *bolt.Tx) error {
		return fn(tx.Bucket([]byte("informers")).Bucket([]byte(informerName)))
	})
	if cerr := b.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestLazyUndecodable: a record whose checksum is right but whose payload
// is not an object (only a writer bug or a crafted file makes one) is
// found when first read: Get returns ErrCorrupt, List leaves it out, the
// other objects are served, and a write from the server replaces it.
func TestLazyUndecodable(t *testing.T) {
	s, list, bad := closedSubject(t)
	updateInformer(t, s.path, func(inf *bolt.Bucket) error {
		objs := inf.Bucket([]byte("objects"))
		r, err := store.DecodeRecord(bad, objs.Get([]byte(bad)))
		if err != nil {
			return err
		}
		r.Payload = []byte{0x0a, 0xff, 0xff, 0xff}
		raw, err := store.EncodeRecord(bad, r)
		if err != nil {
			return err
		}
		return objs.Put([]byte(bad), raw)
	})
	db, err := store.Open(s.path, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.db = db
	x, err := indexer.Open(db, informerName, testIndexers(), &indexer.Options{Example: &corev1.Pod{}})
	if err != nil {
		t.Fatalf("Open with one undecodable record: %v", err)
	}
	s.x = x
	<-x.Decoded()
	if _, _, err := x.GetByKey(bad); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("GetByKey(undecodable): %v, want ErrCorrupt", err)
	}
	if n := len(x.List()); n != len(list)-1 {
		t.Fatalf("List has %d objects, want %d (all but the undecodable one)", n, len(list)-1)
	}
	if x.Undecodable() != 1 || x.Len() != len(list) {
		t.Fatalf("Undecodable %d, Len %d", x.Undecodable(), x.Len())
	}
	// The server's version replaces it.
	var fresh any
	for _, o := range list {
		if keyOf(o) == bad {
			p := o.(*corev1.Pod).DeepCopy()
			p.ResourceVersion = "200"
			fresh = p
		}
	}
	if err := x.Update(fresh); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := x.GetByKey(bad); err != nil || !ok || got != fresh {
		t.Fatalf("after the update: %v %v %v", got, ok, err)
	}
	if x.Undecodable() != 0 {
		t.Fatalf("Undecodable %d after the update", x.Undecodable())
	}
}

// TestSnapshotLoadFindsDamage: a warm load from the envelope snapshot
// reads no record; the fill then finds a record that is damaged, gone, or
// not the one the snapshot describes (a writer that is not ours changed
// it) and makes it undecodable, reporting it (the informer relists). With
// VerifyRecords the load reads the records instead: a damaged one is
// Open's error, and a changed one is simply loaded.
func TestSnapshotLoadFindsDamage(t *testing.T) {
	damages := []struct {
		name string
		// apply changes the record of key in objs.
		apply func(objs *bolt.Bucket, key string) error
		// verifyErr: Open with VerifyRecords fails.
		verifyErr bool
	}{
		{"flipped byte", func(objs *bolt.Bucket, key string) error {
			raw := append([]byte(nil), objs.Get([]byte(key))...)
			raw[len(raw)-10] ^= 0x04
			return objs.Put([]byte(key), raw)
		}, true},
		{"deleted", func(objs *bolt.Bucket, key string) error { return objs.Delete([]byte(key)) }, false},
		{"another resourceVersion", func(objs *bolt.Bucket, key string) error {
			r, err := store.DecodeRecord(key, objs.Get([]byte(key)))
			if err != nil {
				return err
			}
			var p corev1.Pod
			_, _, pb, err := store.SplitKubeProtobuf(r.Payload)
			if err != nil {
				return err
			}
			if err := p.Unmarshal(pb); err != nil {
				return err
			}
			p.ResourceVersion = "150"
			if pb, err = p.Marshal(); err != nil {
				return err
			}
			r.Payload = store.WrapKubeProtobuf("v1", "Pod", pb)
			r.ResourceVersion = "150"
			raw, err := store.EncodeRecord(key, r)
			if err != nil {
				return err
			}
			return objs.Put([]byte(key), raw)
		}, false},
	}
	for _, d := range damages {
		for _, verify := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/verify=%t", d.name, verify), func(t *testing.T) {
				s, list, bad := closedSubject(t)
				updateInformer(t, s.path, func(inf *bolt.Bucket) error {
					if inf.Get([]byte("snapshot")) == nil {
						return errors.New("Close wrote no snapshot")
					}
					return d.apply(inf.Bucket([]byte("objects")), bad)
				})
				db, err := store.Open(s.path, nil)
				if err != nil {
					t.Fatal(err)
				}
				s.db = db
				var reported int
				var mu sync.Mutex
				reportedOnce := make(chan struct{}, 1)
				x, err := indexer.Open(db, informerName, testIndexers(), &indexer.Options{Example: &corev1.Pod{}, VerifyRecords: verify,
					OnUndecodable: func(n int) {
						mu.Lock()
						reported += n
						mu.Unlock()
						reportedOnce <- struct{}{}
					}})
				if verify && d.verifyErr {
					if !errors.Is(err, store.ErrCorrupt) {
						t.Fatalf("Open with VerifyRecords over a damaged record: %v, want ErrCorrupt", err)
					}
					return
				}
				if err != nil {
					t.Fatalf("Open: %v", err)
				}
				s.x = x
				<-x.Decoded()
				if !verify {
					// The fill reports after it has installed (and Decoded
					// is closed).
					select {
					case <-reportedOnce:
					case <-time.After(10 * time.Second):
						t.Fatal("no report of the undecodable object")
					}
				}
				mu.Lock()
				defer mu.Unlock()
				if verify {
					// The records are the truth: what the file has is loaded.
					if reported != 0 || x.Undecodable() != 0 {
						t.Fatalf("reported %d, Undecodable %d", reported, x.Undecodable())
					}
					return
				}
				if _, _, err := x.GetByKey(bad); !errors.Is(err, store.ErrCorrupt) {
					t.Fatalf("GetByKey: %v, want ErrCorrupt", err)
				}
				if reported != 1 || x.Undecodable() != 1 || len(x.List()) != len(list)-1 {
					t.Fatalf("reported %d, Undecodable %d, List %d objects", reported, x.Undecodable(), len(x.List()))
				}
			})
		}
	}
}

// TestInitialListStreamsEachObjectOnce: InitialList hands over every
// loaded object exactly once, in batches, while the (held, then
// released) background fill, readers that decode lazy keys and a writer
// that replaces some race it (run with -race); in both modes.
func TestInitialListStreamsEachObjectOnce(t *testing.T) {
	for _, mode := range []indexer.Mode{indexer.Full, indexer.Bounded} {
		t.Run(modeName(mode), func(t *testing.T) {
			ref := cache.NewIndexer(cache.DeletionHandlingMetaNamespaceKeyFunc, testIndexers())
			s := newSubject(t, subjectConfig{mode: mode, cacheSize: 16}, testIndexers())
			loadHistory(t, 3000, ref, s.x)
			release := indexer.HoldFill()
			defer release()
			s.reopen()
			x := s.x
			keys := sortedCopy(ref.ListKeys())
			loaded := map[string]string{} // key -> resourceVersion
			for _, k := range keys {
				obj, _, _ := ref.GetByKey(k)
				loaded[k] = obj.(*corev1.Pod).ResourceVersion
			}
			var mu sync.Mutex
			got := map[string][]string{} // key -> resourceVersions handed over
			batches := 0
			done := make(chan struct{})
			go func() {
				defer close(done)
				x.InitialList(func(objs []any) {
					mu.Lock()
					defer mu.Unlock()
					batches++
					for _, o := range objs {
						p := o.(*corev1.Pod)
						k := p.Namespace + "/" + p.Name
						got[k] = append(got[k], p.ResourceVersion)
					}
				})
			}()
			written := map[string]string{}
			var wg sync.WaitGroup
			wg.Go(func() { // reads decode lazy keys
				for i := 0; i < len(keys); i += 7 {
					if _, _, err := x.GetByKey(keys[i]); err != nil {
						t.Error(err)
						return
					}
				}
			})
			for i := 3; i < len(keys); i += 11 { // writes replace others
				obj, _, _ := ref.GetByKey(keys[i])
				p := obj.(*corev1.Pod).DeepCopy()
				p.ResourceVersion = fmt.Sprint(90000 + i)
				written[keys[i]] = p.ResourceVersion
				if err := x.Update(p); err != nil {
					t.Fatal(err)
				}
				if i == 300 {
					release()
				}
			}
			wg.Wait()
			<-done
			if len(got) != len(keys) {
				t.Errorf("%d keys handed over, want %d", len(got), len(keys))
			}
			for _, k := range keys {
				rvs := got[k]
				switch {
				case len(rvs) != 1:
					t.Errorf("%s handed over %d times (%v)", k, len(rvs), rvs)
				case rvs[0] != loaded[k] && rvs[0] != written[k]:
					t.Errorf("%s handed over at resourceVersion %s, loaded %s, written %q", k, rvs[0], loaded[k], written[k])
				}
			}
			if batches < 2 {
				t.Errorf("%d batches: not streamed", batches)
			}
		})
	}
}
