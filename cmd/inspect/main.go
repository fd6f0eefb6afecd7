package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"
)

func main() {
	a := &app{now: time.Now}
	os.Exit(a.mainWithSignals(os.Args[1:], os.Stdout, os.Stderr))
}

// mainWithSignals is main: execute, with SIGINT and SIGTERM handled. An
// interrupt is a requested stop: the partial output of a running export or
// compact (its temporary file) is removed, and inspect exits with
// 128+signal (130 for SIGINT, 143 for SIGTERM), as a shell reports a
// process that the signal ended. The file inspected is opened read-only:
// there is nothing else to undo.
func (a *app) mainWithSignals(args []string, stdout, stderr io.Writer) int {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	done := make(chan struct{})
	defer close(done)
	// Owned by this call: it ends with it, or ends the process.
	go func() {
		select {
		case s := <-sigs:
			os.Exit(a.interrupted(s, stderr))
		case <-done:
		}
	}()
	return a.execute(args, stdout, stderr)
}

// interrupted removes the partial outputs and returns the exit status for
// signal s. It keeps tempsMu: no temporary file is created after it.
func (a *app) interrupted(s os.Signal, stderr io.Writer) int {
	a.tempsMu.Lock()
	var removed []string
	for p := range a.temps {
		if err := os.Remove(p); err == nil {
			removed = append(removed, p)
		}
	}
	sort.Strings(removed)
	msg := fmt.Sprintf("inspect: interrupted (%v)", s)
	if len(removed) > 0 {
		msg += "; removed the partial output " + strings.Join(removed, ", ")
	}
	fmt.Fprintln(stderr, msg)
	code := 128 + 2 // SIGINT
	if sig, ok := s.(syscall.Signal); ok {
		code = 128 + int(sig)
	}
	return code
}

// createTemp creates a temporary file in dir, registered for removal on an
// interrupt until forgetTemp.
func (a *app) createTemp(dir, pattern string) (*os.File, error) {
	a.tempsMu.Lock()
	defer a.tempsMu.Unlock()
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return nil, err
	}
	if a.temps == nil {
		a.temps = map[string]bool{}
	}
	a.temps[f.Name()] = true
	return f, nil
}

// forgetTemp ends path's registration (it was renamed, or removed).
func (a *app) forgetTemp(path string) {
	a.tempsMu.Lock()
	defer a.tempsMu.Unlock()
	delete(a.temps, path)
}
