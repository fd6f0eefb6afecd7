package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/recovery/crashtest"
)

// TestAgentSurvivesKills is the edge agent's restart-resilience test, an
// example of the kit in recovery/crashtest: each child is one life of the
// agent (its caches over fake API servers whose history is known), killed
// with SIGKILL at a random instant while Pod events stream in. Between
// lives the parent checks the cache file against the truth at its saved
// resourceVersion; the last life runs to the end and checks what the
// agent's own listers serve. BOLTINFORMER_CRASH_KILLS sets the kill count.
func TestAgentSurvivesKills(t *testing.T) {
	kills := 8
	if n, err := strconv.Atoi(os.Getenv("BOLTINFORMER_CRASH_KILLS")); err == nil && n > 0 {
		kills = n
	}
	var dir string
	if !crashtest.IsChild() {
		dir = t.TempDir()
	}
	history := crashtest.NewHistory(7, &crashtest.HistoryOptions{Keys: 200, Growth: 20, MaxKeys: 400})
	var saved int64 // the resourceVersion the file was last found at
	warm := 0
	results := crashtest.Run(t, crashtest.Config{
		Kills: kills,
		Final: true,
		Seed:  7,
		Dir:   dir,
		Plan: func(r *crashtest.Round) crashtest.Plan {
			// The server moved on while the agent was down.
			k := saved + int64(r.Rand.IntN(300))
			return crashtest.Plan{
				Args:      map[string]string{"k": fmt.Sprint(k), "live": "3000"},
				KillAfter: "live",
				Delay:     time.Duration(r.Rand.IntN(40)) * time.Millisecond,
			}
		},
		Child: agentLife(history),
		Check: func(t testing.TB, r *crashtest.Result) {
			if r.ChildErr != "" {
				t.Fatalf("life %d: %s\n%s", r.Run, r.ChildErr, r.LogTail(20))
			}
			fs, err := crashtest.VerifyFile(filepath.Join(dir, "agent.db"), "v1/pods", history.StateAt, &crashtest.VerifyOptions{Sample: 50})
			if err != nil {
				t.Fatalf("life %d (killed %t): %v", r.Run, r.Killed, err)
			}
			if fs.RV < saved {
				t.Fatalf("life %d: the saved resourceVersion went back from %d to %d", r.Run, saved, fs.RV)
			}
			saved = fs.RV
			if m, ok := r.Find("live"); ok && m.Detail == "warm= true" {
				warm++
			}
			t.Logf("life %d: killed=%t after %s, file at resourceVersion %d with %d Pods", r.Run, r.Killed, r.Elapsed.Round(time.Millisecond), fs.RV, fs.Objects)
		},
	})
	if crashtest.IsChild() {
		return
	}
	// Every life after the first found a file to resume from.
	if len(results) != kills+1 || warm != kills || saved == 0 {
		t.Fatalf("%d lives, %d warm starts, final resourceVersion %d", len(results), warm, saved)
	}
}

// agentLife runs the agent once: the Pod server holds history events
// 1..k, the agent starts (warm after the first life), then events k+1..
// k+live stream in until the parent kills it, or, in the final life,
// until the agent has caught up and its lister matches the server.
func agentLife(h *crashtest.History) func(ctx context.Context, env *crashtest.Env) error {
	return func(ctx context.Context, env *crashtest.Env) error {
		k, live := env.IntArg("k"), env.IntArg("live")
		pods := h.Source(0, k)
		configMaps := crashtest.NewSource(func() runtime.Object { return &corev1.ConfigMapList{} })
		secrets := crashtest.NewSource(func() runtime.Object { return &corev1.SecretList{} })
		db, err := boltinformer.Open(filepath.Join(env.Dir, "agent.db"), &boltinformer.Options{CommitMaxDelay: 5 * time.Millisecond})
		if err != nil {
			return err
		}
		defer db.Close()
		idx := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
		podInf, err := db.NewInformer("v1/pods", pods, &corev1.Pod{}, 0, idx, nil)
		if err != nil {
			return err
		}
		cmInf, err := db.NewInformer("v1/configmaps", configMaps, &corev1.ConfigMap{}, 0, idx, nil)
		if err != nil {
			return err
		}
		secretInf, err := db.NewInformer("v1/secrets", secrets, &corev1.Secret{}, 0, idx, &boltinformer.InformerOptions{
			Keyring: &boltinformer.Keyring{Current: "k1", Keys: map[string][]byte{"k1": []byte("boltinformer-demo-key-32-bytes!!")}},
		})
		if err != nil {
			return err
		}
		a, err := newAgent(podInf, cmInf, secretInf)
		if err != nil {
			return err
		}
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan struct{}, 3)
		for _, inf := range a.informers() {
			go func() { inf.RunWithContext(runCtx); done <- struct{}{} }()
		}
		defer func() {
			stop()
			for range a.informers() {
				<-done
			}
		}()
		if !cache.WaitForCacheSync(ctx.Done(), a.synced) {
			return ctx.Err()
		}
		// The synced state on disk before the kills may come: the parent
		// counts on every later life starting warm (a kill before the
		// first group commit of a cold start left an empty file, and the
		// next life cold, on a loaded machine).
		if err := db.Flush(ctx); err != nil {
			return err
		}
		env.Mark("live", "warm=", podInf.Decision().Warm)
		for _, e := range h.Events(k, k+live) {
			if err := pods.Apply(e); err != nil {
				return err
			}
		}
		if !env.Final {
			<-ctx.Done() // until killed
			return nil
		}
		want := pods.ResourceVersion()
		for i := 0; podInf.Indexer().ResourceVersion() != want; i++ {
			if i == 3000 {
				return fmt.Errorf("agent at resourceVersion %s, server at %s", podInf.Indexer().ResourceVersion(), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
		list, err := a.podLister.List(labels.Everything())
		if err != nil {
			return err
		}
		got := make([]any, len(list))
		for i, p := range list {
			got[i] = p
		}
		return crashtest.Compare(got, pods.Objects())
	}
}
