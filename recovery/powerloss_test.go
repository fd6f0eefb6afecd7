package recovery_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/boltinformer/boltinformer/internal/powerloss"
	"github.com/boltinformer/boltinformer/recovery/crashtest"
	"github.com/boltinformer/boltinformer/store"
)

// Environment switches of the power-loss test (docs/RELIABILITY.md 8.7).
const (
	// powerLossEnv: "1" runs the full test (every prefix state, more
	// samples, a longer ingest; BOLTINFORMER_HEAVY=1 make test sets it),
	// "0" skips it; unset runs the small default when strace is installed.
	powerLossEnv = "BOLTINFORMER_POWERLOSS"
	// powerLossSeedEnv seeds the history and the sampled states (default
	// 1). The seed is printed.
	powerLossSeedEnv = "BOLTINFORMER_POWERLOSS_SEED"
)

// powerLossTier is one size of the test.
type powerLossTier struct {
	name string
	cfg  powerLossConfig
	// prefixEvery checks one in this many Prefix states (1: all).
	prefixEvery int
	// reorders, torn and garbage are the samples per sync epoch.
	reorders, torn, garbage int
	// control is the number of states of the negative control.
	control int
	// sample is VerifyOptions.Sample (0: every payload decoded).
	sample int
}

var (
	powerLossSmall = powerLossTier{
		name: "default", cfg: powerLossConfig{List: 300, Live1: 600, Live2: 600, Sync: true},
		prefixEvery: 6, reorders: 2, torn: 2, garbage: 1, control: 80, sample: 40,
	}
	powerLossFull = powerLossTier{
		name: "full", cfg: powerLossConfig{List: 400, Live1: 2000, Live2: 2000, Sync: true},
		prefixEvery: 1, reorders: 8, torn: 8, garbage: 8, control: 300, sample: 0,
	}
)

// requireStrace skips the test when strace is missing or cannot trace
// here (no ptrace in the container).
func requireStrace(t *testing.T) {
	t.Helper()
	path, err := exec.LookPath("strace")
	if err != nil {
		t.Skip("power loss: strace is not installed (apt-get install strace, or make test-powerloss, which installs it as root)")
	}
	out, err := exec.Command(path, "-f", "-qq", "-o", os.DevNull, "true").CombinedOutput()
	if err != nil {
		t.Skipf("power loss: strace cannot trace here: %v: %s", err, bytes.TrimSpace(out))
	}
}

// recordPowerLoss runs the child under strace in dir and parses the trace
// of dir/cache.db.
func recordPowerLoss(t *testing.T, dir string, cfg powerLossConfig) *powerloss.Trace {
	t.Helper()
	tracePath := filepath.Join(dir, "trace")
	argv := powerloss.Command(tracePath, os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), powerLossChildEnv+"="+dir, cfg.env())
	out, err := cmd.CombinedOutput()
	if err != nil {
		tail := out[max(0, len(out)-4000):]
		t.Fatalf("power loss: the traced child failed: %v\n%s", err, tail)
	}
	f, err := os.Open(tracePath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr, err := powerloss.Parse(f, powerloss.Files{Data: filepath.Join(dir, "cache.db"), Marks: filepath.Join(dir, "marks")})
	if err != nil {
		t.Fatalf("power loss: %v", err)
	}
	if fi, err := f.Stat(); err == nil {
		t.Logf("power loss: trace of %d bytes, %d ops on the cache file", fi.Size(), len(tr.Ops))
	}
	// The trace is large; the file is kept only while checking.
	_ = os.Remove(tracePath)
	return tr
}

// acks are the acknowledgements in a trace: ackBefore[p] is the highest
// resourceVersion acknowledged by crash point p (ops[:p] done), and
// nextAck[p] the first one acknowledged at or after it (-1: none), the
// commit in flight at p.
type acks struct {
	ackBefore, nextAck []int64
	// nextAt[p] is the index of the op of that next acknowledgement
	// (len(ops): none).
	nextAt []int
	count  int
}

