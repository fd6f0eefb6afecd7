package harness_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestMain fails the run if a test leaked a goroutine or left a child
// process (etcd, apiserver, kas up) running.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if kids := childrenOf(os.Getpid()); len(kids) > 0 {
			fmt.Fprintf(os.Stderr, "harness_test: leaked child processes: %v\n", kids)
			code = 1
		}
	}
	if code == 0 {
		if err := goleak.Find(leakOptions...); err != nil {
			fmt.Fprintf(os.Stderr, "harness_test: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// leakOptions ignore the goroutines that client-go and net/http keep for
// the process lifetime (idle keep-alive connections of cached transports,
// klog's flush daemon).
var leakOptions = []goleak.Option{
	goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
	goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
	goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
	goleak.IgnoreAnyFunction("golang.org/x/net/http2.(*ClientConn).readLoop"),
	goleak.IgnoreAnyFunction("golang.org/x/net/http2.(*clientConnReadLoop).run"),
	goleak.IgnoreAnyFunction("k8s.io/client-go/util/workqueue.(*Type).updateUnfinishedWorkLoop"),
}

// childrenOf lists the live (not zombie) children of process pid.
func childrenOf(pid int) []int {
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
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:]) // state, ppid, ...
		if len(f) >= 2 && f[1] == want && f[0] != "Z" {
			kids = append(kids, kid)
		}
	}
	return kids
}

// processAlive reports whether pid is a live (not zombie) process.
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	f := strings.Fields(s[i+1:])
	return len(f) > 0 && f[0] != "Z"
}

func metaAccessor(obj any) (metav1.Object, error) { return meta.Accessor(obj) }
