package child

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"
)

// ErrNotRunning is returned by Signal when the process has exited.
var ErrNotRunning = errors.New("child: process is not running")

// Process is a started subprocess.
type Process struct {
	cmd   *exec.Cmd
	donec chan struct{} // closed when the process has been waited for
	err   error         // exit status; read only after donec is closed
}

// Start starts name with args. stdout and stderr may be nil (discarded).
func Start(name string, args []string, stdout, stderr io.Writer, env []string) (*Process, error) {
	cmd := exec.Command(name, args...)
	cmd.Stdout = stdout
	cmd.Stderr = stderr
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Die with the parent. The signal is tied to the thread that forked,
		// so fork from a locked thread that is released after Start (Go
		// does not end threads that are unlocked normally).
		Pdeathsig: syscall.SIGKILL,
		Setpgid:   true,
	}
	runtime.LockOSThread()
	err := cmd.Start()
	runtime.UnlockOSThread()
	if err != nil {
		return nil, fmt.Errorf("child: start %s: %w", name, err)
	}
	p := &Process{cmd: cmd, donec: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.donec)
	}()
	return p, nil
}

// Pid is the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited and been waited for.
func (p *Process) Done() <-chan struct{} { return p.donec }

// Err is the process's exit status once Done is closed (nil for exit 0).
func (p *Process) Err() error {
	<-p.donec
	return p.err
}

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.donec:
		return true
	default:
		return false
	}
}

// Signal sends sig to the process (not its group).
func (p *Process) Signal(sig os.Signal) error {
	if p.Exited() {
		return ErrNotRunning
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		if errors.Is(err, os.ErrProcessDone) {
			return ErrNotRunning
		}
		return fmt.Errorf("child: signal: %w", err)
	}
	return nil
}

// Stop sends SIGTERM, waits up to grace, then SIGKILLs the process group and
// waits for the exit. It returns the exit status of a process that stopped on
// SIGTERM with an error, and nil when it exited 0 or was already gone.
func (p *Process) Stop(grace time.Duration) error {
	if p.Exited() {
		return nil
	}
	_ = p.Signal(syscall.SIGTERM)
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-p.donec:
		return exitErr(p.err)
	case <-timer.C:
	}
	p.Kill()
	return fmt.Errorf("child: %s did not stop within %s after SIGTERM; killed", p.cmd.Path, grace)
}

// Kill SIGKILLs the process group and waits for the process to exit.
func (p *Process) Kill() {
	if !p.Exited() {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		_ = p.cmd.Process.Kill()
	}
	<-p.donec
}

// exitErr drops the "signal: terminated" status of a process that was asked to
// stop with SIGTERM and honoured it.
func exitErr(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGTERM {
			return nil
		}
	}
	return err
}
