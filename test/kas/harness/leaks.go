package harness

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"go.uber.org/goleak"
)

// LeakOptions ignore the goroutines that client-go, net/http and klog keep
// for the process lifetime (idle keep-alive connections of cached
// transports, klog's flush daemon).
var LeakOptions = []goleak.Option{
	goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
	goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
	goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
	goleak.IgnoreAnyFunction("golang.org/x/net/http2.(*ClientConn).readLoop"),
	goleak.IgnoreAnyFunction("golang.org/x/net/http2.(*clientConnReadLoop).run"),
	goleak.IgnoreAnyFunction("k8s.io/client-go/util/workqueue.(*Type).updateUnfinishedWorkLoop"),
}

// CheckLeaks returns an error if this process has a live child process
// (etcd, apiserver, kas up) or a leaked goroutine. Call it from TestMain
// after m.Run.
func CheckLeaks() error {
	if kids := ChildrenOf(os.Getpid()); len(kids) > 0 {
		return fmt.Errorf("leaked child processes: %v", kids)
	}
	return goleak.Find(LeakOptions...)
}

// ChildrenOf lists the live (not zombie) children of process pid.
func ChildrenOf(pid int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	want := strconv.Itoa(pid)
	var kids []int
	for _, e := range ents {
		kid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if state, ppid, ok := procStat(kid); ok && ppid == want && state != "Z" {
			kids = append(kids, kid)
		}
	}
	return kids
}

// ProcessAlive reports whether pid is a live (not zombie) process.
func ProcessAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	state, _, ok := procStat(pid)
	return ok && state != "Z"
}

// procStat reads a process's state and parent pid from /proc.
func procStat(pid int) (state, ppid string, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", "", false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", "", false
	}
	f := strings.Fields(s[i+1:]) // state, ppid, ...
	if len(f) < 2 {
		return "", "", false
	}
	return f[0], f[1], true
}
