package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/boltinformer/boltinformer/store"
	"github.com/boltinformer/boltinformer/test/kas/harness"
)

const namespace = "edge"

type config struct {
	pods, otherNodes, otherPods, configMaps, secrets, churn int
	root, workDir                                           string
	verbose                                                 bool
	timeout                                                 time.Duration
}

func main() {
	var c config
	flag.IntVar(&c.pods, "pods", 2000, "Pods on node-1 (the agent's node)")
	flag.IntVar(&c.otherNodes, "other-nodes", 3, "other nodes")
	flag.IntVar(&c.otherPods, "other-pods", 500, "Pods on each other node")
	flag.IntVar(&c.configMaps, "configmaps", 300, "ConfigMaps in namespace edge")
	flag.IntVar(&c.secrets, "secrets", 100, "Secrets in namespace edge")
	flag.IntVar(&c.churn, "churn", 50, "Pods on node-1 created, updated and deleted (each) between the runs")
	flag.StringVar(&c.root, "root", "../..", "the boltinformer module root (where examples/edge-agent is)")
	flag.StringVar(&c.workDir, "dir", "", "working directory for the cluster, the agent binary and its cache (default: a temporary one, removed at exit)")
	flag.BoolVar(&c.verbose, "v", false, "log the harness's progress")
	flag.DurationVar(&c.timeout, "timeout", 15*time.Minute, "give up after this long")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if err := run(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// report is the edge agent's -report line (examples/edge-agent).
type report struct {
	Start            map[string]string `json:"start"`
	FirstListerPods  int               `json:"firstListerPods"`
	FirstListerMS    float64           `json:"firstListerMs"`
	SyncedMS         float64           `json:"syncedMs"`
	Requests         map[string]int64  `json:"requests"`
	PodsOnNode       int               `json:"podsOnNode"`
	ConfigMaps       int               `json:"configMaps"`
	Secrets          int               `json:"secrets"`
	FirstRequestVerb string            `json:"firstRequestVerb"`
}

// result is one run of the agent.
type result struct {
	name        string
	r           report
	wall        time.Duration
	serverLists float64 // apiserver_request_total{verb="LIST"} delta
	watchEvents float64 // apiserver_watch_events_total delta
}

func run(ctx context.Context, c config) error {
	root, err := moduleRoot(c.root)
	if err != nil {
		return err
	}
	dir := c.workDir
	if dir == "" {
		d, err := os.MkdirTemp("", "boltinformer-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	logf := func(string, ...any) {}
	if c.verbose {
		logf = func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	}

	step("building examples/edge-agent")
	agentBin := filepath.Join(dir, "edge-agent")
	build := exec.CommandContext(ctx, "go", "build", "-o", agentBin, "./examples/edge-agent")
	build.Dir = root
	build.Env = append(os.Environ(), "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./examples/edge-agent: %v\n%s", err, out)
	}

	step("starting etcd and kube-apiserver on 127.0.0.1")
	start := time.Now()
	cluster, err := harness.Start(nil, &harness.Options{
		Dir:               filepath.Join(dir, "cluster"),
		Binary:            os.Getenv("KAS_BINARY"),
		EtcdUnsafeNoFsync: true, // faster seeding; the demo measures the agent and the apiserver
		Logf:              logf,
	})
	if err != nil {
		return err
	}
	defer func() {
		step("stopping the cluster")
		if err := cluster.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "demo: stop:", err)
		}
	}()
	fmt.Printf("   apiserver %s ready in %s\n", cluster.RESTConfig().Host, time.Since(start).Round(100*time.Millisecond))
	cs, err := cluster.Clientset()
	if err != nil {
		return err
	}

	step(fmt.Sprintf("seeding namespace %q: %d Pods on node-1, %d on %d other nodes, %d ConfigMaps, %d Secrets",
		namespace, c.pods, c.otherPods*c.otherNodes, c.otherNodes, c.configMaps, c.secrets))
	start = time.Now()
	if err := seed(ctx, cs, c); err != nil {
		return err
	}
	fmt.Printf("   seeded in %s\n", time.Since(start).Round(100*time.Millisecond))

	cache := filepath.Join(dir, "edge-agent.db")
	agentLog := filepath.Join(dir, "edge-agent.log")
	if err := writeKeyFile(filepath.Join(dir, keyFileName)); err != nil {
		return err
	}
	var results []result
	step("edge agent, first start (no cache file: cold)")
	cold, err := runAgent(ctx, cluster, agentBin, cache, agentLog, "cold, WatchList", nil)
	if err != nil {
		return err
	}
	results = append(results, cold)
	// client-go's other cold mode, for comparison: LIST instead of WatchList.
	step("edge agent, cold again on an empty file, with KUBE_FEATURE_WatchListClient=false (LIST instead of WatchList)")
	coldList, err := runAgent(ctx, cluster, agentBin, filepath.Join(dir, "edge-agent-list.db"), agentLog, "cold, LIST",
		[]string{"KUBE_FEATURE_WatchListClient=false"})
	if err != nil {
		return err
	}
	results = append(results, coldList)

	step(fmt.Sprintf("while it is down: %d Pods on node-1 created, %d updated, %d deleted; ConfigMaps and Secrets changed", c.churn, c.churn, c.churn))
	if err := churn(ctx, cs, c); err != nil {
		return err
	}

	step("edge agent, second start (from its cache file: warm)")
	warm, err := runAgent(ctx, cluster, agentBin, cache, agentLog, "warm", nil)
	if err != nil {
		return err
	}
	results = append(results, warm)

	fmt.Println()
	printTable(results)
	fmt.Println()
	return verdict(ctx, cs, c, cache, cold, coldList, warm)
}

func step(s string) { fmt.Printf("== %s\n", s) }

// moduleRoot resolves dir and checks that it is the library's module.
func moduleRoot(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(filepath.Join(abs, "go.mod"))
	if err != nil || !strings.HasPrefix(string(b), "module github.com/boltinformer/boltinformer\n") {
		return "", fmt.Errorf("%s is not the boltinformer module root (use -root)", abs)
	}
	return abs, nil
}

func demoPod(name, node string, gen int) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: namespace, Name: name,
			Labels:      map[string]string{"app": "edge-workload", "tier": "demo", "gen": fmt.Sprint(gen)},
			Annotations: map[string]string{"boltinformer.io/demo": "a warm-restarting informer cache"},
		},
		Spec: corev1.PodSpec{
			NodeName: node,
			Containers: []corev1.Container{{
				Name:    "app",
				Image:   "registry.k8s.io/pause:3.10",
				Command: []string{"/pause"},
				Env:     []corev1.EnvVar{{Name: "NODE", Value: node}, {Name: "GEN", Value: fmt.Sprint(gen)}},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
				},
			}},
		},
	}
}

