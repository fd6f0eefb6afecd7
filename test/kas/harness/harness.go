package harness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/boltinformer/boltinformer/test/kas/internal/child"
	"github.com/boltinformer/boltinformer/test/kas/internal/kasbuild"
	"github.com/boltinformer/boltinformer/test/kas/internal/kasdir"
	"github.com/boltinformer/boltinformer/test/kas/internal/loopback"
)

// Options configure Start. A nil *Options means all defaults.
type Options struct {
	// Dir holds etcd's data, the credentials, the kubeconfig and the logs
	// (etcd.log, apiserver.log). Empty: t.TempDir(), or a temporary
	// directory removed by Stop when Start was given no testing.TB. Starting
	// again on the same Dir resumes the same data, credentials and port.
	Dir string
	// Binary is a prebuilt kas binary. Empty: $KAS_BINARY, else built or
	// taken from the cache by the same code as build.sh.
	Binary string
	// CompactionInterval is the apiserver's --etcd-compaction-interval; 0
	// keeps its default (5m). Use 5*time.Second with WatchCacheSizes
	// {"secrets#0"} to get 410 Expired on secrets within about 12 s.
	CompactionInterval time.Duration
	// WatchCacheSizes is the apiserver's --watch-cache-sizes, e.g.
	// {"secrets#0"} to serve secrets straight from etcd. A resource without
	// a watch cache gets no periodic bookmarks.
	WatchCacheSizes []string
	// APIServerFlags are appended to kube-apiserver's flags: a scalar flag
	// given here overrides the harness's value, a list flag (e.g.
	// --disable-admission-plugins) adds to it.
	APIServerFlags []string
	// EtcdUnsafeNoFsync turns fsync off in etcd: faster writes, for
	// benchmarks that do not measure etcd.
	EtcdUnsafeNoFsync bool
	// StartTimeout bounds each start of etcd and of the apiserver (not the
	// build); 0 means 2 minutes.
	StartTimeout time.Duration
	// StopTimeout is the grace between SIGTERM and SIGKILL; 0 means 20 s.
	StopTimeout time.Duration
	// Logf receives progress messages; nil means t.Logf, or nothing
	// without a testing.TB.
	Logf func(format string, args ...any)
}

// Cluster is a running etcd and kube-apiserver on 127.0.0.1. Its methods
// are safe for concurrent use.
type Cluster struct {
	opts    Options
	layout  kasdir.Layout
	bin     string
	tempDir bool // Dir was made by Start and is removed by Stop

	// mu guards the fields below; it is held across process starts and
	// stops, so those are serialized.
	mu        sync.Mutex
	etcd      *child.Process
	etcdURL   string
	apiserver *child.Process
	cfg       *rest.Config // of the last apiserver that became ready
	stopped   bool
}

// ErrStopped is returned by methods of a Cluster after Stop.
var ErrStopped = errors.New("harness: cluster is stopped")

// ErrAPIServerDown is returned by methods that need a running apiserver.
var ErrAPIServerDown = errors.New("harness: apiserver is not running")

// Start builds or finds the kas binary, starts etcd and the apiserver, and
// returns when the apiserver is ready. tb may be nil (e.g. in TestMain);
// then the caller must call Stop. With a non-nil tb, Stop runs in tb.Cleanup
// and, if the test failed, the tails of both logs are logged. On error,
// everything started is stopped again.
func Start(tb testing.TB, opts *Options) (*Cluster, error) {
	if tb != nil {
		tb.Helper()
	}
	c := &Cluster{}
	if opts != nil {
		c.opts = *opts
	}
	o := &c.opts
	if o.StartTimeout == 0 {
		o.StartTimeout = 2 * time.Minute
	}
	if o.StopTimeout == 0 {
		o.StopTimeout = 20 * time.Second
	}
	if o.Logf == nil {
		if tb != nil {
			o.Logf = tb.Logf
		} else {
			o.Logf = func(string, ...any) {}
		}
	}
	if o.Dir == "" {
		if tb != nil {
			o.Dir = tb.TempDir()
		} else {
			d, err := os.MkdirTemp("", "kas-")
			if err != nil {
				return nil, fmt.Errorf("harness: %w", err)
			}
			o.Dir, c.tempDir = d, true
		}
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("harness: %w", err)
	}
	c.layout = kasdir.Layout{Dir: o.Dir}

	c.bin = o.Binary
	if c.bin == "" {
		ctx := context.Background()
		if tb != nil {
			ctx = tb.Context()
		}
		res, err := kasbuild.Build(ctx, kasbuild.Options{Logf: o.Logf})
		if err != nil {
			return nil, err
		}
		c.bin = res.Binary
	}

	if tb != nil {
		tb.Cleanup(func() {
			if tb.Failed() {
				tb.Logf("harness: tail of %s:\n%s", c.layout.EtcdLog(), tail(c.layout.EtcdLog(), 20))
				tb.Logf("harness: tail of %s:\n%s", c.layout.APIServerLog(), tail(c.layout.APIServerLog(), 40))
			}
			if err := c.Stop(); err != nil {
				tb.Errorf("harness: stop: %v", err)
			}
		})
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	err := c.startEtcdLocked()
	if err == nil {
		err = c.startAPIServerLocked()
	}
	if err != nil {
		c.stopLocked()
		return nil, err
	}
	return c, nil
}

// Dir is the cluster's directory (see Options.Dir).
func (c *Cluster) Dir() string { return c.layout.Dir }

// Kubeconfig is the path of the kubeconfig: the apiserver on
// https://127.0.0.1:PORT, its CA, and the bearer token of a user in group
// system:masters. It stays valid across StopAPIServer/StartAPIServer.
func (c *Cluster) Kubeconfig() string { return c.layout.Kubeconfig() }

// EtcdURL is etcd's client URL (http://127.0.0.1:PORT).
func (c *Cluster) EtcdURL() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.etcdURL
}

