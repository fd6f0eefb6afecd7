package localapi

// Issue 23 item 6: clients of the local API must never see a
// resourceVersion that a restart of the agent takes back. The agent is
// SIGKILLed during a write burst, at the instant a client receives an
// event; the file is then read offline and must hold at least what every
// client saw; the agent restarts online and offline, and no client sees a
// resourceVersion go back.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/boltinformer/boltinformer/store"
)

// notimeRoundsEnv sets the rounds of TestRegressionNoTimeTravelAfterKill
// (default 3; `BOLTINFORMER_HEAVY=1 make test` sets 8): even rounds
// restart the agent online, odd ones offline first. A round can take a
// minute: client-go's informer backs off (up to 30s, with jitter) after
// each kill, and its backoff resets only after two minutes without one.
const notimeRoundsEnv = "BOLTINFORMER_NOTIME_ROUNDS"

// The agent's Pod informer, as the factory names it.
const podsInformer = "v1/pods"

// seen is what a client last saw of one key.
type seen struct {
	rv      string
	deleted bool
}

// rvModel records what one client of the local API was sent: per key the
// highest resourceVersion and whether it saw the key deleted, the highest
// resourceVersion of all, and every event that went back.
type rvModel struct {
	who string

	mu         sync.Mutex
	keys       map[string]seen
	maxRV      string
	events     int // object events received
	watches    int // watches the server accepted (stream clients)
	updates    int // UPDATEs (informer) whose resourceVersion changed
	violations []string
}

func newModel(who string) *rvModel { return &rvModel{who: who, keys: map[string]seen{}} }

// cmpLocked compares two resourceVersions ("" is before any); a malformed
// one is a violation, and compares equal.
func (m *rvModel) cmpLocked(a, b string) int {
	if a == b {
		return 0
	}
	if a == "" {
		return -1
	}
	if b == "" {
		return 1
	}
	c, err := resourceversion.CompareResourceVersion(a, b)
	if err != nil {
		m.violateLocked("resourceVersions %q and %q do not compare: %v", a, b, err)
		return 0
	}
	return c
}

func (m *rvModel) violateLocked(format string, args ...any) {
	m.violations = append(m.violations, fmt.Sprintf(m.who+": "+format, args...))
}

// sawLocked records that the client was sent key at rv (deleted: the
// object's delete). A resourceVersion before the key's last, or a key
// back after its delete, is a violation.
func (m *rvModel) sawLocked(what, key, rv string, deleted bool) {
	if prev, ok := m.keys[key]; ok {
		switch c := m.cmpLocked(rv, prev.rv); {
		case c < 0:
			m.violateLocked("%s %s at %s after %s: back in time", what, key, rv, prev.rv)
		case prev.deleted && !deleted:
			m.violateLocked("%s %s at %s after its delete at %s: the delete was taken back", what, key, rv, prev.rv)
		}
		if m.cmpLocked(rv, prev.rv) < 0 {
			rv = prev.rv // keep the highest
		}
	}
	m.keys[key] = seen{rv: rv, deleted: deleted}
	if m.cmpLocked(rv, m.maxRV) > 0 {
		m.maxRV = rv
	}
}

// sawRVLocked records a resourceVersion of a stream (a list, a bookmark):
// before the highest seen is a violation.
func (m *rvModel) sawRVLocked(what, rv string) {
	if m.cmpLocked(rv, m.maxRV) < 0 {
		m.violateLocked("%s at %s after %s was seen: back in time", what, rv, m.maxRV)
		return
	}
	m.maxRV = rv
}

// list records a list of the stream clients (key -> resourceVersion).
func (m *rvModel) list(rv string, items map[string]string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sawRVLocked("LIST", rv)
	for k, s := range m.keys {
		if _, ok := items[k]; !ok && !s.deleted {
			m.keys[k] = seen{rv: s.rv, deleted: true} // gone from the list
		}
	}
	for k, r := range items {
		m.sawLocked("LIST", k, r, false)
	}
	m.maxRV = rv // a list is at its own resourceVersion
}