// parallel runs f(0..n-1) on 16 goroutines and returns the first error.
func parallel(ctx context.Context, n int, f func(context.Context, int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n && ctx.Err() == nil; i = int(next.Add(1) - 1) {
				if err := f(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
					return
				}
			}
		}()
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}

func seed(ctx context.Context, cs kubernetes.Interface, c config) error {
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	pods := cs.CoreV1().Pods(namespace)
	total := c.pods + c.otherNodes*c.otherPods
	if err := parallel(ctx, total, func(ctx context.Context, i int) error {
		name, node := fmt.Sprintf("edge-%05d", i), "node-1"
		if i >= c.pods {
			j := i - c.pods
			node = fmt.Sprintf("node-%d", 2+j/c.otherPods)
			name = fmt.Sprintf("%s-%05d", node, j%c.otherPods)
		}
		_, err := pods.Create(ctx, demoPod(name, node, 0), metav1.CreateOptions{})
		return err
	}); err != nil {
		return fmt.Errorf("seed pods: %w", err)
	}
	if err := parallel(ctx, c.configMaps, func(ctx context.Context, i int) error {
		_, err := cs.CoreV1().ConfigMaps(namespace).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("config-%04d", i)},
			Data:       map[string]string{"app.yaml": strings.Repeat("key: value\n", 20)},
		}, metav1.CreateOptions{})
		return err
	}); err != nil {
		return fmt.Errorf("seed configmaps: %w", err)
	}
	if err := parallel(ctx, c.secrets, func(ctx context.Context, i int) error {
		_, err := cs.CoreV1().Secrets(namespace).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("secret-%04d", i)},
			Data:       map[string][]byte{"token": []byte(fmt.Sprintf("token-%d", i))},
		}, metav1.CreateOptions{})
		return err
	}); err != nil {
		return fmt.Errorf("seed secrets: %w", err)
	}
	return nil
}

