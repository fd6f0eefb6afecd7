package boltinformer_test

// Informers no longer used stay in the file until dropped (issue 23, item
// 10): DB.SavedInformers, DropInformers and DropUnused.

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/recovery/crashtest"
	"github.com/boltinformer/boltinformer/store"
)

// savedBatch is a batch that fills informer with n objects at rv: records
// the store checks (checksums, index entries), under a Resource no test
// informer has (a NewInformer of the name starts cold and never loads
// them).
func savedBatch(informer string, n int, rv string) *store.Batch {
	b := &store.Batch{Informer: informer, State: &store.State{ResourceVersion: rv, Synced: true,
		Resource: "test/saved", Indexes: []string{"namespace"}}}
	for i := range n {
		r := &store.Record{UID: fmt.Sprintf("uid-%s-%d", informer, i), ResourceVersion: rv, Codec: store.CodecJSON,
			Payload: fmt.Appendf(nil, `{"i":%d}`, i)}
		r.SetIndexed(map[string][]string{"namespace": {"ns"}})
		b.Ops = append(b.Ops, store.Op{Key: fmt.Sprintf("ns/%s-%d", informer, i), Record: r})
	}
	return b
}

// savedNames returns the names SavedInformers lists.
func savedNames(t testing.TB, db *boltinformer.DB) []string {
	t.Helper()
	saved, err := db.SavedInformers()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, si := range saved {
		names = append(names, si.Name)
	}
	return names
}

