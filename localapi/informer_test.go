package localapi_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientfeatures "k8s.io/client-go/features"
	clientfeaturestesting "k8s.io/client-go/features/testing"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer/localapi"
)

// journal records a handler's changes as "ADD key@rv", "UPDATE key@rv",
// "DELETE key@rv" (updates that keep the resourceVersion, resyncs, left
// out), and the adds of each initial list apart.
type journal struct {
	mu      sync.Mutex
	events  []string
	initial int
}

func (j *journal) add(s string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.events = append(j.events, s)
}

func rvOfAny(obj any) (string, string) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return "?", "?"
	}
	return m.GetNamespace() + "/" + m.GetName(), m.GetResourceVersion()
}

func (j *journal) handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			if initial {
				j.mu.Lock()
				j.initial++
				j.mu.Unlock()
				return
			}
			k, rv := rvOfAny(obj)
			j.add("ADD " + k + "@" + rv)
		},
		UpdateFunc: func(old, obj any) {
			k, rv := rvOfAny(obj)
			if _, orv := rvOfAny(old); orv == rv {
				return
			}
			j.add("UPDATE " + k + "@" + rv)
		},
		DeleteFunc: func(obj any) {
			k, _ := rvOfAny(obj)
			j.add("DELETE " + k)
		},
	}
}

func (j *journal) initialAdds() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.initial
}

func (j *journal) snapshot() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.events)
}

// clientInformer runs client-go's own informer against the local API.
type clientInformer struct {
	inf    cache.SharedIndexInformer
	lister corev1listers.PodLister
	j      *journal
	stop   func()
}

func startClientInformer(t *testing.T, cfg *rest.Config) *clientInformer {
	t.Helper()
	rc := restClient(t, cfg, schema.GroupVersion{Version: "v1"})
	lw := cache.NewListWatchFromClient(rc, "pods", "", fields.Everything())
	inf := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	c := &clientInformer{inf: inf, lister: corev1listers.NewPodLister(inf.GetIndexer()), j: &journal{}}
	reg, err := inf.AddEventHandler(c.j.handler())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); inf.RunWithContext(ctx) }()
	var once sync.Once
	c.stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(c.stop)
	// The handler's registration, not the informer: the informer's
	// HasSynced says the store is filled, while the handler may still be
	// handed its initial adds (client-go's semantics).
	waitFor(t, "the client's handler to sync", reg.HasSynced)
	return c
}

// equalsSource waits until the client's lister holds the source's objects
// (keys and resourceVersions).
func (c *clientInformer) equalsSource(t *testing.T, a *agent) {
	t.Helper()
	want := map[string]string{}
	for k, o := range a.src.Objects() {
		want[k] = o.(*corev1.Pod).ResourceVersion
	}
	var got map[string]string
	waitFor(t, "the client's lister to equal the source", func() bool {
		pods, err := c.lister.List(labels.Everything())
		if err != nil {
			return false
		}
		got = map[string]string{}
		for _, p := range pods {
			got[p.Namespace+"/"+p.Name] = p.ResourceVersion
		}
		return fmt.Sprint(got) == fmt.Sprint(want)
	})
}

// TestClientGoInformer: client-go's informer and lister, pointed at the
// local API over a Unix socket, in both of client-go's list modes (the
// WatchList stream and LIST then WATCH): synced with the agent's objects,
// then every change the agent's informer applies reaches the client's
// handler, in the same order, and the lister equals the source. A
// namespace lister answers from the client's index.
func TestClientGoInformer(t *testing.T) {
	for _, watchList := range []bool{true, false} {
		t.Run(fmt.Sprintf("watchlist=%v", watchList), func(t *testing.T) {
			clientfeaturestesting.SetFeatureDuringTest(t, clientfeatures.WatchListClient, watchList)
			agentJ := &journal{}
			a := startAgent(t, "", newPodSource(40), agentJ.handler())
			sock := filepath.Join(t.TempDir(), "api.sock")
			h, err := localapi.New(a.db, &localapi.Options{Logger: &quietLogger})
			if err != nil {
				t.Fatal(err)
			}
			serveUnix(t, h, sock)
			c := startClientInformer(t, localapi.UnixConfig(sock))
			if n, initial := len(c.inf.GetStore().List()), c.j.initialAdds(); n != 40 || initial != 40 {
				t.Fatalf("client synced with %d objects, %d initial adds", n, initial)
			}
			changePods(t, a.src, 0, 120)
			a.caughtUp(t)
			c.equalsSource(t, a)
			if got, want := c.j.snapshot(), agentJ.snapshot(); !slices.Equal(got, want) {
				t.Fatalf("client's events:\n%v\nagent's:\n%v", got, want)
			}
			ns1, err := c.lister.Pods("ns-1").List(labels.Everything())
			if err != nil || len(ns1) == 0 {
				t.Fatalf("namespace lister: %v, %d pods", err, len(ns1))
			}
		})
	}
}