func traceAcks(t *testing.T, tr *powerloss.Trace) *acks {
	t.Helper()
	n := len(tr.Ops)
	a := &acks{ackBefore: make([]int64, n+1), nextAck: make([]int64, n+1), nextAt: make([]int, n+1)}
	for i, op := range tr.Ops {
		a.ackBefore[i+1] = a.ackBefore[i]
		if op.Kind != powerloss.OpMark {
			continue
		}
		name, v, ok := strings.Cut(op.Text, " ")
		if !ok {
			t.Fatalf("power loss: marker %q", op.Text)
		}
		if name != markAck && name != markClosed {
			continue
		}
		rv, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("power loss: marker %q: %v", op.Text, err)
		}
		if rv < a.ackBefore[i] {
			t.Fatalf("power loss: acknowledged resourceVersion went back: %d after %d", rv, a.ackBefore[i])
		}
		a.ackBefore[i+1] = rv
		a.count++
	}
	next, at := int64(-1), n
	for p := n; p >= 0; p-- {
		if p < n && tr.Ops[p].Kind == powerloss.OpMark && a.ackBefore[p+1] != a.ackBefore[p] {
			next, at = a.ackBefore[p+1], p
		}
		a.nextAck[p], a.nextAt[p] = next, at
	}
	return a
}

// allowed returns the resourceVersions a file found at every crash point
// in [from, to] may hold: at each point, the last acknowledged one or the
// one of the commit in flight. It also returns the last acknowledged one
// at to (the bound below).
func (a *acks) allowed(from, to int) (map[int64]bool, int64) {
	set := map[int64]bool{a.ackBefore[from]: true}
	if a.nextAck[from] >= 0 {
		set[a.nextAck[from]] = true
	}
	for p := from + 1; p <= to; p++ {
		for rv := range set {
			if rv != a.ackBefore[p] && rv != a.nextAck[p] {
				delete(set, rv)
			}
		}
	}
	return set, a.ackBefore[to]
}

// Violation classes.
const (
	violOpen     = "refused on open"         // store.Open failed
	violMismatch = "differs from the truth"  // VerifyDB: not exactly the truth at its rv
	violBack     = "behind the acknowledged" // rv < last acknowledged
	violOther    = "unacknowledged rv"       // rv neither acknowledged nor in flight
	violAbsent   = "file lost"               // no file after an acknowledgement
)

// verdict is the outcome of one state.
type verdict struct {
	state powerloss.State
	rv    int64
	class string // "" when it holds
	// corruptUnacked: refused as corrupt before anything was
	// acknowledged (recovery quarantines it and starts cold: allowed).
	corruptUnacked bool
	err            error
}

// checkStates builds each state into scratch and checks it; workers run
// in parallel, one builder feeds them.
func checkStates(t *testing.T, tr *powerloss.Trace, states []powerloss.State, a *acks, h *crashtest.History, sample int, scratch string) []verdict {
	t.Helper()
	type job struct {
		i    int
		path string
	}
	jobs := make(chan job, runtime.GOMAXPROCS(0))
	out := make([]verdict, len(states))
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				out[j.i] = checkState(states[j.i], j.path, a, h, sample)
				_ = os.Remove(j.path)
			}
		}()
	}
	b := powerloss.NewBuilder(tr)
	var buildErr error
	for i, s := range states {
		path := filepath.Join(scratch, fmt.Sprintf("state-%d.db", i))
		if err := b.Build(s, path); err != nil {
			buildErr = err
			break
		}
		jobs <- job{i, path}
	}
	close(jobs)
	wg.Wait()
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return out
}

