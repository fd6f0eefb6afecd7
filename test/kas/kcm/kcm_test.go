package kcm

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/test/kas/harness"
	"github.com/boltinformer/boltinformer/test/kas/internal/child"
)

// auditPolicy records every Pod created (with the response: its owner)
// and every deletion (who deleted what).
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: RequestResponse
  verbs: ["create"]
  resources: [{group: "", resources: ["pods"]}]
- level: Metadata
  verbs: ["delete", "deletecollection"]
- level: None
`

// cluster is a harness cluster with an audit log and a heartbeat (a Lease
// renewed every 2 s, as kube-controller-manager's and the nodes' are in a
// live cluster: without it nothing moves etcd's revision, and resumed
// watches get no bookmark).
type cluster struct {
	*harness.Cluster
	cs    kubernetes.Interface
	audit string
}

// newCluster starts a cluster for t, with the audit log; opts may set
// CompactionInterval.
func newCluster(t *testing.T, opts *harness.Options) *cluster {
	t.Helper()
	return startCluster(t, opts, true)
}

// startCluster starts a cluster for t, with the audit log or without
// (benchmarks: it costs the apiserver).
func startCluster(t *testing.T, opts *harness.Options, withAudit bool) *cluster {
	t.Helper()
	o := harness.Options{}
	if opts != nil {
		o = *opts
	}
	o.EtcdUnsafeNoFsync = true
	audit := ""
	if withAudit {
		dir := t.TempDir()
		policy := filepath.Join(dir, "audit-policy.yaml")
		if err := os.WriteFile(policy, []byte(auditPolicy), 0o644); err != nil {
			t.Fatal(err)
		}
		audit = filepath.Join(dir, "audit.log")
		o.APIServerFlags = append(o.APIServerFlags, "--audit-policy-file="+policy, "--audit-log-path="+audit, "--audit-log-mode=blocking")
	}
	c, err := harness.Start(t, &o)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := c.Clientset()
	if err != nil {
		t.Fatal(err)
	}
	stop, err := harness.Heartbeat(cs, metav1.NamespaceSystem, "kcm-e2e-heartbeat", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return &cluster{Cluster: c, cs: cs, audit: audit}
}

// kcmOptions choose a run of kcm.
type kcmOptions struct {
	mode  string // "persistent" or "stock"
	cache string // the cache file (persistent)
	// qps and burst are --kube-api-qps and --kube-api-burst (0: 200 and
	// 400, which a test's few hundred Pods do not wait on).
	qps, burst int
	extra      []string
}

// proc is one run of kcm.
type proc struct {
	p     *child.Process
	log   string
	stats string
	start time.Time
}

// kcmArgs are the flags every run gets: the harness's apiserver, no
// leader election or HTTPS (kcm refuses them), the controllers but the
// ClusterTrustBundle publisher (the harness's serving certificate is no
// CA), and a client rate a test's few hundred Pods do not wait on.
func kcmArgs(c *cluster, o kcmOptions, stats string) []string {
	args := []string{
		"--kubeconfig=" + c.Kubeconfig(), "--leader-elect=false", "--secure-port=0",
		"--controllers=*,-kube-apiserver-serving-clustertrustbundle-publisher-controller",
		"--boltinformer-mode=" + o.mode, "--boltinformer-stats=" + stats,
	}
	qps, burst := o.qps, o.burst
	if qps == 0 {
		qps, burst = 200, 400
	}
	args = append(args, fmt.Sprintf("--kube-api-qps=%d", qps), fmt.Sprintf("--kube-api-burst=%d", burst))
	if o.cache != "" {
		args = append(args, "--boltinformer-cache="+o.cache)
	}
	return append(args, o.extra...)
}

// startKCM starts kcm; its output goes to a log file beside the stats.
// Cleanup kills it if the test has not stopped it.
func startKCM(t *testing.T, c *cluster, o kcmOptions) *proc {
	t.Helper()
	dir := t.TempDir()
	k := &proc{log: filepath.Join(dir, "kcm.log"), stats: filepath.Join(dir, "stats.json")}
	f, err := os.Create(k.log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	k.start = time.Now()
	k.p, err = child.Start(kcmBinary, kcmArgs(c, o, k.stats), f, f, os.Environ())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !k.p.Exited() {
			k.p.Kill()
		}
		if d := os.Getenv("BOLTINFORMER_KCM_LOGS"); d != "" {
			// Keep the logs and stats of every run, for debugging.
			base := filepath.Join(d, strings.ReplaceAll(t.Name(), "/", "_")+"-"+k.start.Format("150405.000"))
			for _, f := range []string{k.log, k.stats} {
				if b, err := os.ReadFile(f); err == nil {
					_ = os.WriteFile(base+"-"+filepath.Base(f), b, 0o644)
				}
			}
		}
		if t.Failed() {
			t.Logf("kcm log %s:\n%s", k.log, tailFile(k.log, 30))
		}
	})
	return k
}

// stop stops kcm with SIGTERM (a clean stop: the file is flushed).
func (k *proc) stop(t *testing.T) {
	t.Helper()
	if k.p.Exited() {
		t.Fatalf("kcm exited before it was stopped: %v\n%s", k.p.Err(), tailFile(k.log, 30))
	}
	if err := k.p.Stop(90 * time.Second); err != nil {
		t.Fatalf("kcm did not stop cleanly: %v\n%s", err, tailFile(k.log, 30))
	}
}

// kill is kill -9.
func (k *proc) kill() { k.p.Kill() }

// count is one line of kcm's stats file.
type count struct {
	Requests int64 `json:"requests"`
	Bytes    int64 `json:"bytes"`
}

// statsFile is kcm's --boltinformer-stats file (cmd/kcm/stats.go).
type statsFile struct {
	Mode               string                         `json:"mode"`
	Start              time.Time                      `json:"start"`
	ControllersStarted time.Time                      `json:"controllersStarted"`
	Controllers        int                            `json:"controllers"`
	Requests           map[string]*count              `json:"requests"`
	Informers          map[string]boltinformer.Health `json:"informers"`
}

// readStats reads kcm's stats file (written every second and at exit).
func (k *proc) readStats(t *testing.T) statsFile {
	t.Helper()
	s, err := k.tryStats()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (k *proc) tryStats() (statsFile, error) {
	var s statsFile
	b, err := os.ReadFile(k.stats)
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("%s: %w", k.stats, err)
	}
	return s, nil
}

// freshStats waits until kcm's stats file shows its controllers started
// and every persistent informer fresh (only those named, if any), and
// returns it.
func (k *proc) freshStats(t *testing.T, only ...string) statsFile {
	t.Helper()
	var s statsFile
	converge(t, "kcm's informers fresh", func(context.Context) string {
		var err error
		if s, err = k.tryStats(); err != nil {
			return err.Error()
		}
		if s.ControllersStarted.IsZero() || len(s.Informers) == 0 {
			return "controllers not started"
		}
		var stale []string
		for name, h := range s.Informers {
			if !h.Fresh && (len(only) == 0 || slices.Contains(only, name)) {
				stale = append(stale, name)
			}
		}
		for _, name := range only {
			if _, ok := s.Informers[name]; !ok {
				stale = append(stale, name+" (not made yet)")
			}
		}
		if len(stale) > 0 {
			sort.Strings(stale)
			return "not fresh: " + strings.Join(stale, ", ")
		}
		return ""
	})
	return s
}

// informerLists are the requests of the informers that list every object
// of a resource (a LIST, a WatchList, a metadata-only LIST), by key; not
// the one-object reads of a bookmark freshness (limit=1), the exact
// reads of a partial relist (byname), nor the controllers' own requests.
func (s statsFile) informerLists() map[string]*count {
	out := map[string]*count{}
	for k, c := range s.Requests {
		fields := strings.Fields(k)
		client := fields[len(fields)-1]
		if client != "@shared-informers" && client != "@metadata-informers" && client != "@factory" {
			continue
		}
		if fields[0] == "WATCHLIST" || (fields[0] == "LIST" && !strings.Contains(k, "limit=1") && !strings.Contains(k, "byname")) {
			out[k] = c
		}
	}
	return out
}

// fullLists are informerLists of whole objects (not metadata-only).
func (s statsFile) fullLists() map[string]*count {
	out := map[string]*count{}
	for k, c := range s.informerLists() {
		if !strings.HasPrefix(k, "LIST meta") {
			out[k] = c
		}
	}
	return out
}

// warmInformers counts the persistent informers that resumed their file.
func (s statsFile) warmInformers() (warm, all int) {
	for _, h := range s.Informers {
		all++
		if h.Start == "warm" {
			warm++
		}
	}
	return warm, all
}

// grepFile returns the lines of path that contain s.
func grepFile(path, s string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}

func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// auditEvent is what the tests read of an audit event.
type auditEvent struct {
	Stage     string `json:"stage"`
	Verb      string `json:"verb"`
	UserAgent string `json:"userAgent"`
	ObjectRef *struct {
		Resource  string `json:"resource"`
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
		APIGroup  string `json:"apiGroup"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	ResponseObject json.RawMessage `json:"responseObject"`
}