// serveUnix serves h on a Unix socket at path until the test ends (or the
// returned stop).
func serveUnix(t testing.TB, h *localapi.Handler, path string) (stop func()) {
	t.Helper()
	l, err := localapi.ListenUnix(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Serve(ctx, l) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
			_ = h.Close()
		})
	}
	t.Cleanup(stop)
	return stop
}

// TestClientGoInformerAcrossAgentRestart: the agent stops and restarts
// (warm, from its file) while client-go's informer watches the local API on
// the same socket. Changes made while the agent is down reach the client
// through the agent's resumed watch: the client resumes from its
// resourceVersion without a relist and sees the agent's events in order.
// Then the server compacts while the agent is down again: the agent
// relists, the client's watch gets 410 and the client relists from the
// local API; both end equal to the source, with the same deletions.
func TestClientGoInformerAcrossAgentRestart(t *testing.T) {
	// The local API is served before the agent's informer runs (as an
	// agent should do it): its window holds every event since the start.
	sock := filepath.Join(t.TempDir(), "api.sock")
	var stopServe func()
	serveBeforeRun := func(a *agent) {
		h, err := localapi.New(a.db, &localapi.Options{Logger: &quietLogger})
		if err != nil {
			t.Fatal(err)
		}
		stopServe = serveUnix(t, h, sock)
	}
	agentJ := &journal{}
	a := startAgentWith(t, "", newPodSource(30), serveBeforeRun, agentJ.handler())
	path, src := a.path, a.src
	c := startClientInformer(t, localapi.UnixConfig(sock))
	changePods(t, src, 0, 30)
	a.caughtUp(t)
	c.equalsSource(t, a)
	before := len(c.j.snapshot())
	if got, want := c.j.snapshot(), agentJ.snapshot(); !slices.Equal(got, want) {
		t.Fatalf("before the restart, client:\n%v\nagent:\n%v", got, want)
	}

	// Restart with changes in between: resume.
	stopServe()
	a.stop()
	changePods(t, src, 30, 25)
	src.ResetCalls()
	agentJ = &journal{}
	a = startAgentWith(t, path, src, serveBeforeRun, agentJ.handler())
	if !a.pods.Decision().Warm {
		t.Fatalf("agent not warm: %s", a.pods.Decision().Detail)
	}
	a.caughtUp(t)
	c.equalsSource(t, a)
	if got, want := c.j.snapshot()[before:], agentJ.snapshot(); !slices.Equal(got, want) {
		t.Fatalf("after the restart, client:\n%v\nagent:\n%v", got, want)
	}
	if calls := src.Calls(); calls.Lists != 0 {
		t.Fatalf("the agent relisted: %v", calls.Log)
	}
	before = len(c.j.snapshot())

	// Restart after a compaction: the agent relists, so does the client.
	stopServe()
	a.stop()
	changePods(t, src, 60, 25)
	src.Compact()
	agentJ = &journal{}
	a = startAgentWith(t, path, src, serveBeforeRun, agentJ.handler())
	a.caughtUp(t)
	c.equalsSource(t, a)
	waitFor(t, "the client's relist events", func() bool { return len(c.j.snapshot())-before >= len(agentJ.snapshot()) })
	got, want := c.j.snapshot()[before:], agentJ.snapshot()
	sort.Strings(got)
	sort.Strings(want)
	if !slices.Equal(got, want) {
		t.Fatalf("after a relist, client:\n%v\nagent:\n%v", got, want)
	}
}
