package recovery_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/recovery/crashtest"
)

// Environment switches of the crash loop (docs/RELIABILITY.md).
const (
	// killsEnv sets the number of kills (default defaultKills).
	killsEnv = "BOLTINFORMER_CRASH_KILLS"
	// seedEnv sets the seed of the history and of the plans.
	seedEnv = "BOLTINFORMER_CRASH_SEED"
)

const (
	defaultKills = 50
	informerName = "pods"
	nodeIndex    = "node"
)

// crashHistory is the truth the parent and every child share.
func crashHistory(seed uint64) *crashtest.History {
	return crashtest.NewHistory(seed, &crashtest.HistoryOptions{
		Keys: 300, Growth: 100, MaxKeys: 3000, Namespaces: 6, Nodes: 12, DeletePercent: 15, MaxPadding: 3000,
	})
}

func nodeIndexFunc(obj any) ([]string, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, fmt.Errorf("not a pod: %T", obj)
	}
	return []string{p.Spec.NodeName}, nil
}

func appIndexFunc(obj any) ([]string, error) {
	m, err := metaOf(obj)
	if err != nil {
		return nil, err
	}
	return []string{m.GetLabels()["app"]}, nil
}

func metaOf(obj any) (metav1.Object, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, fmt.Errorf("not a pod: %T", obj)
	}
	return p, nil
}

// crashIndexers are the child's indexes; the node index only with extra.
func crashIndexers(extra bool) cache.Indexers {
	ix := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc, "app": appIndexFunc}
	if extra {
		ix[nodeIndex] = nodeIndexFunc
	}
	return ix
}

// markingLW is the child's ListerWatcher: the Source, marking every call
// that reaches it (the disk answer of a warm start never does).
type markingLW struct {
	*crashtest.Source
	env    *crashtest.Env
	once   sync.Once
	listed chan struct{} // closed by the first List
}

func (l *markingLW) List(o metav1.ListOptions) (runtime.Object, error) {
	return l.ListWithContext(context.Background(), o)
}

func (l *markingLW) ListWithContext(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
	if o.Continue == "" {
		l.env.Mark("list", "rv="+o.ResourceVersion)
		l.once.Do(func() { close(l.listed) })
	}
	return l.Source.ListWithContext(ctx, o)
}

// ListMetadata marks "list" too (detail "metadata"): a fresh start's diff,
// and a partial relist's first request.
func (l *markingLW) ListMetadata(ctx context.Context, o metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
	l.env.Mark("list", "metadata")
	l.once.Do(func() { close(l.listed) })
	return l.Source.ListMetadata(ctx, o)
}

func (l *markingLW) Watch(o metav1.ListOptions) (watch.Interface, error) {
	return l.WatchWithContext(context.Background(), o)
}

func (l *markingLW) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	l.env.Mark("watch", "rv="+o.ResourceVersion)
	return l.Source.WatchWithContext(ctx, o)
}

// errInjected is the fault a child's BeforeCommit injects.
var errInjected = fmt.Errorf("crashtest: injected: %w", syscall.ENOSPC)