// EtcdLog and APIServerLog are the paths of the processes' logs; they are
// appended to across restarts.
func (c *Cluster) EtcdLog() string { return c.layout.EtcdLog() }

// APIServerLog is the path of the apiserver's log (see EtcdLog).
func (c *Cluster) APIServerLog() string { return c.layout.APIServerLog() }

// Binary is the path of the kas binary in use.
func (c *Cluster) Binary() string { return c.bin }

// RESTConfig returns a new copy of the client configuration of the
// apiserver, from Kubeconfig, with client-side rate limiting off (QPS -1);
// set QPS and Burst to get client-go's defaults back. It is valid across
// apiserver restarts (the port is kept).
func (c *Cluster) RESTConfig() *rest.Config {
	c.mu.Lock()
	defer c.mu.Unlock()
	return rest.CopyConfig(c.cfg)
}

// Clientset returns a typed client for RESTConfig.
func (c *Cluster) Clientset() (kubernetes.Interface, error) {
	return kubernetes.NewForConfig(c.RESTConfig())
}

// APIServerPID is the process id of the running apiserver, or 0.
func (c *Cluster) APIServerPID() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.apiserver == nil || c.apiserver.Exited() {
		return 0
	}
	return c.apiserver.Pid()
}

// EtcdPID is the process id of the running etcd, or 0.
func (c *Cluster) EtcdPID() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.etcd == nil || c.etcd.Exited() {
		return 0
	}
	return c.etcd.Pid()
}

// StopAPIServer stops the apiserver gracefully (SIGTERM; SIGKILL after
// Options.StopTimeout) and waits for it to exit; etcd keeps running. It is a
// no-op when the apiserver is not running.
func (c *Cluster) StopAPIServer() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopAPIServerLocked(false)
}

// KillAPIServer SIGKILLs the apiserver (a crash, no graceful shutdown) and
// waits for it to exit; etcd keeps running. It is a no-op when the apiserver
// is not running.
func (c *Cluster) KillAPIServer() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopAPIServerLocked(true)
}

// StartAPIServer starts the apiserver again after StopAPIServer or
// KillAPIServer, on the same etcd, port and credentials, and returns when it
// is ready. It fails if the apiserver is running.
func (c *Cluster) StartAPIServer() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return ErrStopped
	}
	if c.apiserver != nil && !c.apiserver.Exited() {
		return errors.New("harness: apiserver is already running")
	}
	return c.startAPIServerLocked()
}

// Stop stops the apiserver, then etcd, and waits for both. It is idempotent;
// the Cluster is unusable afterwards. The directory is kept unless Start
// made it without a testing.TB.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopLocked()
}

func (c *Cluster) stopLocked() error {
	if c.stopped {
		return nil
	}
	c.stopped = true
	start := time.Now()
	err := c.stopAPIServerLocked(false)
	if c.etcd != nil {
		if serr := c.etcd.Stop(c.opts.StopTimeout); serr != nil {
			err = errors.Join(err, fmt.Errorf("harness: stop etcd: %w", serr))
		}
		c.etcd = nil
	}
	c.opts.Logf("harness: cluster stopped in %s", time.Since(start).Round(time.Millisecond))
	if c.tempDir {
		err = errors.Join(err, os.RemoveAll(c.layout.Dir))
	}
	return err
}

