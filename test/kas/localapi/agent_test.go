package localapi

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/localapi"
)

// The agent child's environment.
const (
	agentEnv       = "LOCALAPI_E2E_AGENT" // the cache file: run as the agent
	agentDirEnv    = "LOCALAPI_E2E_DIR"   // token, certificate, kubeconfig
	agentAddrEnv   = "LOCALAPI_E2E_ADDR"  // the loopback address to serve on
	agentKubeEnv   = "LOCALAPI_E2E_KUBECONFIG"
	agentWindowEnv = "LOCALAPI_E2E_WINDOW"
	agentPprofEnv  = "LOCALAPI_E2E_PPROF" // "1": serve net/http/pprof on 127.0.0.1
	// agentSecretsEnv, when set, is the name and Resource of an informer
	// of every namespace's Secrets the agent adds (not "secrets": the
	// local API must refuse them by their kind).
	agentSecretsEnv = "LOCALAPI_E2E_SECRETS_AS"
)

// agentMain is the agent: Pods and ConfigMaps of every namespace in a
// cache file, served by the local API (created before the informers
// start, so that its window holds every event), until SIGTERM. It prints
// "READY <kubeconfig>" once it serves.
func agentMain() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := agent(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "agent:", err)
		return 1
	}
	return 0
}

func agent(ctx context.Context) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv(agentKubeEnv))
	if err != nil {
		return err
	}
	cfg.QPS = -1
	logger := klog.Background().V(2)
	db, err := boltinformer.Open(os.Getenv(agentEnv), &boltinformer.Options{Logger: &logger})
	if err != nil {
		return err
	}
	defer db.Close()
	f, err := boltinformer.NewFactory(db, cfg, &boltinformer.FactoryOptions{LookupTimeout: time.Second})
	if err != nil {
		return err
	}
	if _, err := f.PersistentInformer(&corev1.Pod{}); err != nil {
		return err
	}
	if _, err := f.PersistentInformer(&corev1.ConfigMap{}); err != nil {
		return err
	}
	var secrets *boltinformer.Informer
	if name := os.Getenv(agentSecretsEnv); name != "" {
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return err
		}
		lw := cache.NewListWatchFromClient(cs.CoreV1().RESTClient(), "secrets", metav1.NamespaceAll, fields.Everything())
		if secrets, err = db.NewInformer(name, lw, &corev1.Secret{}, 0, nil, &boltinformer.InformerOptions{Resource: name}); err != nil {
			return err
		}
	}
	var window int
	fmt.Sscan(os.Getenv(agentWindowEnv), &window)
	dir := os.Getenv(agentDirEnv)
	tok, err := localapi.LoadOrCreateToken(filepath.Join(dir, "token"))
	if err != nil {
		return err
	}
	cert, err := localapi.LoadOrCreateCert(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		return err
	}
	h, err := localapi.New(db, &localapi.Options{Token: tok, WindowEvents: window, Logger: &logger})
	if err != nil {
		return err
	}
	defer h.Close()
	l, err := localapi.ListenLocal(os.Getenv(agentAddrEnv), cert)
	if err != nil {
		return err
	}
	kc := filepath.Join(dir, "kubeconfig")
	if err := localapi.WriteKubeconfig(kc, l.Addr().String(), tok, cert); err != nil {
		return err
	}
	if os.Getenv(agentPprofEnv) == "1" {
		pl, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		ps := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = ps.Serve(pl) }()
		defer ps.Close()
		fmt.Println("PPROF " + pl.Addr().String())
	}
	runCtx, cancel := context.WithCancel(context.Background())
	f.StartWithContext(runCtx)
	secretsDone := make(chan struct{})
	if secrets != nil {
		go func() { defer close(secretsDone); secrets.RunWithContext(runCtx) }()
	} else {
		close(secretsDone)
	}
	serveDone := make(chan error, 1)
	go func() { serveDone <- h.Serve(ctx, l) }()
	fmt.Println("READY " + kc)
	<-ctx.Done()
	serr := <-serveDone
	cancel()
	<-secretsDone
	f.Shutdown()
	return serr
}

// agentProc is a running agent child.
type agentProc struct {
	cmd        *exec.Cmd
	kubeconfig string
	addr       string
	pprof      string // the address of its net/http/pprof, or ""
	done       chan error
	stopOnce   sync.Once
}

// startAgent runs the agent on the cache file in dir, serving on addr
// ("": any free port), and waits for it to serve.
func startAgent(t testing.TB, dir, addr string, window int) *agentProc {
	t.Helper()
	return startAgentOn(t, dir, addr, window, cluster.Kubeconfig())
}

// startAgentEnv is startAgent with more of the agent's environment
// (NAME=VALUE).
func startAgentEnv(t testing.TB, dir, addr string, window int, env ...string) *agentProc {
	t.Helper()
	return startAgentOn(t, dir, addr, window, cluster.Kubeconfig(), env...)
}

// startAgentOn is startAgentEnv with the agent's kubeconfig for the
// cluster (one to a closed port starts it offline).
func startAgentOn(t testing.TB, dir, addr string, window int, kubeconfig string, env ...string) *agentProc {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		agentEnv+"="+filepath.Join(dir, "cache.db"),
		agentDirEnv+"="+dir,
		agentAddrEnv+"="+addr,
		agentKubeEnv+"="+kubeconfig,
		fmt.Sprintf("%s=%d", agentWindowEnv, window),
	)
	cmd.Env = append(cmd.Env, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	logf, err := os.OpenFile(filepath.Join(dir, "agent.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd.Stderr = logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &agentProc{cmd: cmd, done: make(chan error, 1)}
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if kc, ok := strings.CutPrefix(sc.Text(), "READY "); ok {
				ready <- kc
			} else if addr, ok := strings.CutPrefix(sc.Text(), "PPROF "); ok {
				p.pprof = addr // before READY: read once ready is
			}
		}
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() { p.stop(t) })
	select {
	case p.kubeconfig = <-ready:
	case err := <-p.done:
		b, _ := os.ReadFile(filepath.Join(dir, "agent.log"))
		t.Fatalf("agent exited before serving: %v\n%s", err, b)
	case <-time.After(2 * time.Minute):
		t.Fatal("agent did not serve within 2 minutes")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", p.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	p.addr = strings.TrimPrefix(cfg.Host, "https://")
	return p
}

// stop ends the agent with SIGTERM (a clean stop: it flushes) and waits.
func (p *agentProc) stop(t testing.TB) {
	p.stopOnce.Do(func() { p.stopLocked(t) })
}

func (p *agentProc) stopLocked(t testing.TB) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Errorf("agent: %v", err)
		}
	case <-time.After(time.Minute):
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Errorf("agent did not stop within a minute of SIGTERM")
	}
}

func (p *agentProc) pid() int { return p.cmd.Process.Pid }

// kill ends the agent with SIGKILL (no flush, no clean stop: a crash) and
// waits for it to exit. A kill already sent (e.g. by a client's trigger)
// is waited for the same way.
func (p *agentProc) kill() {
	p.stopOnce.Do(func() {
		_ = p.cmd.Process.Kill() // our own child, by its pid
		<-p.done
	})
}