// readAudit returns the completed requests of the audit log.
func (c *cluster) readAudit(t *testing.T) []auditEvent {
	t.Helper()
	f, err := os.Open(c.audit)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []auditEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e auditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("audit log: %v", err)
		}
		if e.Stage == "ResponseComplete" && e.ObjectRef != nil && e.ResponseStatus != nil {
			out = append(out, e)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// fromKCM tells kcm's requests (user agent "kcm/...") from the test's.
func fromKCM(e auditEvent) bool { return strings.HasPrefix(e.UserAgent, "kcm/") }

// podCreates counts the Pods created, by owner: "deploy/NS/NAME" for a
// ReplicaSet's ("NAME-HASH"), "job/NS/NAME" for a Job's.
func podCreates(t *testing.T, events []auditEvent) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, e := range events {
		if e.Verb != "create" || e.ObjectRef.Resource != "pods" || e.ResponseStatus.Code != 201 {
			continue
		}
		var p corev1.Pod
		if err := json.Unmarshal(e.ResponseObject, &p); err != nil {
			t.Fatalf("audit: created Pod: %v", err)
		}
		out[ownerKey(&p)]++
	}
	return out
}

// ownerKey names p's controller as podCreates does ("" without one).
func ownerKey(p *corev1.Pod) string {
	ref := metav1.GetControllerOf(p)
	switch {
	case ref == nil:
		return ""
	case ref.Kind == "ReplicaSet":
		i := strings.LastIndex(ref.Name, "-")
		if i < 0 {
			return "rs/" + p.Namespace + "/" + ref.Name
		}
		return "deploy/" + p.Namespace + "/" + ref.Name[:i]
	default:
		return strings.ToLower(ref.Kind) + "/" + p.Namespace + "/" + ref.Name
	}
}