// crashChild is one life of an edge agent: rebuild the server (events
// 1..k of the history, compacted when asked), open the cache file, run the
// informer, and append live events at a high rate until killed. In the
// final run it catches up, stops gracefully and checks its own cache.
func crashChild(ctx context.Context, env *crashtest.Env) error {
	h := crashHistory(env.Seed)
	base, k, live := env.IntArg("base"), env.IntArg("k"), env.IntArg("live")
	src := h.Source(base, k)
	if env.BoolArg("compact") {
		src.Compact()
	}
	src.SetMaxPageSize(500)
	path := filepath.Join(env.Dir, "cache.db")
	faults := int(env.IntArg("faults"))
	faultRand := rand.New(rand.NewPCG(env.Seed, uint64(env.Run)+1<<32))
	env.Mark("start", fmt.Sprintf("base=%d k=%d live=%d", base, k, live))
	db, err := boltinformer.Open(path, &boltinformer.Options{
		CommitMaxOps:   200,
		CommitMaxDelay: 2 * time.Millisecond,
		Verify:         env.BoolArg("verify"),
		BeforeCommit: func() error {
			env.Mark("tx")
			if faults > 0 && faultRand.IntN(100) < faults {
				return errInjected
			}
			return nil
		},
		OnCommit: func(info boltinformer.CommitInfo) {
			env.Mark("commit", fmt.Sprintf("ops=%d size=%d failed=%t", info.Ops, crashtest.FileSize(path), info.Err != nil))
		},
	})
	if err != nil {
		return err
	}
	closeDB := func() error { return db.Close() }
	defer func() { _ = closeDB() }()
	lw := &markingLW{Source: src, env: env, listed: make(chan struct{})}
	iopts := &boltinformer.InformerOptions{
		Resource: "pods", ListOptions: env.Arg("listopts"), Memory: memoryMode(env.BoolArg("bounded")), CacheSize: 100,
	}
	fresh := env.BoolArg("fresh")
	if fresh {
		// Fresh resume: a metadata list diffed against the cache, and
		// partial relists after a 410.
		iopts.SyncPolicy, iopts.Metadata, iopts.Getter = boltinformer.SyncAfterFresh, lw, lw.Source
	}
	inf, err := db.NewInformer(informerName, lw, &corev1.Pod{}, 0, crashIndexers(env.BoolArg("extra")), iopts)
	if err != nil {
		return err
	}
	d := inf.Decision()
	env.Mark("open", fmt.Sprintf("warm=%t reason=%s objects=%d size=%d quarantined=%q", d.Warm, d.Reason, inf.Indexer().Len(), crashtest.FileSize(path), db.Recovery().Quarantined))
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); inf.RunWithContext(runCtx) }()
	stopInformer := func() { stop(); <-done }
	defer stopInformer()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return ctx.Err()
	}
	env.Mark("synced")
	if env.BoolArg("addidx") {
		env.Mark("backfill")
		if err := inf.AddIndexers(cache.Indexers{nodeIndex: nodeIndexFunc}); err != nil {
			return err
		}
		env.Mark("backfilled")
	}
	if env.BoolArg("compact") {
		// The resume gets 410 and the reflector relists after its
		// backoff: let the live events flow during the relist.
		select {
		case <-lw.listed:
		case <-time.After(10 * time.Second):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	env.Mark("live")
	for i, e := range h.Events(k, k+live) {
		if err := src.Apply(e); err != nil {
			return err
		}
		switch {
		case i%500 == 499:
			src.Bookmark()
		case i%25 == 24:
			time.Sleep(200 * time.Microsecond)
		}
	}
	env.Mark("live-done")
	if !env.Final {
		<-ctx.Done() // until killed
		return nil
	}
	want := src.ResourceVersion()
	for i := 0; inf.Indexer().ResourceVersion() != want; i++ {
		if i == 6000 {
			return fmt.Errorf("informer at resourceVersion %s, source at %s", inf.Indexer().ResourceVersion(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	stopInformer()
	if err := crashtest.Compare(inf.GetIndexer().List(), src.Objects()); err != nil {
		return err
	}
	if err := compareIndexes(inf.GetIndexer(), src.Objects()); err != nil {
		return err
	}
	if err := inf.Health().CommitError; err != "" {
		return errors.New(err)
	}
	if h := inf.Health(); !h.Fresh {
		return fmt.Errorf("caught up but not fresh: %+v", h)
	}
	closeDB = func() error { return nil }
	if err := db.Close(); err != nil {
		return err
	}
	env.Mark("closed", "rv="+want)
	return nil
}

func memoryMode(bounded bool) boltinformer.MemoryMode {
	if bounded {
		return boltinformer.BoundedMemory
	}
	return boltinformer.FullMemory
}

// compareIndexes checks every index of the informer's indexer against the
// index functions applied to the true objects.
func compareIndexes(x cache.Indexer, objs map[string]runtime.Object) error {
	for name, f := range x.GetIndexers() {
		want := map[string][]string{}
		for k, o := range objs {
			vals, err := f(o)
			if err != nil {
				return err
			}
			for _, v := range vals {
				want[v] = append(want[v], k)
			}
		}
		for v, keys := range want {
			sort.Strings(keys)
			got, err := x.IndexKeys(name, v)
			if err != nil {
				return err
			}
			if strings.Join(got, ",") != strings.Join(keys, ",") {
				return fmt.Errorf("index %q value %q: keys %v, want %v", name, v, got, keys)
			}
		}
		if got := x.ListIndexFuncValues(name); len(got) != len(want) {
			return fmt.Errorf("index %q has %d values, want %d", name, len(got), len(want))
		}
	}
	return nil
}

// fileView is what the parent knows of the file between runs.
type fileView struct {
	rv       int64
	synced   bool
	listopts string
	node     bool // the state names the node index
	size     int64
}

// crashStats are the counts the crash loop reports.
type crashStats struct {
	mu        sync.Mutex
	kills     int
	exited    int // kill runs that ended before the kill
	modes     map[string]int
	lastMarks map[string]int
	inCommit  int // killed between BeforeCommit and OnCommit
	grown     int // killed after the file grew in an unacknowledged commit
	faulted   int // runs with injected commit faults
	warm      int
	cold      int
	resumes   int // warm starts whose first call was a watch from the saved rv
	rvs       []int64
	sizes     []int64
	objects   []int
}

func (s *crashStats) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "kills=%d exited-before-kill=%d warm-starts=%d (watch resumed from the saved rv: %d) cold-starts=%d killed-in-commit=%d killed-after-growth=%d runs-with-faults=%d\n",
		s.kills, s.exited, s.warm, s.resumes, s.cold, s.inCommit, s.grown, s.faulted)
	fmt.Fprintf(&b, "modes: %s\n", sortedCounts(s.modes))
	fmt.Fprintf(&b, "last mark at kill: %s\n", sortedCounts(s.lastMarks))
	if n := len(s.rvs); n > 0 {
		fmt.Fprintf(&b, "saved resourceVersions: first %d, last %d, highest %d (%d checks; new-file runs restart them); file size up to %d bytes; objects up to %d",
			s.rvs[0], s.rvs[n-1], maxOf(s.rvs), n, maxOf(s.sizes), maxOf(s.objects))
	}
	return b.String()
}

func maxOf[T int | int64](v []T) T {
	var m T
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

func sortedCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return strings.Join(parts, " ")
}

func envInt(t *testing.T, name string, def int64) int64 {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return n
}

// crashPlan chooses each run's mode and kill point, and remembers what it
// expects of the next start.
type crashPlan struct {
	path   string // the cache file
	view   fileView
	listop string
	// expectWarm is what the next child's "open" mark must say.
	expectWarm map[int]bool
	final      int64 // the final run's last event
}

func (p *crashPlan) next(r *crashtest.Round) crashtest.Plan {
	rng := r.Rand
	v := p.view
	args := map[string]string{
		"base":     strconv.FormatInt(v.rv, 10),
		"live":     strconv.Itoa(1000 + rng.IntN(3000)),
		"extra":    strconv.FormatBool(v.node),
		"listopts": p.listop,
		"verify":   strconv.FormatBool(rng.IntN(100) < 30),
	}
	k := v.rv + int64(rng.IntN(300))
	plan := crashtest.Plan{Deadline: 30 * time.Second}
	mode := "live"
	if !r.Final {
		switch x := rng.IntN(100); {
		case x < 35:
			plan.KillAfter, plan.Delay = "live", rnd(rng, 500*time.Millisecond)
		case x < 50:
			mode = "start"
			plan.Delay = rnd(rng, 900*time.Millisecond)
		case x < 65:
			mode = "relist"
			if v.rv > 0 && v.synced {
				k = v.rv + 1 + int64(rng.IntN(300))
				args["compact"] = "true"
			}
			plan.KillAfter, plan.Delay = "list", rnd(rng, 100*time.Millisecond)
		case x < 80:
			mode = "backfill"
			args["extra"], args["addidx"] = "false", "true"
			plan.KillAfter, plan.Delay = "backfill", rnd(rng, 50*time.Millisecond)
		case x < 85:
			mode = "rebuild"
			args["extra"] = strconv.FormatBool(!v.node)
			plan.KillAfter, plan.Delay = "open", rnd(rng, 80*time.Millisecond)
		case x < 90:
			// A new disk: the cold start writes everything into a new
			// file, which bbolt grows (and remaps) as it goes.
			mode = "new-file"
			if err := os.Remove(p.path); err != nil && !errors.Is(err, os.ErrNotExist) {
				panic(err)
			}
			v = fileView{}
			p.view = v
			args["base"], args["extra"] = "0", "false"
			plan.KillAfter, plan.Delay = "list", rnd(rng, 300*time.Millisecond)
		default:
			mode = "cold"
			if p.listop == "a" {
				p.listop = "b"
			} else {
				p.listop = "a"
			}
			args["listopts"] = p.listop
			plan.KillAfter, plan.Delay = "list", rnd(rng, 200*time.Millisecond)
		}
		if rng.IntN(100) < 15 {
			args["faults"] = "25"
		}
		args["bounded"] = strconv.FormatBool(rng.IntN(100) < 25)
		args["fresh"] = strconv.FormatBool(rng.IntN(100) < 50)
	} else {
		args["fresh"] = "true"
		args["verify"] = "true"
	}
	args["mode"] = mode
	args["k"] = strconv.FormatInt(k, 10)
	if mode == "relist" && args["compact"] != "true" {
		// Nothing to relist from on a file without a synced state: the
		// first list is the relist.
		args["mode"] = "first-list"
	}
	p.expectWarm[r.Run] = v.synced && v.rv > 0 && v.listopts == args["listopts"]
	if r.Final {
		live, _ := strconv.ParseInt(args["live"], 10, 64)
		p.final = k + live
	}
	plan.Args = args
	return plan
}

func rnd(rng *rand.Rand, d time.Duration) time.Duration { return time.Duration(rng.Int64N(int64(d))) }

// TestCrashLoop kills an informer that ingests events at a high rate with
// SIGKILL at random instants (in commits, relists after 410, index
// backfills, cold-start rewrites that grow the file, under injected commit
// faults) and checks the file after every kill against the history's truth:
// it opens; Check is clean; the saved state is exactly the truth at its
// resourceVersion r, indexes included; r never goes back; the next start is
// warm (unless planned cold) and nothing is ever quarantined. A final
// graceful run must end with the file equal to the final truth.
func TestCrashLoop(t *testing.T) {
	if testing.Short() {
		t.Skip("crash loop: not in -short mode")
	}
	kills := int(envInt(t, killsEnv, defaultKills))
	seed := uint64(envInt(t, seedEnv, 1))
	h := crashHistory(seed)
	plan := &crashPlan{listop: "a", expectWarm: map[int]bool{}}
	stats := &crashStats{modes: map[string]int{}, lastMarks: map[string]int{}}
	var dir string
	check := func(t testing.TB, r *crashtest.Result) {
		path := filepath.Join(dir, "cache.db")
		mode := r.Plan.Args["mode"]
		stats.mu.Lock()
		defer stats.mu.Unlock()
		if !r.Final {
			stats.modes[mode]++
			if r.Killed {
				stats.kills++
				stats.lastMarks[r.Last().Name]++
				if r.Last().Name == "tx" {
					stats.inCommit++
				}
			} else {
				stats.exited++
			}
			if r.Plan.Args["faults"] != "" {
				stats.faulted++
			}
		}
		if m, ok := r.Find("open"); ok {
			warm := strings.Contains(m.Detail, "warm=true")
			if warm {
				stats.warm++
			} else {
				stats.cold++
			}
			if want := plan.expectWarm[r.Run]; warm != want {
				t.Errorf("run %d (%s): open %q, want warm=%t", r.Run, mode, m.Detail, want)
			}
			if !strings.Contains(m.Detail, `quarantined=""`) {
				t.Errorf("run %d: the file was quarantined: %s", r.Run, m.Detail)
			}
			// A warm start resumes the watch from the saved
			// resourceVersion, without a LIST first.
			for _, m := range r.Marks {
				if !warm || (m.Name != "watch" && m.Name != "list") || m.Detail == "metadata" {
					continue
				}
				if want := "rv=" + strconv.FormatInt(plan.view.rv, 10); m.Name != "watch" || m.Detail != want {
					t.Errorf("run %d: a warm start's first call was %s %s, want watch %s", r.Run, m.Name, m.Detail, want)
				}
				stats.resumes++
				break
			}
		}
		fs, err := crashtest.VerifyFile(path, informerName, h.StateAt, &crashtest.VerifyOptions{Indexers: crashIndexers(true)})
		if errors.Is(err, os.ErrNotExist) && !plan.view.synced && fs == nil {
			return // killed before the file was created
		}
		if err != nil {
			t.Fatalf("run %d (%s, killed=%t, last mark %q): %v", r.Run, mode, r.Killed, r.Last().Name, err)
		}
		if q, _ := crashtest.Quarantined(dir); len(q) > 0 {
			t.Fatalf("run %d: quarantined files %v", r.Run, q)
		}
		if fs.RV < plan.view.rv {
			t.Fatalf("run %d: saved resourceVersion went back from %d to %d (history %v)", r.Run, plan.view.rv, fs.RV, stats.rvs)
		}
		if plan.view.synced && (fs.State == nil || !fs.State.Synced) {
			t.Fatalf("run %d: the synced state is gone: %+v", r.Run, fs.State)
		}
		// The file grew in a commit the child never saw acknowledged.
		if r.Killed {
			for i := len(r.Marks) - 1; i >= 0; i-- {
				m := r.Marks[i]
				if m.Name != "commit" && m.Name != "open" {
					continue
				}
				if s, ok := detailInt(m.Detail, "size"); ok && fs.Size > s {
					stats.grown++
				}
				break
			}
		}
		stats.rvs = append(stats.rvs, fs.RV)
		stats.sizes = append(stats.sizes, fs.Size)
		stats.objects = append(stats.objects, fs.Objects)
		v := fileView{rv: fs.RV, size: fs.Size}
		if fs.State != nil {
			v.synced, v.listopts = fs.State.Synced, fs.State.ListOptions
			for _, n := range fs.State.Indexes {
				v.node = v.node || n == nodeIndex
			}
		}
		plan.view = v
		if r.Final {
			if _, ok := r.Find("closed"); !ok {
				t.Fatalf("final run did not close gracefully: last mark %+v", r.Last())
			}
			if fs.RV != plan.final {
				t.Fatalf("final run saved resourceVersion %d, want %d", fs.RV, plan.final)
			}
		}
	}
	if !crashtest.IsChild() {
		dir = t.TempDir() // not in a child: a killed one would leave it behind
	}
	plan.path = filepath.Join(dir, "cache.db")
	start := time.Now()
	results := crashtest.Run(t, crashtest.Config{
		Kills:      kills,
		Final:      true,
		Seed:       seed,
		Dir:        dir,
		Plan:       plan.next,
		Child:      crashChild,
		Check:      check,
		RunTimeout: 3 * time.Minute,
	})
	if len(results) == 0 {
		return
	}
	if os.Getenv("BOLTINFORMER_CRASH_VERBOSE") != "" {
		for _, r := range results {
			var b strings.Builder
			for _, m := range r.Marks {
				if m.Name != "tx" && m.Name != "commit" {
					fmt.Fprintf(&b, " %s@%s", m.Name, m.At.Round(time.Millisecond))
				}
			}
			t.Logf("run %d %s killed=%t elapsed=%s commits=%d:%s", r.Run, r.Plan.Args["mode"], r.Killed, r.Elapsed.Round(time.Millisecond), r.Count("commit"), b.String())
		}
	}
	t.Logf("crash loop: seed %d, %d runs in %s\n%s", seed, len(results), time.Since(start).Round(time.Millisecond), stats)
	if stats.kills < kills*9/10 {
		t.Errorf("only %d of %d runs were killed", stats.kills, kills)
	}
}

// detailInt finds name=<int> in a mark's detail.
func detailInt(detail, name string) (int64, bool) {
	for _, f := range strings.Fields(detail) {
		if v, ok := strings.CutPrefix(f, name+"="); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}