// TestDropInformers: the named informers' data leave the file in one
// transaction; an informer of the DB with one of the names, or a name the
// file lacks, refuses the whole drop; an informer built after the drop
// starts cold.
func TestDropInformers(t *testing.T) {
	f := newCacheFile(t, 10) // informer "pods", filled by a run
	db, err := boltinformer.Open(f.path, &boltinformer.Options{Logger: &quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Store().Commit(savedBatch("a", 5, "7"), savedBatch("b", 5, "7")); err != nil {
		t.Fatal(err)
	}
	if got := savedNames(t, db); !slices.Equal(got, []string{"a", "b", "pods"}) {
		t.Fatalf("saved %v", got)
	}
	inf, err := db.NewInformer("pods", f.src, &corev1.Pod{}, 0, podIndexers(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !inf.Decision().Warm {
		t.Fatalf("pods: %+v, want warm", inf.Decision())
	}
	saved, err := db.SavedInformers()
	if err != nil {
		t.Fatal(err)
	}
	if p := saved[2]; p.Name != "pods" || !p.Open || !p.Used || p.Objects != 10 || p.LastCommit.IsZero() || p.Resource != boltinformer.DefaultResource(&corev1.Pod{}) {
		t.Fatalf("pods saved as %+v", p)
	}
	if a := saved[0]; a.Open || a.Used || a.Objects != 5 {
		t.Fatalf("a saved as %+v", a)
	}
	if err := db.DropInformers("a", "pods"); !errors.Is(err, boltinformer.ErrInformerExists) {
		t.Fatalf("drop of an open informer: %v, want ErrInformerExists", err)
	}
	if err := db.DropInformers("a", "nope"); !errors.Is(err, boltinformer.ErrNoInformer) {
		t.Fatalf("drop of a name the file lacks: %v, want ErrNoInformer", err)
	}
	if got := savedNames(t, db); !slices.Equal(got, []string{"a", "b", "pods"}) {
		t.Fatalf("a refused drop removed something: %v", got)
	}
	if err := db.Release(inf); err != nil {
		t.Fatal(err)
	}
	if err := db.DropInformers("a", "pods"); err != nil {
		t.Fatal(err)
	}
	if got := savedNames(t, db); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("after the drop: %v", got)
	}
	checkFile(t, db)
	inf, err = db.NewInformer("pods", f.src, &corev1.Pod{}, 0, podIndexers(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := inf.Decision(); d.Warm {
		t.Fatalf("pods after its drop: %+v, want cold", d)
	}
	stop := runInformer(t, inf)
	waitFor(t, "the cold start's list", inf.HasSynced)
	stop()
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if err := db.DropInformers("b"); !errors.Is(err, boltinformer.ErrClosed) {
		t.Fatalf("drop after Close: %v, want ErrClosed", err)
	}
}

// TestDropInformersAllOrNothing: a drop whose transaction fails (the
// commit hook, as a crash or a full disk would) removes nothing.
func TestDropInformersAllOrNothing(t *testing.T) {
	var fail atomic.Bool
	db, err := boltinformer.Open(filepath.Join(t.TempDir(), "cache.db"), &boltinformer.Options{Logger: &quietLogger,
		BeforeCommit: func() error {
			if fail.Load() {
				return errors.New("failpoint")
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Store().Commit(savedBatch("a", 50, "7"), savedBatch("b", 50, "7")); err != nil {
		t.Fatal(err)
	}
	fail.Store(true)
	if err := db.DropInformers("a", "b"); err == nil || !strings.Contains(err.Error(), "failpoint") {
		t.Fatalf("drop with a failing commit: %v", err)
	}
	fail.Store(false)
	if got := savedNames(t, db); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("a failed drop removed %v", got)
	}
	checkFile(t, db)
}

// TestNewInformerWaitsForADrop: an informer built while a drop of its name
// is being committed starts after it, cold: had it loaded the data the
// drop is removing, its commits would bring back a state record over part
// of its objects.
func TestNewInformerWaitsForADrop(t *testing.T) {
	var hold atomic.Bool
	type built struct {
		inf *boltinformer.Informer
		err error
	}
	var db *boltinformer.DB
	got := make(chan built, 1)
	path := filepath.Join(t.TempDir(), "cache.db")
	src := podSource(t, 3)
	db, err := boltinformer.Open(path, &boltinformer.Options{Logger: &quietLogger,
		BeforeCommit: func() error {
			if !hold.Swap(false) {
				return nil
			}
			// Inside the drop's transaction: NewInformer now must wait.
			go func() {
				inf, err := db.NewInformer("pods", src, &corev1.Pod{}, 0, podIndexers(), nil)
				got <- built{inf, err}
			}()
			select {
			case b := <-got:
				got <- b // returned during the drop: the check below fails
			case <-time.After(200 * time.Millisecond): // the chance to return early; no threshold on success
			}
			return nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	inf, err := db.NewInformer("pods", src, &corev1.Pod{}, 0, podIndexers(), nil)
	if err != nil {
		t.Fatal(err)
	}
	stop := runInformer(t, inf)
	waitFor(t, "the first list", inf.HasSynced)
	stop()
	if err := db.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	hold.Store(true)
	if err := db.DropInformers("pods"); err != nil {
		t.Fatal(err)
	}
	b := <-got
	if b.err != nil {
		t.Fatal(b.err)
	}
	if d := b.inf.Decision(); d.Warm {
		t.Fatalf("built during the drop: %+v, want a cold start after it", d)
	}
}

// TestDropUnused: DropUnused drops what no informer of the DB has used
// since Open and what committed nothing for longer than it is given,
// among what match accepts; an open informer, a used one (stopped since)
// and a recent one stay.
func TestDropUnused(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	path := filepath.Join(t.TempDir(), "cache.db")
	db, err := boltinformer.Open(path, &boltinformer.Options{Logger: &quietLogger, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Store().Commit(savedBatch("cr/old", 3, "7"), savedBatch("cr/old-open", 3, "7"),
		savedBatch("cr/old-used", 3, "7"), savedBatch("other/old", 3, "7")); err != nil {
		t.Fatal(err)
	}
	clk.Step(2 * time.Hour)
	if err := db.Store().Commit(savedBatch("cr/recent", 3, "8")); err != nil {
		t.Fatal(err)
	}
	open, err := db.NewInformer("cr/old-open", newPodSource(), &corev1.Pod{}, 0, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	used, err := db.NewInformer("cr/old-used", newPodSource(), &corev1.Pod{}, 0, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Release(used); err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Minute)
	cr := func(name string) bool { return strings.HasPrefix(name, "cr/") }
	dropped, err := db.DropUnused(time.Hour, cr)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(dropped, []string{"cr/old"}) {
		t.Fatalf("dropped %v, want cr/old", dropped)
	}
	if got := savedNames(t, db); !slices.Equal(got, []string{"cr/old-open", "cr/old-used", "cr/recent", "other/old"}) {
		t.Fatalf("left %v", got)
	}
	if dropped, err := db.DropUnused(3*time.Hour, nil); err != nil || dropped != nil {
		t.Fatalf("nothing that old: dropped %v, %v", dropped, err)
	}
	if dropped, err := db.DropUnused(time.Hour, nil); err != nil || !slices.Equal(dropped, []string{"other/old"}) {
		t.Fatalf("match nil: dropped %v, %v; want other/old", dropped, err)
	}
	checkFile(t, db)
	_ = open
}

// TestDropInformersKill9: a process filling two informers in one commit
// and dropping both in one drop, over and over, is killed with SIGKILL at
// random moments; every file it leaves checks, opens without quarantine,
// and holds both informers, whole, or neither. The argument: a drop is one
// bbolt transaction, which bbolt makes durable by one meta page write
// after its data pages; a kill before that write leaves the previous
// meta page, and the file as before the drop.
func TestDropInformersKill9(t *testing.T) {
	const objects = 300
	dir := ""
	if !crashtest.IsChild() {
		dir = t.TempDir() // the children get it as Env.Dir
	}
	crashtest.Run(t, crashtest.Config{
		Dir:   dir,
		Kills: 20,
		Final: true,
		Seed:  23,
		// The kill timer starts at the first fill: the kills land amid
		// fills and drops.
		Plan: func(r *crashtest.Round) crashtest.Plan {
			return crashtest.Plan{KillAfter: "filled", Delay: time.Duration(r.Rand.Int64N(int64(50 * time.Millisecond)))}
		},
		Child: func(ctx context.Context, env *crashtest.Env) error {
			db, err := boltinformer.Open(filepath.Join(env.Dir, "cache.db"), &boltinformer.Options{Logger: &quietLogger})
			if err != nil {
				return err
			}
			defer db.Close()
			for round := 0; ctx.Err() == nil; round++ {
				rv := fmt.Sprint(round + 1)
				if err := db.Store().Commit(savedBatch("a", objects, rv), savedBatch("b", objects, rv)); err != nil {
					return err
				}
				env.Mark("filled", rv)
				if err := db.DropInformers("a", "b"); err != nil {
					return err
				}
				env.Mark("dropped", rv)
				if env.Final && round >= 2 {
					return nil
				}
			}
			return ctx.Err()
		},
		Check: func(t testing.TB, r *crashtest.Result) {
			t.Logf("run %d: killed %v after %d fills and %d drops", r.Run, r.Killed, r.Count("filled"), r.Count("dropped"))
			checkDropFile(t, filepath.Join(dir, "cache.db"), objects)
		},
	})
}

// checkDropFile checks the file TestDropInformersKill9's child left.
func checkDropFile(t testing.TB, path string, objects int64) {
	t.Helper()
	db, err := boltinformer.Open(path, &boltinformer.Options{Logger: &quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if q := db.Recovery().Quarantined; q != "" {
		t.Fatalf("the file was quarantined: %v", db.Recovery().Cause)
	}
	checkFile(t, db)
	saved, err := db.SavedInformers()
	if err != nil {
		t.Fatal(err)
	}
	switch len(saved) {
	case 0:
	case 2:
		for _, si := range saved {
			if si.Objects != objects || si.StateError != "" {
				t.Fatalf("informer %+v, want %d objects", si, objects)
			}
		}
	default:
		t.Fatalf("the file holds %+v: want both informers or neither", saved)
	}
}
