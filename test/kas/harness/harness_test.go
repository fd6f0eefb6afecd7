package harness_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/boltinformer/boltinformer/test/kas/harness"
)

const ns = metav1.NamespaceDefault

func startCluster(t *testing.T, opts *harness.Options) (*harness.Cluster, kubernetes.Interface) {
	t.Helper()
	c, err := harness.Start(t, opts)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := c.Clientset()
	if err != nil {
		t.Fatal(err)
	}
	return c, cs
}

func configMap(name string, data string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "smoke"}},
		Data:       map[string]string{"k": data},
	}
}

// nextEvent returns the next event of w, failing the test after timeout.
func nextEvent(t *testing.T, w watch.Interface, timeout time.Duration) watch.Event {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatal("watch closed")
		}
		return ev
	case <-timer.C:
		t.Fatalf("no watch event within %s", timeout)
		return watch.Event{}
	}
}

// TestSmoke runs one cluster through what the e2e tests rely on: version,
// paginated LIST, WATCH from a resourceVersion, WatchList, metrics, an
// apiserver restart, and 410 Expired after compaction.
func TestSmoke(t *testing.T) {
	ctx := t.Context()
	start := time.Now()
	c, cs := startCluster(t, &harness.Options{
		CompactionInterval: 5 * time.Second,
		WatchCacheSizes:    []string{"secrets#0"},
	})
	t.Logf("cluster ready in %s", time.Since(start).Round(time.Millisecond))
	if h := c.RESTConfig().Host; !strings.HasPrefix(h, "https://127.0.0.1:") {
		t.Fatalf("apiserver at %s, want 127.0.0.1", h)
	}
	if u := c.EtcdURL(); !strings.HasPrefix(u, "http://127.0.0.1:") {
		t.Fatalf("etcd at %s, want 127.0.0.1", u)
	}

	t.Run("version", func(t *testing.T) {
		v, err := cs.Discovery().ServerVersion()
		if err != nil {
			t.Fatal(err)
		}
		if v.GitVersion != "v1.37.2" {
			t.Fatalf("GitVersion %q, want v1.37.2", v.GitVersion)
		}
	})

	var listRV string
	t.Run("create and paginated list", func(t *testing.T) {
		for i := range 3 {
			if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, configMap(fmt.Sprintf("smoke-%d", i), "v0"), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		opts := metav1.ListOptions{LabelSelector: "app=smoke", Limit: 2}
		page1, err := cs.CoreV1().ConfigMaps(ns).List(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		if len(page1.Items) != 2 || page1.Continue == "" {
			t.Fatalf("page 1: %d items, continue %q; want 2 and a token", len(page1.Items), page1.Continue)
		}
		opts.Continue = page1.Continue
		page2, err := cs.CoreV1().ConfigMaps(ns).List(ctx, opts)
		if err != nil {
			t.Fatal(err)
		}
		if len(page2.Items) != 1 || page2.Continue != "" {
			t.Fatalf("page 2: %d items, continue %q; want 1 and none", len(page2.Items), page2.Continue)
		}
		listRV = page1.ResourceVersion
	})

	t.Run("watch from resourceVersion", func(t *testing.T) {
		if listRV == "" {
			t.Skip("no list")
		}
		w, err := cs.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{
			LabelSelector: "app=smoke", ResourceVersion: listRV, AllowWatchBookmarks: true,
		})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		cm, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "smoke-0", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm.Data["k"] = "v1"
		if _, err := cs.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
			ev := nextEvent(t, w, 30*time.Second)
			if ev.Type == watch.Bookmark {
				continue
			}
			got, ok := ev.Object.(*corev1.ConfigMap)
			if ev.Type != watch.Modified || !ok || got.Name != "smoke-0" || got.Data["k"] != "v1" {
				t.Fatalf("event %s %T, want MODIFIED smoke-0 k=v1", ev.Type, ev.Object)
			}
			return
		}
		t.Fatal("no MODIFIED event")
	})

	t.Run("watchlist", func(t *testing.T) {
		sendInitial := true
		w, err := cs.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{
			LabelSelector:        "app=smoke",
			SendInitialEvents:    &sendInitial,
			ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
			AllowWatchBookmarks:  true,
		})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		added := 0
		for range 10 {
			ev := nextEvent(t, w, 30*time.Second)
			switch ev.Type {
			case watch.Added:
				added++
			case watch.Bookmark:
				obj, err := metaAccessor(ev.Object)
				if err != nil {
					t.Fatal(err)
				}
				if obj.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
					if added != 3 {
						t.Fatalf("%d initial ADDED events, want 3", added)
					}
					return
				}
			default:
				t.Fatalf("unexpected %s event", ev.Type)
			}
		}
		t.Fatal("no initial-events-end bookmark")
	})

	t.Run("metrics and process stats", func(t *testing.T) {
		posts, err := c.RequestCount(ctx, "POST", "configmaps")
		if err != nil {
			t.Fatal(err)
		}
		lists, err := c.RequestCount(ctx, "list", "configmaps")
		if err != nil {
			t.Fatal(err)
		}
		if posts < 3 || lists < 2 {
			t.Fatalf("apiserver_request_total: POST configmaps %v (want >= 3), LIST %v (want >= 2)", posts, lists)
		}
		cpu, err := c.APIServerCPU()
		if err != nil {
			t.Fatal(err)
		}
		rss, err := c.APIServerRSS()
		if err != nil {
			t.Fatal(err)
		}
		if cpu <= 0 || rss < 50<<20 {
			t.Fatalf("apiserver CPU %s, RSS %d: implausible", cpu, rss)
		}
		t.Logf("apiserver: CPU %s, RSS %d MiB, POST configmaps %v, LIST configmaps %v", cpu, rss>>20, posts, lists)
	})

	t.Run("apiserver restart keeps data and address", func(t *testing.T) {
		before, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "smoke-0", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		host, pid := c.RESTConfig().Host, c.APIServerPID()
		t0 := time.Now()
		if err := c.StopAPIServer(); err != nil {
			t.Fatal(err)
		}
		t.Logf("apiserver stopped in %s", time.Since(t0).Round(time.Millisecond))
		if harness.ProcessAlive(pid) {
			t.Fatalf("apiserver pid %d still alive after StopAPIServer", pid)
		}
		short, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err = cs.CoreV1().ConfigMaps(ns).Get(short, "smoke-0", metav1.GetOptions{})
		cancel()
		if err == nil {
			t.Fatal("Get succeeded with the apiserver stopped")
		}
		t0 = time.Now()
		if err := c.StartAPIServer(); err != nil {
			t.Fatal(err)
		}
		t.Logf("apiserver restarted in %s", time.Since(t0).Round(time.Millisecond))
		if got := c.RESTConfig().Host; got != host {
			t.Fatalf("apiserver moved from %s to %s", host, got)
		}
		// The old clientset must work: same address, token and CA.
		after, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "smoke-0", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if after.ResourceVersion != before.ResourceVersion || after.Data["k"] != before.Data["k"] {
			t.Fatalf("after restart: rv %s k=%s, want rv %s k=%s",
				after.ResourceVersion, after.Data["k"], before.ResourceVersion, before.Data["k"])
		}
	})

	t.Run("410 expired after compaction", func(t *testing.T) {
		s, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "expire"},
			StringData: map[string]string{"n": "0"},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		oldRV := s.ResourceVersion
		for i := 1; i <= 3; i++ {
			s.StringData = map[string]string{"n": fmt.Sprint(i)}
			if s, err = cs.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		t0 := time.Now()
		for attempt := 0; time.Since(t0) < 60*time.Second; attempt++ {
			if expired(t, ctx, cs, oldRV) {
				t.Logf("410 after %s (%d attempts)", time.Since(t0).Round(time.Millisecond), attempt+1)
				return
			}
			select {
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			case <-time.After(time.Second):
			}
		}
		t.Fatalf("no 410 for secrets at rv %s within 60s", oldRV)
	})
}

