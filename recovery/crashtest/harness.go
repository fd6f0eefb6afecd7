package crashtest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The environment of a child process: childEnv names the harness (the
// test and Config.Name) whose Child the process runs; specEnv is the
// run's childSpec as JSON. Marks are written to file descriptor 3.
const (
	childEnv = "BOLTINFORMER_CRASHTEST_CHILD"
	specEnv  = "BOLTINFORMER_CRASHTEST_SPEC"
)

// Marks that the harness writes itself.
const (
	// MarkDone is written when Child returns nil.
	MarkDone = "crashtest.done"
	// MarkError is written, with the error, when Child returns one.
	MarkError = "crashtest.error"
)

// DefaultRunTimeout bounds one child run when Config.RunTimeout is zero.
const DefaultRunTimeout = 2 * time.Minute

// Config configures Run.
type Config struct {
	// Name tells apart several Run calls in one test (default "").
	Name string
	// Kills is the number of runs that are killed with SIGKILL.
	Kills int
	// Final adds one run after the kills that is not killed: Env.Final is
	// true and the child is expected to finish its work and return.
	Final bool
	// Seed seeds Round.Rand (the plans) and Env.Rand (each child's).
	Seed uint64
	// Dir is the working directory the runs share (the cache files), given
	// to the child as Env.Dir. Default: a new t.TempDir().
	Dir string
	// Plan returns the plan of the next run: arguments for the child and
	// when to kill it. Default: kill Delay after the start, Delay drawn
	// uniformly from [0, MaxDelay).
	Plan func(r *Round) Plan
	// MaxDelay bounds the default plan's kill delay. Default 1s.
	MaxDelay time.Duration
	// Child is what the child process runs (see Env). It runs until it is
	// killed, or returns: a run that is to be killed should keep working
	// (or wait for ctx) until it is.
	Child func(ctx context.Context, env *Env) error
	// Check, when set, is called in the parent after every run, with the
	// child dead: open the files and compare them with the truth here.
	// Run stops after a run whose Check failed the test.
	Check func(t testing.TB, r *Result)
	// RunTimeout bounds one run. A run that is still alive then is killed
	// and fails the test. Default DefaultRunTimeout.
	RunTimeout time.Duration
	// Env is added to the child's environment.
	Env []string
}

// Round is what Config.Plan gets to choose a run's plan.
type Round struct {
	// Run counts runs from 0.
	Run int
	// Final is true for the run that will not be killed.
	Final bool
	// Rand is seeded from Config.Seed: the plans are reproducible.
	Rand *rand.Rand
	// Prev is the previous run's result, nil for the first.
	Prev *Result
}

// Plan is one run's plan.
type Plan struct {
	// Args are given to the child (Env.Args).
	Args map[string]string
	// KillAfter is a mark name: the kill timer starts when the child writes
	// it (Env.Mark). "" starts it when the process starts.
	KillAfter string
	// Delay is how long after KillAfter the child is killed.
	Delay time.Duration
	// Deadline, when set, kills the child this long after its start even
	// if KillAfter never came. Ignored by the final run.
	Deadline time.Duration
}

// Mark is a point a child reported reaching.
type Mark struct {
	Name, Detail string
	// At is when the parent read it, from the child's start.
	At time.Duration
}

// Result is what happened in one run.
type Result struct {
	Run   int
	Final bool
	Plan  Plan
	// Killed is true when the harness's SIGKILL ended the child.
	Killed bool
	// Marks are the marks the child wrote, in order; the last one is the
	// last point it reached.
	Marks []Mark
	// ExitErr is the child's exit error when it was not killed (nil: exit
	// status 0).
	ExitErr error
	// ChildErr is the error Child returned, or "".
	ChildErr string
	// TimedOut is true when the run outlived Config.RunTimeout.
	TimedOut bool
	// Elapsed is the run's wall time.
	Elapsed time.Duration
	// LogPath is the file holding the child's stdout and stderr (removed
	// with the test's temporary directories).
	LogPath string
}

// Last returns the last mark, or a zero Mark.
func (r *Result) Last() Mark {
	if len(r.Marks) == 0 {
		return Mark{}
	}
	return r.Marks[len(r.Marks)-1]
}

// Find returns the last mark named name.
func (r *Result) Find(name string) (Mark, bool) {
	for i := len(r.Marks) - 1; i >= 0; i-- {
		if r.Marks[i].Name == name {
			return r.Marks[i], true
		}
	}
	return Mark{}, false
}

// Count returns how many marks are named name.
func (r *Result) Count(name string) int {
	n := 0
	for _, m := range r.Marks {
		if m.Name == name {
			n++
		}
	}
	return n
}

// LogTail returns the last n bytes of the child's output.
func (r *Result) LogTail(n int) string {
	b, err := os.ReadFile(r.LogPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// Env is the child's side of a run.
type Env struct {
	// Run counts runs from 0; Final is true for the run not to be killed.
	Run   int
	Final bool
	// Seed is Config.Seed.
	Seed uint64
	// Dir is the parent's Config.Dir.
	Dir string
	// Args are Plan.Args.
	Args map[string]string

	// marksMu guards marks.
	marksMu sync.Mutex
	marks   *os.File
}

// childSpec is what the parent passes to a child in specEnv.
type childSpec struct {
	Run   int               `json:"run"`
	Final bool              `json:"final"`
	Seed  uint64            `json:"seed"`
	Dir   string            `json:"dir"`
	Args  map[string]string `json:"args,omitempty"`
}

// Mark tells the parent that the child reached a point (Plan.KillAfter,
// Result.Marks). The detail's values are joined with spaces; a mark is
// one write to a pipe, cheap enough for every commit.
func (e *Env) Mark(name string, detail ...any) {
	line := name
	if len(detail) > 0 {
		line += "\t" + strings.ReplaceAll(strings.TrimSpace(fmt.Sprintln(detail...)), "\n", " | ")
	}
	line = strings.ReplaceAll(line, "\n", " ") + "\n"
	e.marksMu.Lock()
	defer e.marksMu.Unlock()
	if e.marks != nil {
		_, _ = e.marks.WriteString(line)
	}
}

// Arg returns Args[name].
func (e *Env) Arg(name string) string { return e.Args[name] }

// IntArg returns Args[name] as an integer (0 if absent or malformed).
func (e *Env) IntArg(name string) int64 {
	v, _ := strconv.ParseInt(e.Args[name], 10, 64)
	return v
}

// BoolArg returns Args[name] as a boolean (false if absent or malformed).
func (e *Env) BoolArg(name string) bool {
	v, _ := strconv.ParseBool(e.Args[name])
	return v
}

// Rand returns a random source seeded from the seed and the run number.
func (e *Env) Rand() *rand.Rand {
	return rand.New(rand.NewPCG(e.Seed, uint64(e.Run)+1))
}

// IsChild reports whether this process is a crashtest child (for a
// TestMain that must skip expensive setup in children).
func IsChild() bool {
	_, ok := os.LookupEnv(childEnv)
	return ok
}

func harnessName(t testing.TB, cfg *Config) string {
	if cfg.Name == "" {
		return t.Name()
	}
	return t.Name() + "#" + cfg.Name
}

// Run is the kill/restart harness. In the parent (the test as run by go
// test) it runs Config.Kills child processes one after the other, each
// killed with SIGKILL as its Plan says, then, with Config.Final, one that
// is left to finish; after each it calls Config.Check. It returns the
// results.
//
// A child is the test binary itself (os.Args[0]) re-run with
// -test.run matching only this test, and an environment variable that
// makes the same Run call run Config.Child instead, then end the test
// (skipped when Child returns nil, failed when it returns an error). So
// the code of the test before Run runs in every child too: keep it cheap
// and free of side effects (do not call t.TempDir there; use Config.Dir's
// default, which the children receive as Env.Dir). In a subtest, the
// enclosing tests' code runs in the child as well.
//
// Each child dies with the parent (PR_SET_PDEATHSIG) and is always waited
// for; no run outlives RunTimeout.
func Run(t *testing.T, cfg Config) []*Result {
	t.Helper()
	name := harnessName(t, &cfg)
	if v, ok := os.LookupEnv(childEnv); ok {
		if v == name {
			runChild(t, &cfg)
		}
		return nil
	}
	if cfg.Child == nil {
		t.Fatal("crashtest: Config.Child is required")
	}
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	if cfg.MaxDelay <= 0 {
		cfg.MaxDelay = time.Second
	}
	if cfg.RunTimeout <= 0 {
		cfg.RunTimeout = DefaultRunTimeout
	}
	logs := t.TempDir()
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x63726173687465))
	total := cfg.Kills
	if cfg.Final {
		total++
	}
	var results []*Result
	var prev *Result
	for run := 0; run < total; run++ {
		round := &Round{Run: run, Final: cfg.Final && run == total-1, Rand: rng, Prev: prev}
		var plan Plan
		if cfg.Plan != nil {
			plan = cfg.Plan(round)
		} else {
			plan = Plan{Delay: time.Duration(rng.Int64N(int64(cfg.MaxDelay)))}
		}
		spec := childSpec{Run: run, Final: round.Final, Seed: cfg.Seed, Dir: cfg.Dir, Args: plan.Args}
		res, err := launch(name, &cfg, spec, plan, filepath.Join(logs, fmt.Sprintf("run-%04d.log", run)))
		if err != nil {
			t.Fatalf("crashtest: run %d: %v", run, err)
		}
		results = append(results, res)
		prev = res
		switch {
		case res.TimedOut:
			t.Errorf("crashtest: run %d outlived %s; last mark %q", run, cfg.RunTimeout, res.Last().Name)
		case res.ChildErr != "":
			t.Errorf("crashtest: run %d: child failed: %s", run, res.ChildErr)
		case !res.Killed && res.ExitErr != nil:
			t.Errorf("crashtest: run %d: child exited: %v", run, res.ExitErr)
		}
		if !t.Failed() && cfg.Check != nil {
			cfg.Check(t, res)
		}
		if t.Failed() {
			t.Logf("crashtest: run %d plan %+v, killed=%v, last mark %+v; child output (tail):\n%s", run, plan, res.Killed, res.Last(), res.LogTail(8<<10))
			break
		}
	}
	return results
}

// testPattern matches exactly the test named name (and its parents, as
// -test.run needs).
func testPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

func launch(name string, cfg *Config, spec childSpec, plan Plan, logPath string) (*Result, error) {
	res := &Result{Run: spec.Run, Final: spec.Final, Plan: plan, LogPath: logPath}
	js, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer pr.Close()
	test := strings.SplitN(name, "#", 2)[0]
	cmd := exec.Command(os.Args[0], "-test.run="+testPattern(test), "-test.count=1", "-test.v=false")
	cmd.Env = append(append(os.Environ(), cfg.Env...), childEnv+"="+name, specEnv+"="+string(js))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{pw} // fd 3
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	// The death signal is tied to the forking thread: fork from a locked
	// one (released, not ended, afterwards).
	runtime.LockOSThread()
	err = cmd.Start()
	runtime.UnlockOSThread()
	pw.Close()
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", os.Args[0], err)
	}
	start := time.Now()

	marks := make(chan Mark, 256)
	go func() {
		defer close(marks)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			n, d, _ := strings.Cut(sc.Text(), "\t")
			marks <- Mark{Name: n, Detail: d, At: time.Since(start)}
		}
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	var killC <-chan time.Time
	var timers []*time.Timer
	defer func() {
		for _, tm := range timers {
			tm.Stop()
		}
	}()
	newTimer := func(d time.Duration) <-chan time.Time {
		tm := time.NewTimer(d)
		timers = append(timers, tm)
		return tm.C
	}
	if !spec.Final && plan.KillAfter == "" {
		killC = newTimer(plan.Delay)
	}
	limit := cfg.RunTimeout
	if !spec.Final && plan.Deadline > 0 {
		limit = min(limit, plan.Deadline)
	}
	limitC := newTimer(limit)
	armed := plan.KillAfter == ""
	kill := func() { _ = cmd.Process.Kill() }
	var waitErr error
loop:
	for {
		select {
		case m, ok := <-marks:
			if !ok {
				marks = nil
				continue
			}
			res.Marks = append(res.Marks, m)
			if !armed && !spec.Final && m.Name == plan.KillAfter {
				armed = true
				killC = newTimer(plan.Delay)
			}
		case <-killC:
			killC = nil
			kill()
		case <-limitC:
			limitC = nil
			if spec.Final || limit == cfg.RunTimeout {
				res.TimedOut = true
			}
			kill()
		case waitErr = <-exited:
			break loop
		}
	}
	if marks != nil {
		for m := range marks { // the rest, up to the child's last write
			res.Marks = append(res.Marks, m)
		}
	}
	res.Elapsed = time.Since(start)
	var ee *exec.ExitError
	if errors.As(waitErr, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL && !res.TimedOut {
			res.Killed = true
			waitErr = nil
		}
	}
	res.ExitErr = waitErr
	if m, ok := res.Find(MarkError); ok {
		res.ChildErr = m.Detail
	}
	return res, nil
}

// runChild runs cfg.Child in a child process and ends the test.
func runChild(t *testing.T, cfg *Config) {
	var spec childSpec
	if err := json.Unmarshal([]byte(os.Getenv(specEnv)), &spec); err != nil {
		t.Fatalf("crashtest: child spec: %v", err)
	}
	env := &Env{Run: spec.Run, Final: spec.Final, Seed: spec.Seed, Dir: spec.Dir, Args: spec.Args, marks: os.NewFile(3, "crashtest-marks")}
	if env.Args == nil {
		env.Args = map[string]string{}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	err := cfg.Child(ctx, env)
	stop()
	if err != nil {
		env.Mark(MarkError, err)
		t.Fatalf("crashtest: child run %d: %v", spec.Run, err)
	}
	env.Mark(MarkDone)
	env.marksMu.Lock()
	_ = env.marks.Close()
	env.marks = nil
	env.marksMu.Unlock()
	t.SkipNow()
}
