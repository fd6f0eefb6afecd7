// Package e2e tests boltinformer end to end against a real kube-apiserver and
// etcd on 127.0.0.1 (the harness in test/kas/harness). Each test asserts on
// the API server's own evidence where it can: the requests the agent made
// (a recording http.RoundTripper on its rest.Config) and the apiserver's
// apiserver_request_total.
//
// One cluster serves the whole package (tests run one at a time, each in
// its own namespace). It runs with a 5 s etcd compaction interval and no
// watch cache for Secrets, so that a saved resourceVersion for Secrets
// becomes too old (410) within seconds; the other resources keep their
// watch cache. Tests that restart the apiserver leave it running.
package e2e

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/boltinformer/boltinformer/test/kas/harness"
)

// cluster is the package's shared cluster, started by TestMain.
var cluster *harness.Cluster

// compactionInterval is the shared cluster's --etcd-compaction-interval.
const compactionInterval = 5 * time.Second

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	c, err := harness.Start(nil, &harness.Options{
		CompactionInterval: compactionInterval,
		WatchCacheSizes:    []string{"secrets#0"},
		EtcdUnsafeNoFsync:  true, // the tests measure the apiserver, not etcd's disk
		Logf: func(format string, args ...any) {
			fmt.Fprintf(os.Stderr, format+"\n", args...)
		},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: start cluster: %v\n", err)
		return 1
	}
	cluster = c
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "e2e: apiserver log: %s\n", c.APIServerLog())
	}
	if err := c.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: stop cluster: %v\n", err)
		code = 1
	}
	if code == 0 {
		if kids := childrenOf(os.Getpid()); len(kids) > 0 {
			fmt.Fprintf(os.Stderr, "e2e: leaked child processes: %v\n", kids)
			code = 1
		}
	}
	if code == 0 {
		if err := goleak.Find(leakOptions...); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
			code = 1
		}
	}
	return code
}

// leakOptions ignore the goroutines that client-go, net/http and klog keep
// for the process lifetime.
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