// event records a watch event of the stream clients; it returns the
// object events received so far.
func (m *rvModel) event(typ, key, rv string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmpLocked(rv, m.maxRV) < 0 {
		m.violateLocked("%s %s at %s after %s was seen: back in time", typ, key, rv, m.maxRV)
	}
	m.sawLocked(typ, key, rv, typ == string(watch.Deleted))
	m.events++
	return m.events
}

// watched records that the server accepted a watch.
func (m *rvModel) watched() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.watches++
}

func (m *rvModel) bookmark(rv string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sawRVLocked("BOOKMARK", rv)
}

func (m *rvModel) violate(format string, args ...any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.violateLocked(format, args...)
}

// last is the resourceVersion a stream client resumes from.
func (m *rvModel) last() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.maxRV
}

// live returns the keys the client holds (key -> resourceVersion).
func (m *rvModel) live() map[string]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]string{}
	for k, s := range m.keys {
		if !s.deleted {
			out[k] = s.rv
		}
	}
	return out
}

type modelSnapshot struct {
	keys    map[string]seen
	maxRV   string
	events  int
	watches int
}

func (m *rvModel) snapshot() modelSnapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	return modelSnapshot{keys: maps.Clone(m.keys), maxRV: m.maxRV, events: m.events, watches: m.watches}
}

// takeViolations returns the violations recorded since the last call.
func (m *rvModel) takeViolations() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := m.violations
	m.violations = nil
	return v
}

// informerClient runs client-go's Pod informer of ns on the local API,
// recording in a model every event its handler gets: an UPDATE whose new
// resourceVersion is before its old one, or any event before what the key
// had, is a violation.
func informerClient(t *testing.T, cs kubernetes.Interface, ns string) (cache.SharedIndexInformer, *rvModel) {
	t.Helper()
	m := newModel("client-go informer")
	key := func(obj any) (string, string) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		a, err := meta.Accessor(obj)
		if err != nil {
			return "", ""
		}
		return a.GetNamespace() + "/" + a.GetName(), a.GetResourceVersion()
	}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	inf := f.Core().V1().Pods().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, _ bool) {
			k, rv := key(obj)
			m.mu.Lock()
			defer m.mu.Unlock()
			m.events++
			m.sawLocked("ADD", k, rv, false)
		},
		UpdateFunc: func(old, obj any) {
			_, orv := key(old)
			k, rv := key(obj)
			m.mu.Lock()
			defer m.mu.Unlock()
			m.events++
			if orv != rv {
				m.updates++
			}
			if m.cmpLocked(rv, orv) < 0 {
				m.violateLocked("UPDATE %s rv=%s -> %s: back in time", k, orv, rv)
				return // the key keeps its highest
			}
			m.sawLocked("UPDATE", k, rv, false)
		},
		DeleteFunc: func(obj any) {
			k, rv := key(obj)
			m.mu.Lock()
			defer m.mu.Unlock()
			m.events++
			m.sawLocked("DELETE", k, rv, true)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.Start(ctx.Done())
	t.Cleanup(func() { cancel(); f.Shutdown() })
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("informer did not sync")
	}
	return inf, m
}

// informerState is the informer's Pods (key -> resourceVersion).
func informerState(inf cache.SharedIndexInformer) map[string]string {
	out := map[string]string{}
	for _, o := range inf.GetStore().List() {
		p := o.(*corev1.Pod)
		out[p.Namespace+"/"+p.Name] = p.ResourceVersion
	}
	return out
}

