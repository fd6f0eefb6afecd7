//go:build linux

package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// SIGINT or SIGTERM while export or compact writes its output is a
// requested stop: the partial output (a temporary file next to OUT) is
// removed, OUT is not made, and inspect exits 128+signal. It was left
// behind (and compact wrote OUT itself: a copy cut short is a valid bbolt
// file with part of the buckets).
func TestRegressionInterruptRemovesPartialOutput(t *testing.T) {
	keys := keyFile(t, testKey)
	for _, tc := range []struct {
		name string
		sig  syscall.Signal
		args func(out string) []string
	}{
		{"export", syscall.SIGINT, func(out string) []string {
			return []string{"export", fixture(t), "-o", "yaml", "--key-file", keys, "--output-file", out}
		}},
		{"compact", syscall.SIGTERM, func(out string) []string { return []string{"compact", fixture(t), out} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "out")
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), mainArgsEnv+"="+strings.Join(tc.args(out), "\n"))
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			lines := make(chan string)
			go func() {
				defer close(lines)
				sc := bufio.NewScanner(stderr)
				for sc.Scan() {
					lines <- sc.Text()
				}
			}()
			var log []string
			for line := range lines {
				log = append(log, line)
				if line == "paused at "+tc.name {
					break
				}
			}
			if len(log) == 0 || log[len(log)-1] != "paused at "+tc.name {
				_ = cmd.Wait()
				t.Fatalf("the child did not pause: %q", log)
			}
			ents, _ := os.ReadDir(dir)
			if len(ents) != 1 || !strings.HasPrefix(ents[0].Name(), ".out.tmp-") {
				t.Fatalf("while paused the directory holds %v, want the partial output", ents)
			}
			if err := cmd.Process.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			for line := range lines {
				log = append(log, line)
			}
			err = cmd.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 128+int(tc.sig) {
				t.Errorf("exit %v, want status %d", err, 128+int(tc.sig))
			}
			want := fmt.Sprintf("inspect: interrupted (%v); removed the partial output %s", tc.sig, filepath.Join(dir, ents[0].Name()))
			if got := log[len(log)-1]; got != want {
				t.Errorf("stderr ends %q, want %q", got, want)
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 0 {
				t.Errorf("left behind: %v", ents)
			}
		})
	}
}
