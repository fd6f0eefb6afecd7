package e2e

// Issue 24, item 3: the durable queue's crash loop. A real manager (a
// child process of the test binary) with a durable queue is killed with
// SIGKILL at random points, the ConfigMaps change while it is down, and
// it starts again from its file: every needed reconcile happens.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/boltinformer/boltinformer"
	boltcr "github.com/boltinformer/boltinformer/controllerruntime"
)

// seenAnnotation is the crash loop's marker: the reconciler writes the
// source's data generation there (a write of its own, as an operator's
// status update).
const seenAnnotation = "e2e.boltinformer/seen"

// durableChild is the crash loop's operator: a manager over ns's
// ConfigMaps whose controller has a durable queue. Its reconciler writes
// the marker when it is not the object's gen, fails once per
// resourceVersion for objects with data fail=1, asks for RequeueAfter
// when the data has requeue, and appends to DURABLE_LOG, with fsync
// before it returns success, "rec <key> <resourceVersion>" (or "gone
// <key>" for NotFound).
func durableChild() error {
	if os.Getenv("BOLTCR_E2E_LOG") != "" {
		ctrl.SetLogger(klog.NewKlogr())
	} else {
		ctrl.SetLogger(logr.Discard())
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("DURABLE_KUBECONFIG"))
	if err != nil {
		return err
	}
	ns := os.Getenv("DURABLE_NS")
	logf, err := os.OpenFile(os.Getenv("DURABLE_LOG"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	var logMu sync.Mutex
	record := func(line string) error {
		logMu.Lock()
		defer logMu.Unlock()
		if _, err := logf.WriteString(line + "\n"); err != nil {
			return err
		}
		return logf.Sync()
	}
	db, err := boltinformer.Open(os.Getenv("DURABLE_CACHE"), nil)
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
		NewCache:               boltcr.NewCache(db, &boltcr.Options{SyncAfterDiskLoad: os.Getenv("DURABLE_DISKLOAD") != ""}),
	})
	if err != nil {
		return err
	}
	c := mgr.GetClient()
	var failMu sync.Mutex
	failed := map[string]bool{}
	err = ctrl.NewControllerManagedBy(mgr).Named("durable-crash").For(&corev1.ConfigMap{}).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: 2,
			NewQueue:                boltcr.NewQueue(db, &boltcr.QueueOptions{CheckpointInterval: 100 * time.Millisecond}),
		}).
		Complete(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			var cm corev1.ConfigMap
			if err := c.Get(ctx, req.NamespacedName, &cm); apierrors.IsNotFound(err) {
				return reconcile.Result{}, record("gone " + req.String())
			} else if err != nil {
				return reconcile.Result{}, err
			}
			if cm.Data["fail"] == "1" {
				failMu.Lock()
				first := !failed[req.String()+"@"+cm.ResourceVersion]
				failed[req.String()+"@"+cm.ResourceVersion] = true
				failMu.Unlock()
				if first {
					return reconcile.Result{}, errors.New("a failure the test asks for")
				}
			}
			rv := cm.ResourceVersion
			// Some work: kills land in reconciles, not only between.
			time.Sleep(time.Duration(rand.IntN(10)) * time.Millisecond)
			if cm.Annotations[seenAnnotation] != cm.Data["gen"] {
				upd := cm.DeepCopy()
				if upd.Annotations == nil {
					upd.Annotations = map[string]string{}
				}
				upd.Annotations[seenAnnotation] = cm.Data["gen"]
				if err := c.Update(ctx, upd); err != nil {
					return reconcile.Result{}, err
				}
			}
			if err := record("rec " + req.String() + " " + rv); err != nil {
				return reconcile.Result{}, err
			}
			if d, err := time.ParseDuration(cm.Data["requeue"]); err == nil {
				return reconcile.Result{RequeueAfter: d}, nil
			}
			return reconcile.Result{}, nil
		}))
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	if mgr.GetCache().WaitForCacheSync(ctx) {
		fmt.Println("synced")
	}
	err = <-done
	if cerr := db.Close(); cerr != nil && err == nil {
		err = cerr
	}
	return err
}

// crashSource is the crash loop's i-th ConfigMap at generation gen.
func crashSource(ns string, i, gen int) *corev1.ConfigMap {
	cm := source(ns, i, gen)
	if i%15 == 0 {
		cm.Data["requeue"] = "2s"
	}
	if i%13 == 0 {
		cm.Data["fail"] = "1"
	}
	return cm
}

// crashLog is what the crash loop's operators recorded.
type crashLog struct {
	recs  map[string]map[string]bool // key -> resourceVersions reconciled
	gone  map[string]int             // key -> last process that saw it gone
	procs map[string]map[int]bool    // key -> processes that reconciled it
	count []int                      // records per process
}

// readCrashLogs reads the logs of processes 0..n-1.
func readCrashLogs(t *testing.T, dir string, n int) crashLog {
	t.Helper()
	l := crashLog{recs: map[string]map[string]bool{}, gone: map[string]int{}, procs: map[string]map[int]bool{}, count: make([]int, n)}
	for p := range n {
		f, err := os.Open(filepath.Join(dir, fmt.Sprintf("reconciles-%d.log", p)))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			// A kill may cut the last line: only whole records count.
			switch {
			case len(fields) == 3 && fields[0] == "rec":
				if l.recs[fields[1]] == nil {
					l.recs[fields[1]] = map[string]bool{}
				}
				l.recs[fields[1]][fields[2]] = true
			case len(fields) == 2 && fields[0] == "gone":
				l.gone[fields[1]] = p
			default:
				continue
			}
			if l.procs[fields[1]] == nil {
				l.procs[fields[1]] = map[int]bool{}
			}
			l.procs[fields[1]][p] = true
			l.count[p]++
		}
		_ = f.Close()
	}
	return l
}

