package kcm

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// world is the objects of the restart tests and what kcm must make of
// them: the Pods by owner, and the objects that must be gone.
type world struct {
	c    *cluster
	pods map[string]map[string]int // namespace -> owner -> Pods
	// creates is how many Pods each owner must have created over the
	// whole test (the audit log's count): one more is a duplicate.
	creates map[string]int
	// gone are checks that an object was deleted ("" when it is).
	gone map[string]func(ctx context.Context) string
	// slices are the Services whose EndpointSlices must exist (true) or
	// not (false).
	slices map[string]bool
	// live are the Pods kcm must never delete, by "ns/name".
	live map[string]livePod
}

// livePod is a Pod kcm must not delete.
type livePod struct {
	uid   string
	owner string // ownerKey
}

func newWorld(c *cluster) *world {
	return &world{c: c, pods: map[string]map[string]int{}, creates: map[string]int{},
		gone: map[string]func(context.Context) string{}, slices: map[string]bool{}, live: map[string]livePod{}}
}

// want sets owner's Pods (and adds what it creates: created more Pods).
func (w *world) want(ns, owner string, pods, created int) {
	if w.pods[ns] == nil {
		w.pods[ns] = map[string]int{}
	}
	w.pods[ns][owner] = pods
	w.creates[owner] += created
}

// check says what is not yet as the world wants ("" when all is).
func (w *world) check(ctx context.Context) string {
	for ns, want := range w.pods {
		if d := w.c.expectPods(ctx, ns, want); d != "" {
			return ns + ": " + d
		}
	}
	for what, g := range w.gone {
		if d := g(ctx); d != "" {
			return what + ": " + d
		}
	}
	for svc, want := range w.slices {
		ns, name, _ := strings.Cut(svc, "/")
		n, err := w.c.slicesOf(ctx, ns, name)
		if err != nil {
			return err.Error()
		}
		if (n > 0) != want {
			return fmt.Sprintf("Service %s has %d EndpointSlices, want them: %v", svc, n, want)
		}
	}
	return ""
}

// verifyAudit checks the audit log: each owner created exactly as many
// Pods as the world says (no duplicate), and kcm deleted no Pod the world
// keeps alive.
func (w *world) verifyAudit(t *testing.T) {
	t.Helper()
	events := w.c.readAudit(t)
	got := podCreates(t, events)
	for owner, n := range w.creates {
		if got[owner] != n {
			t.Errorf("%s created %d Pods over the test, want %d (audit log)", owner, got[owner], n)
		}
	}
	for owner, n := range got {
		if _, ok := w.creates[owner]; !ok {
			t.Errorf("%s created %d Pods, want none (audit log)", owner, n)
		}
	}
	for _, e := range events {
		if e.Verb == "delete" && fromKCM(e) && e.ObjectRef.Resource == "pods" {
			// The audit's Metadata level has no UID: check by name.
			if lp, ok := w.live[e.ObjectRef.Namespace+"/"+e.ObjectRef.Name]; ok {
				t.Errorf("kcm (%s) deleted Pod %s/%s (%s), which must live", e.UserAgent, e.ObjectRef.Namespace, e.ObjectRef.Name, lp.uid)
			}
		}
	}
}

// keep marks the current Pods of owner in ns as never to be deleted.
func (w *world) keep(t *testing.T, ns, owner string) {
	t.Helper()
	pods, err := w.c.cs.CoreV1().Pods(ns).List(t.Context(), metav1.ListOptions{})
	must(t, err)
	for i := range pods.Items {
		if p := &pods.Items[i]; ownerKey(p) == owner && p.DeletionTimestamp == nil {
			w.live[p.Namespace+"/"+p.Name] = livePod{uid: string(p.UID), owner: owner}
		}
	}
}

// forget stops protecting the Pods of owner (the test deletes or scales
// them down).
func (w *world) forget(owner string) {
	for key, p := range w.live {
		if p.owner == owner {
			delete(w.live, key)
		}
	}
}

// forgetUID stops protecting the Pod of that UID.
func (w *world) forgetUID(uid string) {
	for key, p := range w.live {
		if p.uid == uid {
			delete(w.live, key)
		}
	}
}

// verifyLive checks that every Pod marked live still exists, same UID.
func (w *world) verifyLive(t *testing.T) {
	t.Helper()
	for key, lp := range w.live {
		ns, name, _ := strings.Cut(key, "/")
		p, err := w.c.cs.CoreV1().Pods(ns).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil || string(p.UID) != lp.uid {
			t.Errorf("Pod %s (%s), which must live, is gone: %v", key, lp.uid, err)
		}
	}
}

