package child_test

import (
	"os"
	"testing"
	"time"

	"github.com/boltinformer/boltinformer/test/kas/internal/child"
)

func TestStopOnSIGTERM(t *testing.T) {
	p, err := child.Start("sleep", []string{"30"}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(10 * time.Second); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if !p.Exited() {
		t.Fatal("not exited after Stop")
	}
	if err := p.Stop(time.Second); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}

func TestStopKillsWhenSIGTERMIsIgnored(t *testing.T) {
	p, err := child.Start("sh", []string{"-c", `trap "" TERM; sleep 30 & wait`}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // let the shell install its trap
	start := time.Now()
	if err := p.Stop(300 * time.Millisecond); err == nil {
		t.Fatal("Stop reported a clean exit for a process that ignores SIGTERM")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Stop took %s", d)
	}
	if !p.Exited() {
		t.Fatal("not exited after Stop")
	}
}

func TestExitStatus(t *testing.T) {
	p, err := child.Start("sh", []string{"-c", "exit 3"}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	if p.Err() == nil {
		t.Fatal("exit 3 reported as success")
	}
	if err := p.Signal(os.Interrupt); err != child.ErrNotRunning {
		t.Fatalf("Signal after exit: %v, want ErrNotRunning", err)
	}
}
