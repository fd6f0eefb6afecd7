package recovery_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/recovery/crashtest"
)

// The power-loss child: one process, traced by strace, that ingests a
// history into a cache file with real fsyncs, in three lives (a cold start
// that creates the file; a warm restart; a cold start over the file under
// other list options, with an index dropped and added back), and writes a
// marker line to the marks file after every acknowledged commit. The parent orders the
// markers against the file's writes and syncs in the trace.

// powerLossChildEnv names the directory of a power-loss child's files; set
// only in the child.
const powerLossChildEnv = "BOLTINFORMER_POWERLOSS_CHILD"

// powerLossConfig is what parent and child agree on: the history and how
// much of it each life ingests.
type powerLossConfig struct {
	Seed  uint64
	List  int64 // the server's events when the first life lists
	Live1 int64 // events appended live in the first life
	Live2 int64 // events the server moves on while the agent is down and appends live in the second
	Sync  bool  // false: Options.NoSync (the negative control's run)
}

// powerLossConfigEnv carries the config to the child.
const powerLossConfigEnv = "BOLTINFORMER_POWERLOSS_CHILD_CONFIG"

func (c powerLossConfig) env() string {
	return fmt.Sprintf("%s=%d,%d,%d,%d,%t", powerLossConfigEnv, c.Seed, c.List, c.Live1, c.Live2, c.Sync)
}

func powerLossConfigFromEnv() (powerLossConfig, error) {
	var c powerLossConfig
	if _, err := fmt.Sscanf(os.Getenv(powerLossConfigEnv), "%d,%d,%d,%d,%t", &c.Seed, &c.List, &c.Live1, &c.Live2, &c.Sync); err != nil {
		return c, fmt.Errorf("power-loss child: %s=%q: %w", powerLossConfigEnv, os.Getenv(powerLossConfigEnv), err)
	}
	return c, nil
}

// powerLossHistory is the truth of the power-loss test: small enough that
// a trace of every byte written stays a few tens of megabytes.
func powerLossHistory(seed uint64) *crashtest.History {
	return crashtest.NewHistory(seed, &crashtest.HistoryOptions{
		Keys: 120, Growth: 30, MaxKeys: 400, Namespaces: 4, Nodes: 6, DeletePercent: 15, MaxPadding: 2500,
	})
}

// Marker lines the child writes (one write(2) each).
const (
	markAck    = "ack"    // a commit returned: "ack <rv>"
	markClosed = "closed" // DB.Close returned: "closed <rv>"
	markLife   = "life"   // a life starts: "life <n>"
	markWarm   = "warm"   // the informer's start: "warm 1" or "warm 0"
)

// powerLossChild runs the child's two lives in dir.
func powerLossChild(dir string) error {
	cfg, err := powerLossConfigFromEnv()
	if err != nil {
		return err
	}
	marks, err := os.OpenFile(filepath.Join(dir, "marks"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer marks.Close()
	mark := func(name string, v int64) error {
		_, err := marks.WriteString(name + " " + strconv.FormatInt(v, 10) + "\n")
		return err
	}
	h := powerLossHistory(cfg.Seed)
	path := filepath.Join(dir, "cache.db")
	// First life: a cold start that creates the file, then live events.
	src := h.Source(0, cfg.List)
	if err := mark(markLife, 1); err != nil {
		return err
	}
	if err := powerLossLife(path, src, h, cfg.List, cfg.List+cfg.Live1, cfg.Sync, lifeOptions{}, mark); err != nil {
		return fmt.Errorf("first life: %w", err)
	}
	// The agent is down while the server moves on; the second life
	// resumes from the file.
	k := cfg.List + cfg.Live1 + cfg.Live2/4
	src = h.Source(cfg.List+cfg.Live1, k)
	if err := mark(markLife, 2); err != nil {
		return err
	}
	if err := powerLossLife(path, src, h, k, cfg.List+cfg.Live1+cfg.Live2, cfg.Sync, lifeOptions{}, mark); err != nil {
		return fmt.Errorf("second life: %w", err)
	}
	// Third life: other list options, so a cold start that replaces every
	// object in one commit; without the node index (dropped), which is
	// then added back (a backfill of every record); live events.
	end2 := cfg.List + cfg.Live1 + cfg.Live2
	k = end2 + cfg.Live2/4
	src = h.Source(end2, k)
	if err := mark(markLife, 3); err != nil {
		return err
	}
	if err := powerLossLife(path, src, h, k, end2+cfg.Live2/2, cfg.Sync, lifeOptions{listOptions: "other", backfill: true}, mark); err != nil {
		return fmt.Errorf("third life: %w", err)
	}
	return nil
}

// lifeOptions vary a life of the power-loss child.
type lifeOptions struct {
	listOptions string // the informer's; another one than the file's is a cold start
	backfill    bool   // open without the node index, add it once synced
}

// powerLossLife opens the file, runs the informer until it has applied
// events up to to (appending from+1..to live), and closes gracefully.
func powerLossLife(path string, src *crashtest.Source, h *crashtest.History, from, to int64, sync bool, lo lifeOptions, mark func(string, int64) error) error {
	var inf atomic.Pointer[boltinformer.Informer]
	var markErr atomic.Pointer[error]
	db, err := boltinformer.Open(path, &boltinformer.Options{
		CommitMaxOps:   40,
		CommitMaxDelay: time.Millisecond,
		NoSync:         !sync,
		OnCommit: func(info boltinformer.CommitInfo) {
			i := inf.Load()
			if info.Err != nil || i == nil {
				return
			}
			rv, err := strconv.ParseInt(i.Indexer().SavedState().ResourceVersion, 10, 64)
			if err == nil {
				err = mark(markAck, rv)
			}
			if err != nil {
				markErr.Store(&err)
			}
		},
	})
	if err != nil {
		return err
	}
	closeDB := func() error { return db.Close() }
	defer func() { _ = closeDB() }()
	i, err := db.NewInformer(informerName, src, &corev1.Pod{}, 0, crashIndexers(!lo.backfill), &boltinformer.InformerOptions{Resource: "pods", ListOptions: lo.listOptions})
	if err != nil {
		return err
	}
	inf.Store(i)
	warm := int64(0)
	if i.Decision().Warm {
		warm = 1
	}
	if err := mark(markWarm, warm); err != nil {
		return err
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); i.RunWithContext(ctx) }()
	stopInformer := func() { stop(); <-done }
	defer stopInformer()
	if !cache.WaitForCacheSync(ctx.Done(), i.HasSynced) {
		return errors.New("informer never synced")
	}
	if lo.backfill {
		if err := i.AddIndexers(cache.Indexers{nodeIndex: nodeIndexFunc}); err != nil {
			return err
		}
	}
	for n, e := range h.Events(from, to) {
		if err := src.Apply(e); err != nil {
			return err
		}
		if n%20 == 19 {
			// Let a few commits happen while events flow.
			time.Sleep(2 * time.Millisecond)
		}
	}
	want := src.ResourceVersion()
	for n := 0; i.Indexer().ResourceVersion() != want; n++ {
		if n == 6000 {
			return fmt.Errorf("informer at resourceVersion %s, source at %s", i.Indexer().ResourceVersion(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	stopInformer()
	if err := i.Health().CommitError; err != "" {
		return errors.New(err)
	}
	closeDB = func() error { return nil }
	if err := db.Close(); err != nil {
		return err
	}
	if p := markErr.Load(); p != nil {
		return *p
	}
	rv, err := strconv.ParseInt(want, 10, 64)
	if err != nil {
		return err
	}
	return mark(markClosed, rv)
}