// expired watches secrets from rv and reports whether the server answered
// 410 Expired (an error, or an ERROR event); false means it replayed history.
func expired(t *testing.T, ctx context.Context, cs kubernetes.Interface, rv string) bool {
	t.Helper()
	w, err := cs.CoreV1().Secrets(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
	if err != nil {
		if apierrors.IsResourceExpired(err) {
			return true
		}
		t.Fatal(err)
	}
	defer w.Stop()
	ev := nextEvent(t, w, 20*time.Second)
	if ev.Type != watch.Error {
		return false
	}
	err = apierrors.FromObject(ev.Object)
	if !apierrors.IsResourceExpired(err) {
		t.Fatalf("watch error %v, want 410 Expired", err)
	}
	return true
}

// TestClusterRestart stops the whole cluster and starts it again on the same
// directory: objects, resourceVersions, credentials and address survive.
func TestClusterRestart(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	c1, cs1 := startCluster(t, &harness.Options{Dir: dir})
	cm, err := cs1.CoreV1().ConfigMaps(ns).Create(ctx, configMap("survivor", "v0"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	host := c1.RESTConfig().Host

	// A crashed apiserver comes back on the same etcd.
	killed := c1.APIServerPID()
	if err := c1.KillAPIServer(); err != nil {
		t.Fatal(err)
	}
	if harness.ProcessAlive(killed) || c1.APIServerPID() != 0 {
		t.Fatalf("apiserver %d alive after KillAPIServer", killed)
	}
	if _, err := c1.RequestCount(ctx, "GET", "configmaps"); err != harness.ErrAPIServerDown {
		t.Fatalf("RequestCount with the apiserver down: %v, want ErrAPIServerDown", err)
	}
	if err := c1.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	if err := c1.StartAPIServer(); err == nil {
		t.Fatal("StartAPIServer succeeded with the apiserver running")
	}
	if got, err := cs1.CoreV1().ConfigMaps(ns).Get(ctx, "survivor", metav1.GetOptions{}); err != nil || got.ResourceVersion != cm.ResourceVersion {
		t.Fatalf("after a crash: %v, %v", got, err)
	}

	etcdPID, apiPID := c1.EtcdPID(), c1.APIServerPID()
	if err := c1.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := c1.StartAPIServer(); err != harness.ErrStopped {
		t.Fatalf("StartAPIServer after Stop: %v, want ErrStopped", err)
	}
	if harness.ProcessAlive(etcdPID) || harness.ProcessAlive(apiPID) {
		t.Fatalf("etcd %d or apiserver %d alive after Stop", etcdPID, apiPID)
	}

	c2, _ := startCluster(t, &harness.Options{Dir: dir})
	if got := c2.RESTConfig().Host; got != host {
		t.Logf("address changed from %s to %s (port was taken)", host, got)
	}
	// A client made from the first cluster's kubeconfig (token, CA) works.
	cfg := c2.RESTConfig()
	cfg.BearerToken = c1.RESTConfig().BearerToken
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	got, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "survivor", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.ResourceVersion != cm.ResourceVersion {
		t.Fatalf("rv %s after cluster restart, want %s", got.ResourceVersion, cm.ResourceVersion)
	}
}

// TestStartWithoutTB is the TestMain use: no testing.TB, so the caller stops
// the cluster, and the temporary directory goes with it.
func TestStartWithoutTB(t *testing.T) {
	c, err := harness.Start(nil, &harness.Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	dir := c.Dir()
	stopped := false
	defer func() {
		if !stopped {
			_ = c.Stop()
		}
	}()
	cs, err := c.Clientset()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Get(t.Context(), "default", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	stopped = true
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("%s left after Stop: %v", dir, err)
	}
}