// TestDurableQueueCrashLoop (BOLTCR_CRASH_ROUNDS rounds, default 10;
// BOLTCR_CRASH_SEED): an operator with a durable queue (each run synced
// when fresh or, at random, at the disk load) over 150
// ConfigMaps (every 15th asks for RequeueAfter 2 s, every 13th fails
// once per change) is killed with SIGKILL at a random point of each run
// (before its caches sync, among its reconciles, while it writes its
// checkpoint), with changes made just before the kill and while it is
// down (updates, creates, deletes). A last run, not killed, must then
// have: every live ConfigMap reconciled at its current resourceVersion
// (by some run: at least once, never a needed reconcile skipped), every
// deleted one reconciled as gone after its delete, and every one with
// RequeueAfter reconciled in the last run (its deadline kept in the
// file).
func TestDurableQueueCrashLoop(t *testing.T) {
	rounds := 10
	if s := os.Getenv("BOLTCR_CRASH_ROUNDS"); s != "" {
		var err error
		if rounds, err = strconv.Atoi(s); err != nil || rounds < 1 {
			t.Fatalf("BOLTCR_CRASH_ROUNDS=%q", s)
		}
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("BOLTCR_CRASH_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("BOLTCR_CRASH_SEED=%q", s)
		}
	}
	t.Logf("BOLTCR_CRASH_SEED=%d, %d rounds", seed, rounds)
	rng := rand.New(rand.NewPCG(seed, 24))
	const sources = 150
	cs := clientset(t)
	ns := newNamespace(t, cs, "crash")
	ctx := context.Background()
	gen := map[int]int{} // live sources and their generation
	err := parallel(ctx, sources, 16, func(ctx context.Context, i int) error {
		_, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, crashSource(ns, i, 0), metav1.CreateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range sources {
		gen[i] = 0
	}
	next := sources
	deletedIn := map[string]int{} // key -> the process after whose kill it was deleted
	p := newProxy(t)
	dir := t.TempDir()
	kc := p.kubeconfig(t, dir)
	dbPath := filepath.Join(dir, "cache.db")
	start := func(proc int) (*exec.Cmd, chan struct{}) {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"=durable", "DURABLE_KUBECONFIG="+kc, "DURABLE_NS="+ns,
			"DURABLE_CACHE="+dbPath, "DURABLE_LOG="+filepath.Join(dir, fmt.Sprintf("reconciles-%d.log", proc)))
		if rng.IntN(2) == 0 {
			// Synced at the disk load: the changes while down come
			// as live events.
			cmd.Env = append(cmd.Env, "DURABLE_DISKLOAD=1")
		}
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		return cmd, exited
	}
	live := func() []int {
		out := make([]int, 0, len(gen))
		for i := range gen {
			out = append(out, i)
		}
		slices.Sort(out)
		return out
	}
	update := func(i int) {
		gen[i]++
		if _, err := cs.CoreV1().ConfigMaps(ns).Update(ctx, crashSource(ns, i, gen[i]), metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for proc := range rounds {
		cmd, exited := start(proc)
		time.Sleep(time.Duration(rng.Int64N(int64(3 * time.Second))))
		for range rng.IntN(4) { // changes while it runs, just before the kill
			l := live()
			update(l[rng.IntN(len(l))])
		}
		_ = cmd.Process.Kill()
		select {
		case <-exited:
		case <-time.After(waitTimeout):
			t.Fatal("the killed operator did not exit")
		}
		if proc%4 == 3 {
			continue // a restart with nothing changed while down
		}
		// Changes while it is down.
		for range 1 + rng.IntN(8) {
			l := live()
			update(l[rng.IntN(len(l))])
		}
		for range rng.IntN(3) {
			l := live()
			i := l[rng.IntN(len(l))]
			if err := cs.CoreV1().ConfigMaps(ns).Delete(ctx, source(ns, i, 0).Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			delete(gen, i)
			deletedIn[ns+"/"+source(ns, i, 0).Name] = proc
		}
		for range rng.IntN(3) {
			if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, crashSource(ns, next, 0), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			gen[next] = 0
			next++
		}
	}

	// The last run, not killed.
	last := rounds
	cmd, exited := start(last)
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(waitTimeout):
			_ = cmd.Process.Kill()
			t.Error("the last operator did not stop")
		}
	}()
	var missing []string
	var l crashLog
	if !eventually(waitTimeout, func() bool {
		l = readCrashLogs(t, dir, last+1)
		list, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		missing = missing[:0]
		for _, cm := range list.Items {
			key := ns + "/" + cm.Name
			// The marker written, and that state reconciled: nothing
			// left to do for it.
			if cm.Annotations[seenAnnotation] != cm.Data["gen"] || !l.recs[key][cm.ResourceVersion] {
				missing = append(missing, fmt.Sprintf("%s@%s (not reconciled at its current state)", key, cm.ResourceVersion))
			}
			if cm.Data["requeue"] != "" && !l.procs[key][last] {
				missing = append(missing, key+" (RequeueAfter not reconciled in the last run)")
			}
		}
		for key, proc := range deletedIn {
			if g, ok := l.gone[key]; !ok || g <= proc {
				missing = append(missing, key+" (deleted while down, never reconciled as gone after)")
			}
		}
		return len(missing) == 0
	}) {
		t.Fatalf("after %d kills, %d needed reconciles never happened: %v", rounds, len(missing), missing[:min(len(missing), 10)])
	}
	t.Logf("records per run (run %d not killed): %v; %d live objects, %d deleted while down", last, l.count, len(gen), len(deletedIn))
}
