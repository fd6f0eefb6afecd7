package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openTerminal opens a pseudo-terminal: the terminal end, which inspect
// writes to, and a reader of what the screen gets (drained until the
// test ends, so that writes never block).
func openTerminal(t *testing.T) (term *os.File, screen func() string) {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		ptmx.Close()
		t.Skipf("unlockpt: %v", err)
	}
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		ptmx.Close()
		t.Skipf("ptsname: %v", err)
	}
	term, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		ptmx.Close()
		t.Skipf("open the terminal: %v", err)
	}
	var buf bytes.Buffer
	done := make(chan struct{})
	go func() { // owned by the test: ends when the terminal is closed
		defer close(done)
		_, _ = io.Copy(&buf, ptmx)
	}()
	closed := false
	finish := func() {
		if !closed {
			closed = true
			term.Close()
			select {
			case <-done:
			case <-time.After(10 * time.Second): // a bound against a hang
			}
			ptmx.Close()
			<-done
		}
	}
	t.Cleanup(finish)
	return term, func() string {
		finish()
		return buf.String()
	}
}

// runTo runs inspect in-process with its own stdout and stderr.
func runTo(args []string, stdout, stderr io.Writer) int {
	a := &app{now: func() time.Time { return testNow }}
	return a.execute(args, stdout, stderr)
}

// --progress auto draws the bar when stderr is a terminal; an export
// whose objects go to that terminal too drew the bar amid them (the first
// object began on the bar's line) and now draws none.
func TestRegressionProgressNotAmidExportOnTerminal(t *testing.T) {
	path := fixture(t)
	// The objects to a file, stderr the terminal: the bar.
	term, screen := openTerminal(t)
	out, err := os.Create(filepath.Join(t.TempDir(), "pods.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if code := runTo([]string{"export", path, "pods", "-o", "jsonl"}, out, term); code != 0 {
		t.Fatalf("export: exit %d: %q", code, screen())
	}
	if s := screen(); !strings.Contains(s, "export 100%") {
		t.Fatalf("export to a file, stderr a terminal: the screen shows %q, want the bar", s)
	}
	// The objects and stderr to one terminal: the objects, no bar.
	term, screen = openTerminal(t)
	if code := runTo([]string{"export", path, "pods", "-o", "jsonl"}, term, term); code != 0 {
		t.Fatalf("export: exit %d: %q", code, screen())
	}
	s := strings.ReplaceAll(screen(), "\r\n", "\n") // the terminal's output processing
	if strings.Contains(s, "export") || strings.Contains(s, "\r") || strings.Count(s, "\n") != 6 || !strings.HasPrefix(s, `{"apiVersion":"v1","kind":"Pod"`) {
		t.Fatalf("export to the terminal: the screen shows %q..., want 6 objects and no bar", s[:min(len(s), 200)])
	}
	// check and compact print once the bar is done: it is drawn.
	for _, args := range [][]string{{"check", path}, {"compact", path, filepath.Join(t.TempDir(), "c.db")}} {
		term, screen := openTerminal(t)
		if code := runTo(args, term, term); code != 0 {
			t.Fatalf("%s: exit %d: %q", args[0], code, screen())
		}
		if s := screen(); !strings.Contains(s, args[0]+": ") && !strings.Contains(s, args[0]+" 100%") {
			t.Fatalf("%s on a terminal: the screen shows %q, want the bar", args[0], s)
		}
	}
}
