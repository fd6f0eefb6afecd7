package kcm

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/boltinformer/boltinformer/test/kas/harness"
)

// baseWorld creates namespace app with Deployment a (2 replicas) and Job j
// (2 Pods) and waits for kcm to converge.
func baseWorld(t *testing.T, c *cluster) *world {
	t.Helper()
	ctx := t.Context()
	w := newWorld(c)
	_, err := c.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "app"}}, metav1.CreateOptions{})
	must(t, err)
	_, err = c.cs.AppsV1().Deployments("app").Create(ctx, deployment("app", "a", 2), metav1.CreateOptions{})
	must(t, err)
	w.want("app", "deploy/app/a", 2, 2)
	_, err = c.cs.BatchV1().Jobs("app").Create(ctx, job("app", "j", 2), metav1.CreateOptions{})
	must(t, err)
	w.want("app", "job/app/j", 2, 2)
	converge(t, "cold start", w.check)
	w.keep(t, "app", "job/app/j")
	return w
}

// TestKCMExpiredWhileDown: while kcm is down, the apiserver restarts (its
// watch cache answers 410 to every older resourceVersion) and etcd
// compacts past the file's resourceVersion: the warm start's watches get
// 410, the informers relist, and kcm converges without a duplicate Pod.
func TestKCMExpiredWhileDown(t *testing.T) {
	needTests(t)
	c := newCluster(t, &harness.Options{CompactionInterval: 5 * time.Second})
	opts := kcmOptions{mode: "persistent", cache: filepath.Join(t.TempDir(), "kcm.db")}
	k := startKCM(t, c, opts)
	w := baseWorld(t, c)
	k.stop(t)
	saved := k.readStats(t).Informers["v1/pods"].SavedResourceVersion
	if saved == "" {
		t.Fatal("no saved resourceVersion for v1/pods")
	}

	c.scale(t, "app", "a", 4)
	w.keep(t, "app", "deploy/app/a")
	w.forgetUID(c.deleteOnePod(t, "app", "deploy/app/a"))
	w.want("app", "deploy/app/a", 4, 3)
	must(t, c.StopAPIServer())
	must(t, c.StartAPIServer())
	waitExpired(t, c, saved)

	k = startKCM(t, c, opts)
	d := converge(t, "warm start after a 410", w.check)
	t.Logf("warm start after a 410 converged in %s", d)
	w.verifyAudit(t)
	w.verifyLive(t)
	s := k.readStats(t)
	if h := s.Informers["v1/pods"]; h.Start != "warm" {
		t.Errorf("v1/pods started %s (%s), want warm", h.Start, h.StartReason)
	}
	logLists(t, "after the 410", s)
	k.stop(t)
}

// waitExpired waits until a watch of Pods from rv gets 410.
func waitExpired(t *testing.T, c *cluster, rv string) {
	t.Helper()
	converge(t, "410 from resourceVersion "+rv, func(ctx context.Context) string {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		wi, err := c.cs.CoreV1().Pods("").Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
		if err != nil {
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				return ""
			}
			return err.Error()
		}
		defer wi.Stop()
		select {
		case e, ok := <-wi.ResultChan():
			if ok && e.Type == watch.Error {
				if err := apierrors.FromObject(e.Object); apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
					return ""
				}
			}
			return "the watch from " + rv + " is served"
		case <-ctx.Done():
			return "the watch from " + rv + " is served"
		}
	})
}

// logLists logs the informers' lists of a start.
func logLists(t *testing.T, when string, s statsFile) {
	t.Helper()
	var lines []string
	for k, c := range s.informerLists() {
		lines = append(lines, fmt.Sprintf("%s: %d (%d B)", k, c.Requests, c.Bytes))
	}
	slices.Sort(lines)
	t.Logf("%s, the informers listed: %s", when, strings.Join(lines, ", "))
}

// TestKCMAPIServerRestart: the apiserver is killed and restarted under a
// running kcm; it converges on what changes after, without a duplicate
// Pod; then a clean stop and a warm start list nothing.
func TestKCMAPIServerRestart(t *testing.T) {
	needTests(t)
	c := newCluster(t, nil)
	opts := kcmOptions{mode: "persistent", cache: filepath.Join(t.TempDir(), "kcm.db")}
	k := startKCM(t, c, opts)
	w := baseWorld(t, c)
	w.keep(t, "app", "deploy/app/a")

	must(t, c.KillAPIServer())
	must(t, c.StartAPIServer())
	c.scale(t, "app", "a", 5)
	w.want("app", "deploy/app/a", 5, 3)
	w.forgetUID(c.deleteOnePod(t, "app", "job/app/j"))
	w.want("app", "job/app/j", 2, 1)
	d := converge(t, "after the apiserver's restart", w.check)
	t.Logf("converged in %s after the apiserver's restart", d)
	w.verifyAudit(t)
	w.verifyLive(t)
	if k.p.Exited() {
		t.Fatalf("kcm exited: %v", k.p.Err())
	}
	logLists(t, "across the apiserver's restart", k.readStats(t))

	k.stop(t)
	k = startKCM(t, c, opts)
	converge(t, "warm start", w.check)
	checkWarm(t, k)
	w.verifyAudit(t)
	k.stop(t)
}