// kcmDeletes are the objects kcm deleted: "resource NS/NAME".
func kcmDeletes(events []auditEvent) []string {
	var out []string
	for _, e := range events {
		if (e.Verb == "delete" || e.Verb == "deletecollection") && fromKCM(e) && e.ResponseStatus.Code < 300 {
			r := e.ObjectRef.Resource
			if e.ObjectRef.APIGroup != "" {
				r += "." + e.ObjectRef.APIGroup
			}
			out = append(out, r+" "+e.ObjectRef.Namespace+"/"+e.ObjectRef.Name)
		}
	}
	sort.Strings(out)
	return out
}

// convergeTimeout bounds each wait for the cluster to converge.
const convergeTimeout = 4 * time.Minute

// converge polls check until it returns "" (converged), failing the test
// with its last answer after convergeTimeout. It returns how long it took.
func converge(t *testing.T, what string, check func(ctx context.Context) string) time.Duration {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), convergeTimeout)
	defer cancel()
	last := ""
	for {
		if last = check(ctx); last == "" {
			return time.Since(start)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not converged after %s: %s", what, convergeTimeout, last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// podsByOwner counts the Pods of namespace ns by owner (ownerKey), and
// returns their UIDs by owner.
func (c *cluster) podsByOwner(ctx context.Context, ns string) (map[string]int, map[string][]string, error) {
	pods, err := c.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	n, uids := map[string]int{}, map[string][]string{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil {
			continue // being deleted
		}
		k := ownerKey(p)
		n[k]++
		uids[k] = append(uids[k], string(p.UID))
	}
	return n, uids, nil
}

// expectPods says what differs between the Pods of ns and want (by owner,
// absent owners meaning 0), "" when nothing does.
func (c *cluster) expectPods(ctx context.Context, ns string, want map[string]int) string {
	got, _, err := c.podsByOwner(ctx, ns)
	if err != nil {
		return err.Error()
	}
	var diffs []string
	keys := map[string]bool{}
	for k := range got {
		keys[k] = true
	}
	for k := range want {
		keys[k] = true
	}
	for k := range keys {
		if got[k] != want[k] {
			diffs = append(diffs, fmt.Sprintf("%s: %d Pods, want %d", k, got[k], want[k]))
		}
	}
	sort.Strings(diffs)
	return strings.Join(diffs, "; ")
}

// gone says whether get found nothing ("" when it is gone).
func gone(what string, err error) string {
	switch {
	case apierrors.IsNotFound(err):
		return ""
	case err != nil:
		return what + ": " + err.Error()
	default:
		return what + " still exists"
	}
}

var podTemplate = corev1.PodSpec{
	Containers:                    []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
	TerminationGracePeriodSeconds: ptr.To[int64](0),
}

func deployment(ns, name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: podTemplate},
		},
	}
}

