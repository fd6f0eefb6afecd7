package boltinformer_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/recovery/crashtest"
	"github.com/boltinformer/boltinformer/store"
)

// windowKeep is the window the kill test keeps.
const windowKeep = 300

// TestWindowSurvivesKill (issue 26 item 5): an informer that keeps its
// window (KeepWindow) and has an observer (as the local API) is killed
// with SIGKILL at random instants while watch events stream in. After
// every kill the file's window is exactly the history's last changes up to
// the file's resourceVersion: each change's key, type, object and the
// object before it (as the history had them), contiguous, and ending at
// the file's resourceVersion; never a change the file's objects do not
// hold, nor a gap. The next life's observer gets it (ObservedState.Window)
// and carries it on. BOLTINFORMER_CRASH_KILLS sets the kill count.
func TestWindowSurvivesKill(t *testing.T) {
	kills := 8
	if n, err := strconv.Atoi(os.Getenv("BOLTINFORMER_CRASH_KILLS")); err == nil && n > 0 {
		kills = min(n, 50)
	}
	var dir string
	if !crashtest.IsChild() {
		dir = t.TempDir()
	}
	history := crashtest.NewHistory(26, &crashtest.HistoryOptions{Keys: 40, Growth: 10, MaxKeys: 80})
	var saved int64
	nonEmpty := 0
	crashtest.Run(t, crashtest.Config{
		Kills: kills,
		Final: true,
		Seed:  26,
		Dir:   dir,
		Plan: func(r *crashtest.Round) crashtest.Plan {
			return crashtest.Plan{
				Args:      map[string]string{"k": fmt.Sprint(saved + int64(r.Rand.IntN(50))), "live": "1500"},
				KillAfter: "live",
				Delay:     time.Duration(r.Rand.IntN(300)) * time.Millisecond,
			}
		},
		Child: windowLife(history),
		Check: func(t testing.TB, r *crashtest.Result) {
			if r.ChildErr != "" {
				t.Fatalf("life %d: %s\n%s", r.Run, r.ChildErr, r.LogTail(20))
			}
			rv, n, err := checkWindowFile(filepath.Join(dir, "cache.db"), history)
			if err != nil {
				t.Fatalf("life %d (killed %t): %v", r.Run, r.Killed, err)
			}
			if rv < saved {
				t.Fatalf("life %d: the resourceVersion went back from %d to %d", r.Run, saved, rv)
			}
			if r.Run > 0 && n == 0 {
				t.Fatalf("life %d: the file keeps no window at resourceVersion %d", r.Run, rv)
			}
			if n > 0 {
				nonEmpty++
			}
			if m, ok := r.Find("window"); ok {
				t.Logf("life %d: killed=%t, file at %d with a window of %d changes; the life started with %s", r.Run, r.Killed, rv, n, m.Detail)
			}
			saved = rv
		},
	})
	if !crashtest.IsChild() && nonEmpty < kills {
		t.Fatalf("%d of %d lives left a window", nonEmpty, kills+1)
	}
}

