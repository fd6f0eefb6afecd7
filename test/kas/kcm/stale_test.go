package kcm

import (
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/boltinformer/boltinformer/test/kas/harness"
)

// copyFile copies src to dst.
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	must(t, err)
	defer in.Close()
	out, err := os.Create(dst)
	must(t, err)
	_, err = io.Copy(out, in)
	must(t, err)
	must(t, out.Close())
}

// TestKCMStaleFile: a kube-controller-manager that takes over with an old
// cache file (a standby's after a leader change, a restored backup) while
// a Deployment was scaled up since, and the Pods' history was compacted
// (Pods have no watch cache here: their resumed watch gets 410 and
// relists, while the ReplicaSets' resumes at once). With SyncAfterFresh
// its ReplicaSet controller counts the Pods the server has before it
// creates any: no Pod is created (audit log). With SyncAfterDiskLoad,
// run after it and only logged, the controller may count the file's Pods
// and create Pods that then must be deleted: why kube-controller-manager
// needs SyncAfterFresh.
func TestKCMStaleFile(t *testing.T) {
	needTests(t)
	for _, policy := range []string{"fresh", "disk-load"} {
		t.Run(policy, func(t *testing.T) {
			c := newCluster(t, &harness.Options{WatchCacheSizes: []string{"pods#0"}, CompactionInterval: 5 * time.Second})
			ctx := t.Context()
			dir := t.TempDir()
			current, old := filepath.Join(dir, "kcm.db"), filepath.Join(dir, "old.db")
			opts := kcmOptions{mode: "persistent", cache: current}
			k := startKCM(t, c, opts)
			w := newWorld(c)
			_, err := c.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "app"}}, metav1.CreateOptions{})
			must(t, err)
			_, err = c.cs.AppsV1().Deployments("app").Create(ctx, deployment("app", "g", 2), metav1.CreateOptions{})
			must(t, err)
			w.want("app", "deploy/app/g", 2, 2)
			// Pods enough that relisting them takes a while.
			_, err = c.cs.AppsV1().Deployments("app").Create(ctx, deployment("app", "bulk", 300), metav1.CreateOptions{})
			must(t, err)
			w.want("app", "deploy/app/bulk", 300, 300)
			converge(t, "cold start", w.check)
			k.stop(t)
			saved := k.readStats(t).Informers["v1/pods"].SavedResourceVersion
			copyFile(t, current, old) // the standby's file, from now

			k = startKCM(t, c, opts)
			c.scale(t, "app", "g", 12)
			w.want("app", "deploy/app/g", 12, 10)
			converge(t, "scale-up", w.check)
			k.stop(t)
			waitExpired(t, c, saved)

			// The standby takes over with its old file.
			k = startKCM(t, c, kcmOptions{mode: "persistent", cache: old, extra: []string{"--boltinformer-sync-policy=" + policy}})
			// The world is converged already: wait for kcm to have caught
			// up (its Pods and ReplicaSets fresh), then for anything it did
			// to settle. (With SyncAfterDiskLoad a quiet resource is fresh
			// only at its first bookmark, a minute on.)
			k.freshStats(t, "v1/pods", "apps/v1/replicasets")
			converge(t, "take-over with the old file", w.check)
			k.stop(t)
			got := podCreates(t, c.readAudit(t))["deploy/app/g"]
			if policy == "fresh" {
				w.verifyAudit(t)
				return
			}
			t.Logf("SyncAfterDiskLoad: g created %d Pods over the test, %d needed (%d too many, deleted again)", got, 12, got-12)
			if got < 12 {
				t.Errorf("g created %d Pods, fewer than its 12", got)
			}
		})
	}
}