func job(ns, name string, parallelism int32) *batchv1.Job {
	spec := podTemplate
	spec.RestartPolicy = corev1.RestartPolicyNever
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: batchv1.JobSpec{
			Parallelism: ptr.To(parallelism),
			Completions: ptr.To(parallelism * 2),
			Template:    corev1.PodTemplateSpec{Spec: spec},
		},
	}
}

func service(ns, name, app string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": app},
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}
}

// sliceOf says whether the EndpointSlices of service ns/name are as want
// (present or not).
func (c *cluster) slicesOf(ctx context.Context, ns, name string) (int, error) {
	l, err := c.cs.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + name})
	if err != nil {
		return 0, err
	}
	return len(l.Items), nil
}

// must fails t on err.
func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// scale sets a Deployment's replicas.
func (c *cluster) scale(t *testing.T, ns, name string, replicas int32) {
	t.Helper()
	ctx := t.Context()
	s, err := c.cs.AppsV1().Deployments(ns).GetScale(ctx, name, metav1.GetOptions{})
	must(t, err)
	s.Spec.Replicas = replicas
	_, err = c.cs.AppsV1().Deployments(ns).UpdateScale(ctx, name, s, metav1.UpdateOptions{})
	must(t, err)
}

// deleteOnePod deletes one Pod of owner (ownerKey) in ns, returning its
// UID.
func (c *cluster) deleteOnePod(t *testing.T, ns, owner string) string {
	t.Helper()
	ctx := t.Context()
	pods, err := c.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	must(t, err)
	for i := range pods.Items {
		p := &pods.Items[i]
		if ownerKey(p) == owner && p.DeletionTimestamp == nil {
			must(t, c.cs.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}))
			return string(p.UID)
		}
	}
	t.Fatalf("no Pod of %s in %s", owner, ns)
	return ""
}

var background = metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}