// TestKCMWarmRestart: kube-controller-manager on persistent informers,
// stopped (cleanly, then with kill -9) while Deployments are scaled, owners
// deleted, namespaces created and deleted, Pods and Services deleted,
// warm-restarts from its file without a full LIST and converges: exact
// Pod counts, no duplicate Pod ever created (audit log), dependents
// collected, nothing deleted that should live.
func TestKCMWarmRestart(t *testing.T) {
	needTests(t)
	c := newCluster(t, nil)
	ctx := t.Context()
	cache := filepath.Join(t.TempDir(), "kcm.db")
	opts := kcmOptions{mode: "persistent", cache: cache}
	w := newWorld(c)
	apps := c.cs.AppsV1()

	// Phase 0: kcm cold; the world built.
	k := startKCM(t, c, opts)
	for _, ns := range []string{"app", "doomed"} {
		_, err := c.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		must(t, err)
	}
	for name, n := range map[string]int32{"a": 2, "b": 3, "c": 2} {
		_, err := apps.Deployments("app").Create(ctx, deployment("app", name, n), metav1.CreateOptions{})
		must(t, err)
		w.want("app", "deploy/app/"+name, int(n), int(n))
	}
	_, err := apps.Deployments("doomed").Create(ctx, deployment("doomed", "d", 1), metav1.CreateOptions{})
	must(t, err)
	w.want("doomed", "deploy/doomed/d", 1, 1)
	_, err = c.cs.BatchV1().Jobs("app").Create(ctx, job("app", "j", 2), metav1.CreateOptions{})
	must(t, err)
	w.want("app", "job/app/j", 2, 2)
	_, err = c.cs.CoreV1().Services("app").Create(ctx, service("app", "s1", "a"), metav1.CreateOptions{})
	must(t, err)
	w.slices["app/s1"] = true
	parent, err := c.cs.CoreV1().ConfigMaps("app").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "parent"}}, metav1.CreateOptions{})
	must(t, err)
	_, err = c.cs.CoreV1().ConfigMaps("app").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "child",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "parent", UID: parent.UID}}}}, metav1.CreateOptions{})
	must(t, err)
	_, err = c.cs.CoreV1().ConfigMaps("app").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "orphan-ok"}}, metav1.CreateOptions{})
	must(t, err)
	d := converge(t, "cold start", w.check)
	t.Logf("cold start converged in %s", d)
	w.keep(t, "app", "job/app/j")

	// Phase 1: a clean stop; changes while down.
	k.stop(t)
	c.scale(t, "app", "a", 4)
	w.keep(t, "app", "deploy/app/a")
	w.forgetUID(c.deleteOnePod(t, "app", "deploy/app/a")) // 1 left, 4 wanted: 3 created
	w.want("app", "deploy/app/a", 4, 3)
	c.scale(t, "app", "b", 1) // 2 deleted by kcm
	w.want("app", "deploy/app/b", 1, 0)
	must(t, apps.Deployments("app").Delete(ctx, "c", background)) // its ReplicaSet and Pods collected
	w.want("app", "deploy/app/c", 0, 0)
	w.gone["ReplicaSets of c"] = func(ctx context.Context) string {
		l, err := apps.ReplicaSets("app").List(ctx, metav1.ListOptions{LabelSelector: "app=c"})
		if err != nil || len(l.Items) != 0 {
			return fmt.Sprintf("%v, %d left", err, len(l.Items))
		}
		return ""
	}
	must(t, c.cs.CoreV1().ConfigMaps("app").Delete(ctx, "parent", background)) // child collected
	w.gone["ConfigMap child"] = func(ctx context.Context) string {
		_, err := c.cs.CoreV1().ConfigMaps("app").Get(ctx, "child", metav1.GetOptions{})
		return gone("child", err)
	}
	must(t, c.cs.CoreV1().Namespaces().Delete(ctx, "doomed", metav1.DeleteOptions{}))
	delete(w.pods, "doomed")
	w.gone["namespace doomed"] = func(ctx context.Context) string {
		_, err := c.cs.CoreV1().Namespaces().Get(ctx, "doomed", metav1.GetOptions{})
		return gone("doomed", err)
	}
	_, err = c.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "fresh"}}, metav1.CreateOptions{})
	must(t, err)
	_, err = apps.Deployments("fresh").Create(ctx, deployment("fresh", "f", 2), metav1.CreateOptions{})
	must(t, err)
	w.want("fresh", "deploy/fresh/f", 2, 2)
	must(t, c.cs.CoreV1().Services("app").Delete(ctx, "s1", metav1.DeleteOptions{}))
	w.slices["app/s1"] = false
	_, err = c.cs.CoreV1().Services("app").Create(ctx, service("app", "s2", "b"), metav1.CreateOptions{})
	must(t, err)
	w.slices["app/s2"] = true

	// Phase 2: warm start.
	k = startKCM(t, c, opts)
	d = converge(t, "warm start after a clean stop", w.check)
	t.Logf("warm start after a clean stop converged in %s", d)
	w.verifyAudit(t)
	w.verifyLive(t)
	checkWarm(t, k)
	w.keep(t, "app", "deploy/app/b")
	w.keep(t, "fresh", "deploy/fresh/f")

	// Phase 3: kill -9; changes while down.
	k.kill()
	c.scale(t, "app", "a", 1) // 3 deleted by kcm
	w.want("app", "deploy/app/a", 1, 0)
	w.forget("deploy/app/a")
	w.forgetUID(c.deleteOnePod(t, "app", "deploy/app/b")) // its only Pod: one created
	w.want("app", "deploy/app/b", 1, 1)
	must(t, c.cs.BatchV1().Jobs("app").Delete(ctx, "j", background)) // its Pods collected
	w.forget("job/app/j")
	w.want("app", "job/app/j", 0, 0)
	_, err = apps.Deployments("app").Create(ctx, deployment("app", "g", 1), metav1.CreateOptions{})
	must(t, err)
	w.want("app", "deploy/app/g", 1, 1)

	// Phase 4: warm start after kill -9.
	k = startKCM(t, c, opts)
	d = converge(t, "warm start after kill -9", w.check)
	t.Logf("warm start after kill -9 converged in %s", d)
	w.verifyAudit(t)
	w.verifyLive(t)
	checkWarm(t, k)

	// Phase 5: kill -9 in the middle of a scale-up, as soon as kcm has
	// created a Pod: the file may miss the Pods just created, and the
	// ReplicaSet controller's expectations are lost. The warm start must
	// count the Pods the server has, not the file's, before it creates.
	c.scale(t, "app", "g", 6)
	w.want("app", "deploy/app/g", 6, 5)
	converge(t, "the first Pod of g's scale-up", func(ctx context.Context) string {
		n, _, err := c.podsByOwner(ctx, "app")
		switch {
		case err != nil:
			return err.Error()
		case n["deploy/app/g"] < 2:
			return fmt.Sprintf("%d Pods of g", n["deploy/app/g"])
		}
		return ""
	})
	k.kill()
	k = startKCM(t, c, opts)
	converge(t, "warm start after kill -9 during a scale-up", w.check)
	w.verifyAudit(t)
	k.stop(t)
	w.verifyAudit(t) // nothing more was created while it ran on
	if _, err := c.cs.CoreV1().ConfigMaps("app").Get(ctx, "orphan-ok", metav1.GetOptions{}); err != nil {
		t.Errorf("ConfigMap orphan-ok, owned by nothing, was deleted: %v", err)
	}
	t.Logf("kcm deleted: %s", strings.Join(kcmDeletes(c.readAudit(t)), ", "))
}