// watchClient lists and watches ns's Pods on the local API the plain way:
// a list, a watch from its resourceVersion with bookmarks, a re-watch from
// the last resourceVersion seen when the stream ends, a relist on 410. "Too
// large resource version" (the local API behind the client) is a
// violation. onEvent is called with the count of object events received,
// after each is recorded. It runs until ctx ends.
func watchClient(ctx context.Context, cs kubernetes.Interface, ns string, m *rvModel, onEvent func(int)) {
	pause := func() {
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	tooLarge := func(err error) bool { return strings.Contains(err.Error(), "Too large resource version") }
	relist := true
	for ctx.Err() == nil {
		if relist {
			l, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				pause()
				continue
			}
			items := map[string]string{}
			for _, p := range l.Items {
				items[p.Namespace+"/"+p.Name] = p.ResourceVersion
			}
			m.list(l.ResourceVersion, items)
			relist = false
		}
		w, err := cs.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: m.last(), AllowWatchBookmarks: true})
		if err != nil {
			switch {
			case apierrors.IsResourceExpired(err) || apierrors.IsGone(err):
				relist = true
			case tooLarge(err):
				m.violate("watch from %s: %v: the local API is behind what it sent", m.last(), err)
			}
			pause()
			continue
		}
		m.watched()
		for e := range w.ResultChan() {
			switch e.Type {
			case watch.Error:
				err := apierrors.FromObject(e.Object)
				if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
					relist = true
				} else if tooLarge(err) {
					m.violate("watch from %s: %v: the local API is behind what it sent", m.last(), err)
				}
			case watch.Bookmark:
				if a, err := meta.Accessor(e.Object); err == nil {
					m.bookmark(a.GetResourceVersion())
				}
			case watch.Added, watch.Modified, watch.Deleted:
				if a, err := meta.Accessor(e.Object); err == nil {
					n := m.event(string(e.Type), a.GetNamespace()+"/"+a.GetName(), a.GetResourceVersion())
					onEvent(n)
				}
			}
		}
		w.Stop()
	}
}

// pythonWatch is the script of the Python client (Debian's
// python3-kubernetes): a list, then watches from the last resourceVersion
// it saw, a relist on 410, every answer as a JSON line.
const pythonWatch = `
import json, sys, time
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException
config.load_kube_config(config_file=sys.argv[1])
v1 = client.CoreV1Api()
ns = sys.argv[2]
def out(**kw):
    print(json.dumps(kw), flush=True)
rv = None
while True:
    try:
        if rv is None:
            pods = v1.list_namespaced_pod(ns)
            rv = pods.metadata.resource_version
            out(t="LIST", rv=rv, items={p.metadata.name: p.metadata.resource_version for p in pods.items})
        for ev in watch.Watch().stream(v1.list_namespaced_pod, ns, resource_version=rv, allow_watch_bookmarks=True, timeout_seconds=60):
            md = ev["raw_object"]["metadata"]
            rv = md["resourceVersion"]
            out(t=ev["type"], name=md.get("name", ""), rv=rv)
    except ApiException as e:
        out(t="ERR", code=e.status, msg=str(e.reason))
        if e.status == 410:
            rv = None
        time.sleep(0.1)
    except Exception as e:
        out(t="ERR", code=0, msg=type(e).__name__)
        time.sleep(0.1)
`

// startPythonWatch runs pythonWatch on the local API's kubeconfig until the
// test ends, feeding m; nil when python3-kubernetes is not importable.
func startPythonWatch(t *testing.T, dir, kubeconfig, ns string) *rvModel {
	t.Helper()
	if exec.Command(python(), "-c", "import kubernetes").Run() != nil {
		t.Logf("WARNING: python3-kubernetes is not importable: no Python client in this run (apt-get install python3-kubernetes)")
		return nil
	}
	script := filepath.Join(dir, "watch.py")
	if err := os.WriteFile(script, []byte(pythonWatch), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python(), script, kubeconfig, ns)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	m := newModel("python client")
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			var l struct {
				T, Name, Rv, Msg string
				Code             int
				Items            map[string]string
			}
			if json.Unmarshal(sc.Bytes(), &l) != nil {
				continue
			}
			switch l.T {
			case "LIST":
				items := map[string]string{}
				for name, rv := range l.Items {
					items[ns+"/"+name] = rv
				}
				m.list(l.Rv, items)
			case "BOOKMARK":
				m.bookmark(l.Rv)
			case "ADDED", "MODIFIED", "DELETED":
				m.event(l.T, ns+"/"+l.Name, l.Rv)
			case "ERR":
				if strings.Contains(l.Msg, "Too large resource version") || l.Code == 504 {
					m.violate("%d %s: the local API is behind what it sent", l.Code, l.Msg)
				}
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // our own child, by its pid
		_ = cmd.Wait()
		<-done
	})
	return m
}