func (c *Cluster) stopAPIServerLocked(kill bool) error {
	p := c.apiserver
	if p == nil {
		return nil
	}
	c.apiserver = nil
	if kill {
		p.Kill()
		return nil
	}
	if err := p.Stop(c.opts.StopTimeout); err != nil {
		return fmt.Errorf("harness: stop apiserver: %w", err)
	}
	return nil
}

func (c *Cluster) startEtcdLocked() error {
	_ = os.Remove(c.layout.EtcdURLFile())
	args := []string{"etcd", "--data-dir", c.layout.EtcdDataDir(), "--url-file", c.layout.EtcdURLFile()}
	if c.opts.EtcdUnsafeNoFsync {
		args = append(args, "--unsafe-no-fsync")
	}
	start := time.Now()
	p, line, err := c.run(args, c.layout.EtcdLog(), func(line string) bool {
		return strings.HasPrefix(line, "http://"+loopback.Host+":")
	})
	if err != nil {
		return err
	}
	c.etcd = p
	c.etcdURL = line
	c.opts.Logf("harness: etcd %s ready in %s (pid %d)", line, time.Since(start).Round(time.Millisecond), p.Pid())
	return nil
}

func (c *Cluster) startAPIServerLocked() error {
	args := []string{"apiserver", "--etcd", c.etcdURL, "--dir", c.layout.Dir,
		"--ready-timeout", c.opts.StartTimeout.String()}
	if c.opts.CompactionInterval > 0 {
		args = append(args, "--compaction-interval", c.opts.CompactionInterval.String())
	}
	if len(c.opts.WatchCacheSizes) > 0 {
		args = append(args, "--watch-cache-sizes", strings.Join(c.opts.WatchCacheSizes, ","))
	}
	if len(c.opts.APIServerFlags) > 0 {
		args = append(append(args, "--"), c.opts.APIServerFlags...)
	}
	start := time.Now()
	p, _, err := c.run(args, c.layout.APIServerLog(), func(line string) bool {
		return line == c.layout.Kubeconfig()
	})
	if err != nil {
		return err
	}
	c.apiserver = p
	cfg, err := clientcmd.BuildConfigFromFlags("", c.layout.Kubeconfig())
	if err != nil {
		return fmt.Errorf("harness: %w", err)
	}
	cfg.QPS = -1
	if c.cfg != nil && c.cfg.Host != cfg.Host {
		c.opts.Logf("harness: WARNING: the apiserver moved from %s to %s (old port taken); old clients will fail", c.cfg.Host, cfg.Host)
	}
	c.cfg = cfg
	c.opts.Logf("harness: apiserver %s ready in %s (pid %d)", cfg.Host, time.Since(start).Round(time.Millisecond), p.Pid())
	return nil
}

// run starts `kas args...` with its output appended to logPath and waits for
// the first line on its stdout that ready accepts: what the verbs print once
// they serve. The process is killed if that does not happen in time.
func (c *Cluster) run(args []string, logPath string, ready func(string) bool) (*child.Process, string, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, "", fmt.Errorf("harness: %w", err)
	}
	fmt.Fprintf(logf, "=== harness %s: kas %s\n", time.Now().Format(time.RFC3339Nano), strings.Join(args, " "))
	pr, pw, err := os.Pipe()
	if err != nil {
		logf.Close()
		return nil, "", fmt.Errorf("harness: %w", err)
	}
	p, err := child.Start(c.bin, args, pw, logf, os.Environ())
	pw.Close() // the child has its own copies of pw and logf
	if err != nil {
		pr.Close()
		logf.Close()
		return nil, "", err
	}
	lines := make(chan string, 1)
	go func() {
		// Forward stdout to the log until the child exits, and report the
		// ready line.
		defer logf.Close()
		defer pr.Close()
		sc := bufio.NewScanner(pr)
		sent := false
		for sc.Scan() {
			if line := strings.TrimSpace(sc.Text()); !sent && ready(line) {
				lines <- line
				sent = true
			}
			fmt.Fprintf(logf, "[stdout] %s\n", sc.Text())
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	timer := time.NewTimer(c.opts.StartTimeout)
	defer timer.Stop()
	select {
	case line := <-lines:
		return p, line, nil
	case <-p.Done():
		return nil, "", fmt.Errorf("harness: kas %s exited before it was ready: %v\n%s: ...\n%s",
			args[0], p.Err(), logPath, tail(logPath, 30))
	case <-timer.C:
		p.Kill()
		return nil, "", fmt.Errorf("harness: kas %s not ready within %s\n%s: ...\n%s",
			args[0], c.opts.StartTimeout, logPath, tail(logPath, 30))
	}
}

// tail returns the last n lines of the file at path.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