// checkWarm checks that kcm resumed its informers from the file, with no
// LIST of whole objects; it logs the informers' lists of metadata.
func checkWarm(t *testing.T, k *proc) {
	t.Helper()
	s := k.freshStats(t)
	warm, all := s.warmInformers()
	if all == 0 || warm != all {
		var cold []string
		for name, h := range s.Informers {
			if !h.Resumed {
				cold = append(cold, name+" ("+h.Start+": "+h.StartReason+")")
			}
		}
		slices.Sort(cold)
		t.Errorf("%d of %d persistent informers resumed their file; cold: %s", warm, all, strings.Join(cold, ", "))
	}
	slowest := keysOf(s.Informers)
	slices.SortFunc(slowest, func(a, b string) int { return int(s.Informers[b].FreshAfter - s.Informers[a].FreshAfter) })
	for _, name := range slowest[:min(5, len(slowest))] {
		h := s.Informers[name]
		t.Logf("fresh after %s: %s (%d objects, fallback %q)", h.FreshAfter, name, h.Objects, h.FreshFallback)
	}
	if full := s.fullLists(); len(full) != 0 {
		t.Errorf("a warm start listed whole objects: %v", keysOf(full))
	}
	for _, line := range grepFile(k.log, "kept in memory") {
		t.Errorf("kcm: %s", line)
	}
	var meta []string
	for k, c := range s.informerLists() {
		meta = append(meta, fmt.Sprintf("%s (%d B)", k, c.Bytes))
	}
	slices.Sort(meta)
	t.Logf("warm start: %d informers resumed; metadata lists: %s", warm, strings.Join(meta, ", "))
}

func keysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