// checkState opens one crash state read-write with the store (as the next
// start would; a copy, since it may migrate or repair) and checks it:
// the file holds exactly the truth at its saved resourceVersion r, r is
// one the program had acknowledged or had in flight at every crash point
// where this state can be found, and r is not behind the last one
// acknowledged.
func checkState(s powerloss.State, path string, a *acks, h *crashtest.History, sample int) verdict {
	v := verdict{state: s}
	allowed, last := a.allowed(s.From, s.To)
	exists := !s.Absent
	if exists {
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			exists = false
		}
	}
	if exists {
		db, err := store.Open(path, &store.Options{Timeout: -1})
		if err != nil {
			if errors.Is(err, store.ErrCorrupt) && last == 0 {
				v.corruptUnacked, v.err = true, err
				return v
			}
			v.class, v.err = violOpen, err
			return v
		}
		fs, err := crashtest.VerifyDB(db, informerName, h.StateAt, &crashtest.VerifyOptions{Indexers: crashIndexers(true), Sample: sample})
		cerr := db.Close()
		if err == nil {
			err = cerr
		}
		if err != nil {
			v.class, v.err = violMismatch, err
			return v
		}
		v.rv = fs.RV
	}
	if !allowed[v.rv] {
		v.class = violOther
		switch {
		case !exists && last > 0:
			v.class = violAbsent
		case v.rv < last:
			v.class = violBack
		}
		v.err = fmt.Errorf("resourceVersion %d; allowed %v (acknowledged %d by crash point %d)", v.rv, sortedKeys(allowed), last, s.To)
	}
	return v
}