func churn(ctx context.Context, cs kubernetes.Interface, c config) error {
	pods := cs.CoreV1().Pods(namespace)
	n := min(c.churn, c.pods/2)
	if err := parallel(ctx, n, func(ctx context.Context, i int) error {
		if _, err := pods.Create(ctx, demoPod(fmt.Sprintf("edge-new-%05d", i), "node-1", 0), metav1.CreateOptions{}); err != nil {
			return err
		}
		p, err := pods.Get(ctx, fmt.Sprintf("edge-%05d", i), metav1.GetOptions{})
		if err != nil {
			return err
		}
		p.Labels["gen"] = "1"
		if _, err := pods.Update(ctx, p, metav1.UpdateOptions{}); err != nil {
			return err
		}
		// No kubelet runs: a graceful delete would leave the Pod Terminating.
		return pods.Delete(ctx, fmt.Sprintf("edge-%05d", c.pods-1-i), metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	}); err != nil {
		return fmt.Errorf("churn pods: %w", err)
	}
	if c.configMaps > 0 {
		cm, err := cs.CoreV1().ConfigMaps(namespace).Get(ctx, "config-0000", metav1.GetOptions{})
		if err != nil {
			return err
		}
		cm.Data["changed"] = "true"
		if _, err := cs.CoreV1().ConfigMaps(namespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			return err
		}
	}
	if c.secrets > 0 {
		if err := cs.CoreV1().Secrets(namespace).Delete(ctx, "secret-0000", metav1.DeleteOptions{}); err != nil {
			return err
		}
	}
	_, err := cs.CoreV1().Secrets(namespace).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "secret-new"},
		Data:       map[string][]byte{"token": []byte("new")},
	}, metav1.CreateOptions{})
	return err
}

// serverCounts returns the apiserver's LIST requests and watch events sent,
// over every resource.
func serverCounts(ctx context.Context, c *harness.Cluster) (lists, events float64, err error) {
	lists, err = c.MetricSum(ctx, "apiserver_request_total", map[string]string{"verb": "LIST"})
	if err != nil {
		return 0, 0, err
	}
	events, err = c.MetricSum(ctx, "apiserver_watch_events_total", nil)
	return lists, events, err
}

// keyFileName is the agent's -key-file in the demo's directory.
const keyFileName = "edge-agent-keys.yaml"

// writeKeyFile writes the agent's key file: an EncryptionConfiguration
// with a new random AES-256 key for Secrets.
func writeKeyFile(path string) error {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(`apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
- resources: [secrets]
  providers:
  - aesgcm:
      keys:
      - name: demo
        secret: `+base64.StdEncoding.EncodeToString(key)+"\n"), 0o600)
}

// runAgent runs the edge agent with -report -once (and env added to its
// environment) and returns its report.
func runAgent(ctx context.Context, c *harness.Cluster, bin, cache, logPath, name string, env []string) (result, error) {
	lists0, events0, err := serverCounts(ctx, c)
	if err != nil {
		return result{}, err
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return result{}, err
	}
	defer logf.Close()
	fmt.Fprintf(logf, "=== demo: %s start\n", name)
	actx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(actx, bin, "-kubeconfig", c.Kubeconfig(), "-node", "node-1", "-namespace", namespace,
		"-cache", cache, "-key-file", filepath.Join(filepath.Dir(cache), keyFileName), "-report", "-once")
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, logf
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return result{}, fmt.Errorf("edge-agent (%s): %w; log: %s\n%s", name, err, logPath, tail(logPath, 20))
	}
	wall := time.Since(start)
	var r report
	line := strings.TrimSpace(out.String())
	if i := strings.LastIndexByte(line, '\n'); i >= 0 {
		line = line[i+1:]
	}
	if err := json.Unmarshal([]byte(line), &r); err != nil {
		return result{}, fmt.Errorf("edge-agent (%s) report %q: %w", name, line, err)
	}
	// The agent has exited: its requests have all ended and been counted.
	lists1, events1, err := serverCounts(ctx, c)
	if err != nil {
		return result{}, err
	}
	return result{name: name, r: r, wall: wall, serverLists: lists1 - lists0, watchEvents: events1 - events0}, nil
}

