package crashtest_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/boltinformer/boltinformer/recovery/crashtest"
)

// TestRun is the harness's own test, and the smallest example of its use:
// each child appends a line per tick to a journal in the shared directory
// and marks it; the parent kills it right after a tick (or, when the mark
// never comes, at the plan's deadline) and checks the journal between runs.
func TestRun(t *testing.T) {
	var dir string
	if !crashtest.IsChild() {
		dir = t.TempDir()
	}
	journal := filepath.Join(dir, "journal")
	results := crashtest.Run(t, crashtest.Config{
		Kills: 4,
		Final: true,
		Seed:  3,
		Dir:   dir,
		Plan: func(r *crashtest.Round) crashtest.Plan {
			p := crashtest.Plan{Args: map[string]string{"ticks": "5"}, KillAfter: "tick-2", Delay: time.Duration(r.Rand.IntN(3)) * time.Millisecond}
			if r.Run == 3 {
				// The mark never comes: killed at the deadline, long after
				// the child wrote its five ticks even on a loaded machine
				// (300 ms was not, under a load of 30 on 2 cores).
				p.KillAfter, p.Deadline = "never", 10*time.Second
			}
			return p
		},
		Child: func(ctx context.Context, env *crashtest.Env) error {
			f, err := os.OpenFile(filepath.Join(env.Dir, "journal"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
			if err != nil {
				return err
			}
			defer f.Close()
			for i := 0; i < int(env.IntArg("ticks")); i++ {
				if _, err := fmt.Fprintf(f, "run %d tick %d\n", env.Run, i); err != nil {
					return err
				}
				env.Mark(fmt.Sprintf("tick-%d", i), "run", env.Run)
			}
			if env.Final {
				return nil
			}
			<-ctx.Done() // wait to be killed
			return nil
		},
		Check: func(t testing.TB, r *crashtest.Result) {
			b, err := os.ReadFile(journal)
			if err != nil {
				t.Fatal(err)
			}
			// The journal's last line is this run's, at or past the kill
			// mark and at or past the last mark (written after its line).
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			var run, tick int
			if _, err := fmt.Sscanf(lines[len(lines)-1], "run %d tick %d", &run, &tick); err != nil || run != r.Run || tick < 2 {
				t.Fatalf("run %d: journal ends %q", r.Run, lines[len(lines)-1])
			}
			if r.Killed == r.Final {
				t.Fatalf("run %d: killed=%t final=%t", r.Run, r.Killed, r.Final)
			}
			if _, ok := r.Find("tick-2"); !ok {
				t.Fatalf("run %d marks %+v", r.Run, r.Marks)
			}
			for _, m := range r.Marks {
				var n int
				if _, err := fmt.Sscanf(m.Name, "tick-%d", &n); err == nil && n > tick {
					t.Fatalf("run %d: mark %s after journal tick %d", r.Run, m.Name, tick)
				}
			}
			if m, _ := r.Find("tick-0"); m.Detail != fmt.Sprint("run ", r.Run) {
				t.Fatalf("mark detail %q", m.Detail)
			}
			if _, done := r.Find(crashtest.MarkDone); done != r.Final {
				t.Fatalf("run %d: done mark %t", r.Run, done)
			}
		},
	})
	if crashtest.IsChild() {
		return
	}
	if len(results) != 5 {
		t.Fatalf("%d results", len(results))
	}
	if r := results[3]; !r.Killed || r.Last().Name != "tick-4" {
		t.Fatalf("deadline run: killed=%t last %+v", r.Killed, r.Last())
	}
}