func sortedKeys(m map[int64]bool) []int64 {
	out := make([]int64, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// powerLossReport counts verdicts per kind and class.
type powerLossReport struct {
	states     map[powerloss.Kind]int
	violations map[powerloss.Kind]map[string]int
	unacked    int
	rvs        map[int64]bool
	first      []verdict // the first violations, for the log
	// firstUnacked are the first states refused before the first
	// acknowledgement.
	firstUnacked []verdict
}

func summarize(vs []verdict) *powerLossReport {
	r := &powerLossReport{states: map[powerloss.Kind]int{}, violations: map[powerloss.Kind]map[string]int{}, rvs: map[int64]bool{}}
	for _, v := range vs {
		r.states[v.state.Kind]++
		if v.corruptUnacked {
			r.unacked++
			if len(r.firstUnacked) < 3 {
				r.firstUnacked = append(r.firstUnacked, v)
			}
		}
		if v.class == "" {
			r.rvs[v.rv] = true
			continue
		}
		if r.violations[v.state.Kind] == nil {
			r.violations[v.state.Kind] = map[string]int{}
		}
		r.violations[v.state.Kind][v.class]++
		if len(r.first) < 8 {
			r.first = append(r.first, v)
		}
	}
	return r
}

func (r *powerLossReport) total() (states, violations int) {
	for k, n := range r.states {
		states += n
		for _, c := range r.violations[k] {
			violations += c
		}
	}
	return states, violations
}

func (r *powerLossReport) String() string {
	var b strings.Builder
	states, viol := r.total()
	fmt.Fprintf(&b, "%d crash states, %d violations; %d distinct resourceVersions found; %d refused as corrupt before the first acknowledgement (quarantined on open: allowed)", states, viol, len(r.rvs), r.unacked)
	for _, k := range powerloss.Kinds {
		if r.states[k] == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n\t%-8s %5d states", k, r.states[k])
		classes := make([]string, 0, len(r.violations[k]))
		for c := range r.violations[k] {
			classes = append(classes, c)
		}
		sort.Strings(classes)
		for _, c := range classes {
			fmt.Fprintf(&b, "; %s: %d", c, r.violations[k][c])
		}
	}
	for _, v := range r.firstUnacked {
		fmt.Fprintf(&b, "\n\trefused before the first acknowledgement: %v: %v", v.state, v.err)
	}
	for _, v := range r.first {
		fmt.Fprintf(&b, "\n\tviolation (%s): %v: %v", v.class, v.state, v.err)
	}
	return b.String()
}

// spread returns n of states, evenly spaced (all of them if fewer).
func spread(states []powerloss.State, n int) []powerloss.State {
	if n >= len(states) {
		return states
	}
	out := make([]powerloss.State, 0, n)
	for i := range n {
		out = append(out, states[i*len(states)/n])
	}
	return out
}

// thin keeps one in every n Prefix states (and every other state).
func thin(states []powerloss.State, n int) []powerloss.State {
	if n <= 1 {
		return states
	}
	out := states[:0:0]
	i := 0
	for _, s := range states {
		if s.Kind == powerloss.Prefix {
			i++
			if i%n != 1 {
				continue
			}
		}
		out = append(out, s)
	}
	return out
}

// TestPowerLoss simulates power loss during a real ingest: a child process
// (this test binary) ingests a history into a new cache file with real
// fsyncs, closes it, and resumes from it in a second life, under strace;
// the trace of the file's writes, syncs and creation, ordered against the
// child's acknowledgements (a marker line written after each commit
// returned), gives the crash states of powerloss.Enumerate: every prefix of
// the writes in order, subsets of the recent unsynced writes in random
// orders, torn writes (512- and 4096-byte sectors), and the file lost with
// its directory entry. Each is opened read-write with the store and must
// hold exactly the truth at a resourceVersion that was acknowledged or in
// flight, never behind the last acknowledged one. The negative control
// checks the same trace as if the program had never synced, and must find
// violations.
func TestPowerLoss(t *testing.T) {
	if dir := os.Getenv(powerLossChildEnv); dir != "" {
		if err := powerLossChild(dir); err != nil {
			t.Fatal(err)
		}
		return
	}
	tier := powerLossSmall
	switch os.Getenv(powerLossEnv) {
	case "0":
		t.Skip("power loss: " + powerLossEnv + "=0")
	case "1":
		tier = powerLossFull
	}
	if testing.Short() {
		t.Skip("power loss: not in -short mode")
	}
	requireStrace(t)
	seed := uint64(envInt(t, powerLossSeedEnv, 1))
	tier.cfg.Seed = seed
	start := time.Now()
	dir := t.TempDir()
	tr := recordPowerLoss(t, dir, tier.cfg)
	recorded := time.Since(start)
	a := traceAcks(t, tr)
	if a.count < 5 {
		t.Fatalf("power loss: only %d acknowledgements in the trace", a.count)
	}
	var starts []string
	for _, op := range tr.Ops {
		if strings.HasPrefix(op.Text, markWarm+" ") {
			starts = append(starts, op.Text)
		}
	}
	if want := []string{"warm 0", "warm 1", "warm 0"}; !slices.Equal(starts, want) {
		t.Fatalf("power loss: the child's starts were %q, want %q (cold, warm, cold)", starts, want)
	}
	counts := map[powerloss.OpKind]int{}
	for _, op := range tr.Ops {
		counts[op.Kind]++
	}
	h := powerLossHistory(seed)
	model := powerloss.Model{Seed: seed, Reorders: tier.reorders, Torn: tier.torn, Garbage: tier.garbage}
	states := thin(powerloss.Enumerate(tr, model), tier.prefixEvery)
	scratch := t.TempDir()
	rep := summarize(checkStates(t, tr, states, a, h, tier.sample, scratch))
	checked := time.Since(start)

	// The negative control: the same trace without its syncs. The checker
	// must find states that break the guarantees.
	// Without syncs a state can be found at any later crash point, where
	// nothing would be allowed; so each is checked at one point only: a
	// reordered one right after its last write, a prefix one right after
	// the next acknowledgement (a commit acknowledged, its pages still in
	// the page cache).
	nosync := tr.WithoutSyncs()
	nsAcks := traceAcks(t, nosync)
	var control, prefixes []powerloss.State
	for _, s := range powerloss.Enumerate(nosync, powerloss.Model{Seed: seed, Reorders: tier.control / 2}) {
		switch s.Kind {
		case powerloss.Reorder:
			s.To = s.From
			control = append(control, s)
		case powerloss.Prefix:
			if at := nsAcks.nextAt[s.From]; at < len(nosync.Ops) && !s.Absent {
				s.To = at + 1
				prefixes = append(prefixes, s)
			}
		}
	}
	control = append(control, spread(prefixes, tier.control-len(control))...)
	sort.SliceStable(control, func(i, j int) bool { return control[i].Durable < control[j].Durable })
	crep := summarize(checkStates(t, nosync, control, nsAcks, h, tier.sample, scratch))

	t.Logf("power loss (%s tier, seed %d): the child made %d writes, %d size changes, %d syncs, %d directory syncs, %d acknowledgements (%d epochs), recorded in %s; checked in %s\n%s",
		tier.name, seed, counts[powerloss.OpWrite], counts[powerloss.OpTruncate]+counts[powerloss.OpExtend], counts[powerloss.OpSync], counts[powerloss.OpDirSync], a.count, tr.Epochs(),
		recorded.Round(time.Millisecond), (checked - recorded).Round(time.Millisecond), rep)
	t.Logf("negative control (the same trace, no fsync): %s (in %s)", crep, (time.Since(start) - checked).Round(time.Millisecond))
	if _, viol := rep.total(); viol > 0 {
		t.Errorf("power loss: %d crash states break the guarantees (seed %d)", viol, seed)
	}
	cv := map[string]int{}
	for _, m := range crep.violations {
		for c, n := range m {
			cv[c] += n
		}
	}
	if cv[violBack] == 0 || cv[violOpen]+cv[violMismatch] == 0 {
		t.Errorf("power loss: the negative control found %v: the checker would miss a missing fsync", cv)
	}
}

// powerLossOpenChildEnv names the directory of TestRegressionPowerLossNewFileDirectory's child.
const powerLossOpenChildEnv = "BOLTINFORMER_POWERLOSS_OPEN_CHILD"

// TestRegressionPowerLossNewFileDirectory: store.Open created the cache
// file (and its directories) and never fsynced the directory, so a power
// loss after commits had been acknowledged could leave no file at all
// (fsync(2) makes a file's data durable, not its directory entry). The
// child opens a new file in a new directory under strace; the directory
// must be synced after the file's creation and before Open returns.
func TestRegressionPowerLossNewFileDirectory(t *testing.T) {
	if dir := os.Getenv(powerLossOpenChildEnv); dir != "" {
		db, err := store.Open(filepath.Join(dir, "new", "cache.db"), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "marks"), []byte("opened 0\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		return
	}
	if testing.Short() {
		t.Skip("power loss: not in -short mode")
	}
	requireStrace(t)
	dir := t.TempDir()
	tracePath := filepath.Join(dir, "trace")
	argv := powerloss.Command(tracePath, os.Args[0], "-test.run=^"+t.Name()+"$")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), powerLossOpenChildEnv+"="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	f, err := os.Open(tracePath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr, err := powerloss.Parse(f, powerloss.Files{Data: filepath.Join(dir, "new", "cache.db"), Marks: filepath.Join(dir, "marks")})
	if err != nil {
		t.Fatal(err)
	}
	created, synced, opened := -1, -1, -1
	for i, op := range tr.Ops {
		switch {
		case op.Kind == powerloss.OpCreate && created < 0:
			created = i
		case op.Kind == powerloss.OpDirSync && created >= 0 && synced < 0:
			synced = i
		case op.Kind == powerloss.OpMark && op.Text == "opened 0":
			opened = i
		}
	}
	if created < 0 || opened < 0 {
		t.Fatalf("the trace shows no creation (%d) or no return from Open (%d): %v", created, opened, tr.Ops)
	}
	if synced < 0 || synced > opened {
		t.Fatalf("Open returned without syncing the directory of the file it created (creation at op %d, directory sync at %d, return at %d)", created, synced, opened)
	}
}