// fileState reads the agent's cache file offline (read-only, as cmd/inspect
// does): the Pod informer's saved resourceVersion and ns's Pods (key ->
// resourceVersion).
func fileState(t *testing.T, path, ns string) (string, map[string]string) {
	t.Helper()
	db, err := store.Open(path, &store.Options{ReadOnly: true, Timeout: time.Minute})
	if err != nil {
		t.Fatalf("open the cache file offline: %v", err)
	}
	defer db.Close()
	var rv string
	objs := map[string]string{}
	err = db.View(func(tx *store.Tx) error {
		if !slices.Contains(tx.Informers(), podsInformer) {
			return fmt.Errorf("no informer %q in the file (it has %v)", podsInformer, tx.Informers())
		}
		st, err := tx.State(podsInformer)
		if err != nil {
			return err
		}
		if st != nil {
			rv = st.ResourceVersion
		}
		return tx.ForEachRaw(podsInformer, func(key string, raw []byte) error {
			if !strings.HasPrefix(key, ns+"/") {
				return nil
			}
			r, err := store.DecodeRecord(key, raw)
			if err != nil {
				return err
			}
			objs[key] = r.ResourceVersion
			return nil
		})
	})
	if err != nil {
		t.Fatalf("read the cache file offline: %v", err)
	}
	return rv, objs
}

// checkFile checks that the file holds at least what every client saw:
// each resourceVersion at or before the file's, each key the client holds
// at or after the client's version (or deleted since on the server too),
// each delete the client saw not undone. It returns how many of the
// clients' keys the file holds at a later version than they saw.
func checkFile(t *testing.T, fileRV string, objs map[string]string, server map[string]bool, models ...*rvModel) (ahead int) {
	t.Helper()
	cmp := func(a, b string) int {
		c, err := resourceversion.CompareResourceVersion(a, b)
		if err != nil {
			t.Errorf("resourceVersions %q and %q do not compare: %v", a, b, err)
		}
		return c
	}
	for _, m := range models {
		s := m.snapshot()
		var bad []string
		if s.maxRV != "" && (fileRV == "" || cmp(s.maxRV, fileRV) > 0) {
			bad = append(bad, fmt.Sprintf("it saw resourceVersion %s, the file is at %q", s.maxRV, fileRV))
		}
		for _, k := range slices.Sorted(maps.Keys(s.keys)) {
			sk := s.keys[k]
			frv, inFile := objs[k]
			switch {
			case sk.deleted && inFile:
				bad = append(bad, fmt.Sprintf("it saw %s deleted (at %s); the file has it at %s", k, sk.rv, frv))
			case !sk.deleted && !inFile && server[k]:
				bad = append(bad, fmt.Sprintf("it saw %s at %s; the file does not have it (the server does)", k, sk.rv))
			case !sk.deleted && inFile && cmp(frv, sk.rv) < 0:
				bad = append(bad, fmt.Sprintf("it saw %s at %s; the file has it at %s", k, sk.rv, frv))
			case !sk.deleted && inFile && cmp(frv, sk.rv) > 0:
				ahead++
			}
		}
		if len(bad) > 0 {
			t.Errorf("%s saw what the file does not hold (a restart takes it back), %d findings:\n  %s",
				m.who, len(bad), strings.Join(bad[:min(len(bad), 10)], "\n  "))
		}
	}
	return ahead
}