// windowLife is one life: the Source holds history events 1..k, the
// informer starts (warm after the first life) with an observer, and
// events k+1..k+live stream in until it is killed (the final life: until
// it has them all).
func windowLife(h *crashtest.History) func(ctx context.Context, env *crashtest.Env) error {
	return func(ctx context.Context, env *crashtest.Env) error {
		k, live := env.IntArg("k"), env.IntArg("live")
		src := h.Source(0, k)
		db, err := boltinformer.Open(filepath.Join(env.Dir, "cache.db"), &boltinformer.Options{Logger: &quietLogger})
		if err != nil {
			return err
		}
		defer db.Close()
		inf, err := db.NewInformer("pods", src, &corev1.Pod{}, 0, nil, &boltinformer.InformerOptions{Resource: "/v1, Resource=pods"})
		if err != nil {
			return err
		}
		inf.KeepWindow(windowKeep)
		st, stop := inf.Observe(func(boltinformer.Change) {})
		defer stop()
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); inf.RunWithContext(runCtx) }()
		defer func() { cancel(); <-done }()
		for i := 0; !inf.HasSynced(); i++ {
			if i == 6000 {
				return fmt.Errorf("not synced")
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err := inf.Flush(ctx); err != nil {
			return err
		}
		env.Mark("window", len(st.Window), "changes at", st.ResourceVersion)
		env.Mark("live")
		for _, e := range h.Events(k, k+live) {
			if err := src.Apply(e); err != nil {
				return err
			}
		}
		if !env.Final {
			<-ctx.Done()
			return nil
		}
		want := src.ResourceVersion()
		for i := 0; inf.Indexer().ResourceVersion() != want; i++ {
			if i == 6000 {
				return fmt.Errorf("at %s, the source at %s", inf.Indexer().ResourceVersion(), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
		return inf.Flush(ctx)
	}
}

// checkWindowFile checks the window of the file at path against the
// history; it returns the file's resourceVersion and the window's length.
func checkWindowFile(path string, h *crashtest.History) (int64, int, error) {
	db, err := store.Open(path, &store.Options{ReadOnly: true, Timeout: 5 * time.Second})
	if err != nil {
		return 0, 0, err
	}
	defer db.Close()
	var st *store.State
	var evs []*store.WindowEvent
	var chunks []int
	if err := db.View(func(tx *store.Tx) error {
		if st, err = tx.State("pods"); err != nil {
			return err
		}
		if chunks, err = tx.WindowChunks("pods"); err != nil {
			return err
		}
		evs, err = tx.Window("pods")
		return err
	}); err != nil {
		return 0, 0, err
	}
	if st == nil {
		return 0, 0, nil
	}
	rv, err := strconv.ParseInt(st.ResourceVersion, 10, 64)
	if err != nil {
		return 0, 0, err
	}
	// Whole batches: without its oldest one the window holds fewer than
	// it keeps.
	if len(chunks) > 1 && len(evs)-chunks[0] >= windowKeep {
		return rv, len(evs), fmt.Errorf("the window holds %d changes in batches of %v: more than %d without the oldest", len(evs), chunks, windowKeep)
	}
	for i, e := range evs {
		erv, err := strconv.ParseInt(e.ResourceVersion, 10, 64)
		if err != nil {
			return rv, len(evs), fmt.Errorf("change %d: %w", i, err)
		}
		if i > 0 && e.PrevResourceVersion != evs[i-1].ResourceVersion {
			return rv, len(evs), fmt.Errorf("change %d at %d follows %s, not the change before (%s): a gap", i, erv, e.PrevResourceVersion, evs[i-1].ResourceVersion)
		}
		want := h.Event(erv)
		wantType := store.WindowUpsert
		if want.Type == watch.Deleted {
			wantType = store.WindowDelete
		}
		if e.Key != want.Key || e.Type != wantType {
			return rv, len(evs), fmt.Errorf("change %d at %d: %d %s, the history's is %s %s", i, erv, e.Type, e.Key, want.Type, want.Key)
		}
		if err := recordAt(e.Key, e.Object, want.Object); err != nil {
			return rv, len(evs), fmt.Errorf("change %d at %d (%s): the object: %w", i, erv, e.Key, err)
		}
		before := h.StateAt(erv - 1)[e.Key]
		if (before == nil) != (e.Prev == nil) || (e.Prev != nil && recordAt(e.Key, e.Prev, before) != nil) {
			return rv, len(evs), fmt.Errorf("change %d at %d (%s): the object before is not the history's", i, erv, e.Key)
		}
		if (want.Type == watch.Added) != (e.Prev == nil) && want.Type != watch.Deleted {
			return rv, len(evs), fmt.Errorf("change %d at %d (%s): %s with an object before: %t", i, erv, e.Key, want.Type, e.Prev != nil)
		}
	}
	if len(evs) > 0 && evs[len(evs)-1].ResourceVersion != st.ResourceVersion {
		return rv, len(evs), fmt.Errorf("the window ends at %s, the objects at %s", evs[len(evs)-1].ResourceVersion, st.ResourceVersion)
	}
	return rv, len(evs), nil
}

// recordAt checks that the record raw of key holds an object at want's
// resourceVersion.
func recordAt(key string, raw []byte, want any) error {
	r, err := store.ViewRecord(key, raw)
	if err != nil {
		return err
	}
	m, err := meta.Accessor(want)
	if err != nil {
		return err
	}
	if r.ResourceVersion != m.GetResourceVersion() {
		return fmt.Errorf("at %s, the history's at %s", r.ResourceVersion, m.GetResourceVersion())
	}
	return nil
}
