package main

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/boltinformer/boltinformer/recovery/crashtest"
)

// TestAgentSurvivesKills is the edge agent's restart-resilience test, an
// example of the kit in recovery/crashtest, through main's own wiring:
// each child is one life of the agent, agentMain with its command line
// (the key file, one factory, the transform, the listeners), against a
// fake API server on 127.0.0.1 (crashtest.Handler) whose Pod history is
// known. The child is killed with SIGKILL at a random instant while Pod
// events stream in. Between lives the parent checks the cache file against
// the truth at its saved resourceVersion; the last life runs to the end
// and checks what the agent's own listers serve. BOLTINFORMER_CRASH_KILLS
// sets the kill count.
func TestAgentSurvivesKills(t *testing.T) {
	kills := 8
	if n, err := strconv.Atoi(os.Getenv("BOLTINFORMER_CRASH_KILLS")); err == nil && n > 0 {
		kills = n
	}
	var dir string
	if !crashtest.IsChild() {
		dir = t.TempDir()
	}
	// One node: the agent's spec.nodeName selector is true of every Pod of
	// the history (crashtest.Handler does not turn a Pod that leaves the
	// node into a deletion, as kube-apiserver does).
	history := crashtest.NewHistory(7, &crashtest.HistoryOptions{Keys: 200, Growth: 20, MaxKeys: 400, Nodes: 1})
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
				Delay:     time.Duration(r.Rand.IntN(500)) * time.Millisecond, // some before, some amid the catch-up
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
			if fs.State.Transform != stripManagedFieldsID {
				t.Fatalf("life %d: the file's transform is %q, want %q", r.Run, fs.State.Transform, stripManagedFieldsID)
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
		srv := httptest.NewServer(edgeHandler(pods))
		defer srv.Close()
		kubeconfig, err := writeKubeconfig(env.Dir, srv.URL)
		if err != nil {
			return err
		}
		keyFile, err := writeKeyFile(env.Dir)
		if err != nil {
			return err
		}
		ctx, stop := context.WithCancel(ctx)
		defer stop()
		var hookErr error
		testHookSynced = func(ctx context.Context, a *agent) error {
			hookErr = lifeAfterSync(ctx, env, h, pods, a, k, live)
			if hookErr == nil && env.Final {
				stop() // the agent stops as after SIGTERM
			}
			return hookErr
		}
		defer func() { testHookSynced = nil }()
		var stderr strings.Builder
		code := agentMain(ctx, []string{
			"-kubeconfig=" + kubeconfig,
			"-cache=" + filepath.Join(env.Dir, "agent.db"),
			"-node=node-0",
			"-namespace=edge",
			"-listen=127.0.0.1:0",
			"-key-file=" + keyFile,
		}, os.Stdout, &stderr)
		switch {
		case hookErr != nil:
			return hookErr
		case code != 0:
			return fmt.Errorf("agentMain exited %d: %s", code, stderr.String())
		}
		return nil
	}
}

// lifeAfterSync is a life once the agent's caches have synced: the Pod
// events stream in; the final life waits for the agent to catch up and
// compares its lister with the server.
func lifeAfterSync(ctx context.Context, env *crashtest.Env, h *crashtest.History, pods *crashtest.Source, a *agent, k, live int64) error {
	// The synced state on disk before the kills may come: the parent
	// counts on every later life starting warm.
	for _, inf := range a.informers() {
		if err := inf.Flush(ctx); err != nil {
			return err
		}
	}
	env.Mark("live", "warm=", a.pods.Decision().Warm)
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
	for i := 0; a.pods.Indexer().ResourceVersion() != want; i++ {
		if i == 3000 {
			return fmt.Errorf("agent at resourceVersion %s, server at %s", a.pods.Indexer().ResourceVersion(), want)
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
	if err := crashtest.Compare(got, pods.Objects()); err != nil {
		return err
	}
	secrets, err := a.secretLister.Secrets("edge").List(labels.Everything())
	if err != nil || len(secrets) != 2 {
		return errors.Join(err, fmt.Errorf("the agent has %d Secrets, want 2", len(secrets)))
	}
	return nil
}

// edgeHandler is a fake API server: pods, and the ConfigMaps and Secrets
// of namespace edge.
func edgeHandler(pods *crashtest.Source) *crashtest.Handler {
	cms := crashtest.NewSource(func() runtime.Object { return &corev1.ConfigMapList{} })
	secrets := crashtest.NewSource(func() runtime.Object { return &corev1.SecretList{} })
	for i := range 2 {
		meta := func(kind string) metav1.ObjectMeta {
			return metav1.ObjectMeta{Namespace: "edge", Name: fmt.Sprintf("%s-%d", kind, i), UID: types.UID(fmt.Sprintf("%s-uid-%d", kind, i))}
		}
		if _, err := cms.Create(&corev1.ConfigMap{ObjectMeta: meta("cm"), Data: map[string]string{"k": "v"}}); err != nil {
			panic(err)
		}
		if _, err := secrets.Create(&corev1.Secret{ObjectMeta: meta("secret"), Data: map[string][]byte{"password": []byte(secretPlaintext)}}); err != nil {
			panic(err)
		}
	}
	h := crashtest.NewHandler()
	h.Serve(corev1.SchemeGroupVersion.WithResource("pods"), pods)
	h.Serve(corev1.SchemeGroupVersion.WithResource("configmaps"), cms)
	h.Serve(corev1.SchemeGroupVersion.WithResource("secrets"), secrets)
	return h
}

// secretPlaintext is in the test Secrets' data: found on disk, a payload
// is not sealed.
const secretPlaintext = "hunter2-plaintext-marker"

// writeKubeconfig writes a kubeconfig for server into dir.
func writeKubeconfig(dir, server string) (string, error) {
	path := filepath.Join(dir, "kubeconfig")
	return path, os.WriteFile(path, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: %s
contexts:
- name: test
  context:
    cluster: test
    user: test
current-context: test
users:
- name: test
  user: {}
`, server)), 0o600)
}

// testKeyID is the key that seals the test Secrets.
const testKeyID = "k1"

// writeKeyFile writes the agent's -key-file into dir: an
// EncryptionConfiguration with key testKeyID for secrets.
func writeKeyFile(dir string) (string, error) {
	path := filepath.Join(dir, "keys.yaml")
	return path, os.WriteFile(path, []byte(`apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
- resources: [secrets]
  providers:
  - aesgcm:
      keys:
      - name: `+testKeyID+`
        secret: Ym9sdGluZm9ybWVyLXRlc3Qta2V5LTMyLWJ5dGVzISE=
`), 0o600)
}