func printTable(rs []result) {
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "start\tfirst lister answer\tsynced\tLISTs: agent\tapiserver\twatch events sent\tpods\tconfigmaps\tsecrets\t")
	for _, r := range rs {
		fmt.Fprintf(w, "%s\t%s (%d pods)\t%s\t%d\t%.0f\t%.0f\t%d\t%d\t%d\t\n",
			r.name, fmtMS(r.r.FirstListerMS), r.r.FirstListerPods, fmtMS(r.r.SyncedMS), r.r.Requests["LIST"], r.serverLists,
			r.watchEvents, r.r.PodsOnNode, r.r.ConfigMaps, r.r.Secrets)
	}
	_ = w.Flush()
}

func fmtMS(ms float64) string {
	if ms < 10 {
		return fmt.Sprintf("%.1f ms", ms)
	}
	return fmt.Sprintf("%.0f ms", ms)
}

// verdict checks the warm run against the server and the cache file it
// left, and says what it shows.
func verdict(ctx context.Context, cs kubernetes.Interface, c config, cachePath string, watchListCold, cold, warm result) error {
	pods, err := cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node-1"})
	if err != nil {
		return err
	}
	server := map[string]string{}
	for _, p := range pods.Items {
		server[p.Namespace+"/"+p.Name] = p.ResourceVersion
	}
	file, err := filePods(cachePath)
	if err != nil {
		return err
	}
	behind := 0
	for k, rv := range server {
		if file[k] != rv {
			behind++
		}
	}
	for k := range file {
		if _, ok := server[k]; !ok {
			behind++
		}
	}
	var problems []string
	if warm.r.PodsOnNode != len(pods.Items) {
		problems = append(problems, fmt.Sprintf("the warm agent has %d Pods on node-1, the server %d", warm.r.PodsOnNode, len(pods.Items)))
	}
	for inf, s := range warm.r.Start {
		if !strings.HasPrefix(s, "warm") {
			problems = append(problems, fmt.Sprintf("%s started %s", inf, s))
		}
	}
	if warm.r.Requests["LIST"] != 0 {
		problems = append(problems, fmt.Sprintf("the warm agent made %d LIST requests", warm.r.Requests["LIST"]))
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	fmt.Printf("Warm: the lister answered %d Pods from disk %s after the process started, synced in %s (cold: %s),\n",
		warm.r.FirstListerPods, fmtMS(warm.r.FirstListerMS), fmtMS(warm.r.SyncedMS), fmtMS(cold.r.SyncedMS))
	fmt.Printf("and resumed its watches from the saved resourceVersions: %d LISTs (cold with LIST: %d), %.0f watch events (cold with WatchList: %.0f).\n",
		warm.r.Requests["LIST"], cold.r.Requests["LIST"], warm.watchEvents, watchListCold.watchEvents)
	if behind == 0 {
		fmt.Printf("Its cache file now holds the server's %d Pods on node-1 at their current resourceVersions (the %d Pod changes made while it was down are in).\n",
			len(server), 3*min(c.churn, c.pods/2))
	} else {
		fmt.Printf("Its cache file differs from the server in %d of %d Pods: changes still in flight when the agent exited (-once); the next start resumes from the saved resourceVersion.\n",
			behind, len(server))
	}
	return nil
}

// filePods reads the Pods informer's records from the agent's cache file
// (read-only): key -> resourceVersion.
func filePods(path string) (map[string]string, error) {
	db, err := store.Open(path, &store.Options{ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer db.Close()
	out := map[string]string{}
	err = db.View(func(tx *store.Tx) error {
		return tx.ForEach("v1/pods", func(key string, r *store.Record) error {
			out[key] = r.ResourceVersion
			return nil
		})
	})
	return out, err
}

func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