// serverPods is ns's Pods on kube-apiserver (key -> resourceVersion).
func serverPods(t *testing.T, cs kubernetes.Interface, ns string) map[string]string {
	t.Helper()
	l, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range l.Items {
		out[p.Namespace+"/"+p.Name] = p.ResourceVersion
	}
	return out
}

// converge waits (bounded) until the informer and every model hold want,
// then fails on any violation recorded.
func converge(t *testing.T, what string, want map[string]string, inf cache.SharedIndexInformer, models ...*rvModel) {
	t.Helper()
	begin := time.Now()
	deadline := begin.Add(3 * time.Minute)
	lastDiff := ""
	for {
		diff := ""
		if got := informerState(inf); !maps.Equal(got, want) {
			diff = fmt.Sprintf("the informer holds %d pods, want %d", len(got), len(want))
		}
		for _, m := range models {
			if got := m.live(); !maps.Equal(got, want) {
				diff = fmt.Sprintf("%s holds %d pods, want %d", m.who, len(got), len(want))
			}
		}
		if diff == "" {
			break
		}
		lastDiff = diff
		if time.Now().After(deadline) {
			checkViolations(t, what, models...)
			t.Fatalf("%s: the clients did not converge: %s", what, diff)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if d := time.Since(begin); d > 5*time.Second {
		t.Logf("%s: converged in %s; last to: %s", what, d.Round(time.Millisecond), lastDiff)
	}
	checkViolations(t, what, models...)
}

func checkViolations(t *testing.T, what string, models ...*rvModel) {
	t.Helper()
	for _, m := range models {
		v := m.takeViolations()
		if len(v) > 0 {
			t.Errorf("%s: %s went back in time, %d events:\n  %s", what, m.who, len(v), strings.Join(v[:min(len(v), 10)], "\n  "))
		}
	}
}

// offlineKubeconfig writes a kubeconfig like the cluster's, to a closed
// port on 127.0.0.1: an agent started with it cannot reach its server.
func offlineKubeconfig(t *testing.T, dir string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(cluster.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		c.Server = strings.Replace(unreachableURL(t), "http://", "https://", 1)
	}
	path := filepath.Join(dir, "offline.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// unreachableURL is the URL of a local port nobody listens on.
func unreachableURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return "http://" + addr
}

// burst writes n changes to ns's Pods on kube-apiserver with a few
// workers: creates (names never used before), label patches and deletes of
// Pods of live (which it keeps up to date). A patch or delete of a Pod
// another worker deleted meanwhile is skipped.
func burst(t *testing.T, cs kubernetes.Interface, ns string, round, n int, live *liveSet) {
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				var err error
				switch i % 5 {
				case 0, 1:
					p := testPod(i)
					p.Name = fmt.Sprintf("r%02d-%05d", round, i)
					if _, err = cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err == nil {
						live.add(p.Name)
					}
				case 2, 3:
					name := live.pick(false)
					_, err = cs.CoreV1().Pods(ns).Patch(ctx, name, types.MergePatchType, []byte(fmt.Sprintf(`{"metadata":{"labels":{"gen":"%d-%d"}}}`, round, i)), metav1.PatchOptions{})
				case 4:
					name := live.pick(true)
					err = cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
				}
				if err != nil && !apierrors.IsNotFound(err) {
					t.Errorf("burst round %d, change %d: %v", round, i, err)
				}
			}
		})
	}
	wg.Wait()
}

// liveSet is the names of the Pods the burst may change.
type liveSet struct {
	mu    sync.Mutex
	names []string
	rnd   *rand.Rand
}

func (l *liveSet) add(name string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.names = append(l.names, name)
}

// pick returns a random name (removed from the set when remove: it is
// about to be deleted).
func (l *liveSet) pick(remove bool) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := l.rnd.IntN(len(l.names))
	name := l.names[i]
	if remove {
		l.names = slices.Delete(l.names, i, i+1)
	}
	return name
}

// TestRegressionNoTimeTravelAfterKill (issue 23 item 6): three clients
// watch the agent's local API (client-go's informer, a plain list and
// watch, Python's client when installed) while a write burst goes to
// kube-apiserver, and the agent is SIGKILLed at the instant the plain
// watch receives an event (a different event each round). Then:
//   - the cache file, read offline, holds at least what every client saw:
//     every resourceVersion at or before the file's saved one, each key at
//     or after the client's version, each delete the client saw;
//   - the agent restarts on the same address, online (even rounds) or
//     first offline (odd rounds: its server is a closed port, it serves
//     the file; then SIGKILLed and restarted online): the clients
//     reconnect, converge to the file's content (offline) and to
//     kube-apiserver's (online), and no event they get goes back in
//     resourceVersion for its key (the plain and Python watches: for the
//     stream), no delete is taken back, no watch gets "Too large resource
//     version".
//
// Before the fix the local API sent events the group commit had not
// written (up to 100ms of them), so the kill left the file behind what the
// clients had seen.
func TestRegressionNoTimeTravelAfterKill(t *testing.T) {
	rounds := 3
	if s := os.Getenv(notimeRoundsEnv); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive number", notimeRoundsEnv, s)
		}
		rounds = n
	}
	const seeded, changes = 300, 300
	cs, err := cluster.Clientset()
	if err != nil {
		t.Fatal(err)
	}
	ns := seed(t, cs, "notime", seeded)
	live := &liveSet{rnd: rand.New(rand.NewPCG(23, 6))}
	for i := range seeded {
		live.add(fmt.Sprintf("pod-%05d", i))
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "cache.db")
	offline := offlineKubeconfig(t, dir)
	a := startAgent(t, dir, "", 0)
	addr := a.addr
	waitFor(t, "the agent to have the pods", func() bool { return countPods(t, a, ns) == seeded })

	inf, infM := informerClient(t, agentClient(t, a), ns)
	watchM := newModel("plain watch")
	var trigger atomic.Pointer[func(int)]
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	watchCS := agentClient(t, a)
	wg.Go(func() {
		watchClient(ctx, watchCS, ns, watchM, func(n int) {
			if f := trigger.Load(); f != nil {
				(*f)(n)
			}
		})
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
	models := []*rvModel{infM, watchM}
	if py := startPythonWatch(t, dir, a.kubeconfig, ns); py != nil {
		models = append(models, py)
	}
	converge(t, "start", serverPods(t, cs, ns), inf, models...)

	for round := range rounds {
		start := time.Now()
		offlineRound := round%2 == 1
		// The kill: when the plain watch has received killAt events of this
		// round's burst, at that instant, from its own goroutine.
		base := watchM.snapshot().events
		killAt := base + max(1, changes*(2*round+1)/(2*rounds)%changes)
		killed := make(chan struct{})
		pid := a.pid()
		var once sync.Once
		kill := func(n int) {
			if n >= killAt {
				once.Do(func() {
					_ = syscall.Kill(pid, syscall.SIGKILL) // our own child, by its pid
					close(killed)
				})
			}
		}
		trigger.Store(&kill)
		burstDone := make(chan struct{})
		go func() { defer close(burstDone); burst(t, cs, ns, round, changes, live) }()
		select {
		case <-killed:
		case <-burstDone:
			// The watch lags the burst, and a patch that found its Pod
			// deleted makes no event: kill after the burst if the watch
			// gets no further.
			select {
			case <-killed:
			case <-time.After(time.Minute):
				t.Logf("round %d: the plain watch did not receive %d events of the burst: killed after it", round, killAt-base)
				kill(killAt)
			}
		}
		trigger.Store(nil)
		a.kill()

		// Offline, before any restart: the file holds what the clients saw
		// (once they have taken in what the agent sent before it died).
		settle(models)
		fileRV, objs := fileState(t, path, ns)
		<-burstDone // the server's state for the check of keys deleted since
		onServer := map[string]bool{}
		for k := range serverPods(t, cs, ns) {
			onServer[k] = true
		}
		ahead := checkFile(t, fileRV, objs, onServer, models...)
		s := watchM.snapshot()
		t.Logf("round %d: killed at the plain watch's event %d of the burst (its highest rv %s); file at rv %s with %d pods; clients' highest rv: %s; keys the file holds later than a client saw: %d",
			round, killAt-base, s.maxRV, fileRV, len(objs), maxSeen(models), ahead)
		checkViolations(t, fmt.Sprintf("round %d, before the restart", round), models...)

		t.Logf("round %d: killed and checked: %s", round, time.Since(start).Round(time.Millisecond))
		// The agent is down: a watch accepted from now on is the restarted
		// agent's.
		restart := func(kubeconfig, what string) *agentProc {
			t.Helper()
			w0 := watchM.snapshot().watches
			p := startAgentOn(t, dir, addr, 0, kubeconfig)
			waitFor(t, "the plain watch to watch the "+what+" agent", func() bool { return watchM.snapshot().watches > w0 })
			return p
		}
		if offlineRound {
			a = restart(offline, "offline")
			t.Logf("round %d: offline agent serves: %s", round, time.Since(start).Round(time.Millisecond))
			converge(t, fmt.Sprintf("round %d, offline restart (the file's content)", round), objs, inf, models...)
			a.kill()
			if rv, again := fileState(t, path, ns); rv != fileRV || !maps.Equal(again, objs) {
				t.Errorf("round %d: the offline agent changed the file: rv %s -> %s, %d -> %d pods", round, fileRV, rv, len(objs), len(again))
			}
		}
		a = restart(cluster.Kubeconfig(), "online")
		t.Logf("round %d: online agent serves: %s", round, time.Since(start).Round(time.Millisecond))
		converge(t, fmt.Sprintf("round %d, online restart (kube-apiserver's state)", round), serverPods(t, cs, ns), inf, models...)
		t.Logf("round %d: %s", round, time.Since(start).Round(time.Millisecond))
	}
	var sum []string
	for _, m := range models {
		s := m.snapshot()
		sum = append(sum, fmt.Sprintf("%s: %d object events, highest rv %s", m.who, s.events, s.maxRV))
	}
	infM.mu.Lock()
	sum = append(sum, fmt.Sprintf("informer UPDATEs with a new rv: %d", infM.updates))
	infM.mu.Unlock()
	if !t.Failed() {
		t.Logf("%d rounds of %d changes, SIGKILL mid-burst, restarts online and offline: no client saw a resourceVersion go back; %s", rounds, changes, strings.Join(sum, "; "))
	}
}

// settle waits until no model has taken in an event for 250ms (at most 5
// s): the events the agent sent before it was killed reach the clients'
// handlers after the kill.
func settle(models []*rvModel) {
	count := func() (n int) {
		for _, m := range models {
			n += m.snapshot().events
		}
		return n
	}
	last, still := count(), 0
	for range 100 {
		time.Sleep(50 * time.Millisecond)
		if n := count(); n != last {
			last, still = n, 0
			continue
		}
		if still++; still == 5 {
			return
		}
	}
}

// maxSeen is the highest resourceVersion any of the models saw.
func maxSeen(models []*rvModel) string {
	best := ""
	for _, m := range models {
		rv := m.snapshot().maxRV
		if best == "" {
			best = rv
			continue
		}
		if c, err := resourceversion.CompareResourceVersion(rv, best); err == nil && c > 0 {
			best = rv
		}
	}
	return best
}
