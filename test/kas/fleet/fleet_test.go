package fleet

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientfeatures "k8s.io/client-go/features"
	clientfeaturestesting "k8s.io/client-go/features/testing"
)

// fleetPods is the Pods of each agent's node: BOLTINFORMER_FLEET_PODS,
// else 30.
func fleetPods(t *testing.T) int {
	if v := os.Getenv("BOLTINFORMER_FLEET_PODS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("BOLTINFORMER_FLEET_PODS=%q: want a positive number", v)
		}
		return n
	}
	return 30
}

// fleetAgents is the fleet's size: BOLTINFORMER_FLEET_AGENTS, else 50 (10
// with -short).
func fleetAgents(t *testing.T) int {
	if v := os.Getenv("BOLTINFORMER_FLEET_AGENTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("BOLTINFORMER_FLEET_AGENTS=%q: want a positive number", v)
		}
		return n
	}
	if testing.Short() {
		return 10
	}
	return 50
}

// TestFleetRestart: N node agents (BOLTINFORMER_FLEET_AGENTS, default 50),
// each watching the 30 Pods (BOLTINFORMER_FLEET_PODS) of its node through a spec.nodeName field
// selector with its own connection and cache file, all restart at once
// against the same apiserver: client-go's informer (WatchList, then LIST),
// and boltinformer warm from its files. It measures, in one run, the LIST
// requests (agents' and the apiserver's count), the response bytes the
// agents read, the time until every agent is synced, and the apiserver's
// CPU during each storm. It asserts what is deterministic: the warm fleet
// makes no LIST, reads a small fraction of the bytes, and converges.
func TestFleetRestart(t *testing.T) {
	n, fleetPodsPerNode := fleetAgents(t), fleetPods(t)
	c := sharedCluster(t)
	ctx := t.Context()
	cs, err := c.Clientset()
	if err != nil {
		t.Fatal(err)
	}
	ns := "fleet"
	node := func(i int) string { return fmt.Sprintf("fleet-node-%04d", i) }
	start := time.Now()
	if err := createPods(ctx, cs, ns, n*fleetPodsPerNode,
		func(i int) string { return fmt.Sprintf("p-%04d-%02d", i/fleetPodsPerNode, i%fleetPodsPerNode) },
		func(i int) string { return node(i / fleetPodsPerNode) }); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d agents: created %d Pods in %s", n, n*fleetPodsPerNode, time.Since(start).Round(time.Millisecond))
	base := c.RESTConfig()
	dir := t.TempDir()
	time.Sleep(5 * time.Second) // let the apiserver settle after the seeding
	idle := idleRate(t, c, 3*time.Second)
	t.Logf("apiserver idle: %.1f ms CPU per second", idle*1000)
	startClientGo := func(i int, m *meter) (*agent, error) {
		return startAgent(base, clientGo, "", nodeSelector(node(i)), "", m)
	}
	startBolt := func(i int, m *meter) (*agent, error) {
		return startAgent(base, bolt, "", nodeSelector(node(i)), cachePath(dir, i), m)
	}
	var results []stormResult

	// The floor: what N new connections with one request cost.
	r, agents := storm(t, c, "connect only (floor)", n, idle, func(_ int, m *meter) (*agent, error) { return startConnectOnly(base, m) })
	stopAll(t, agents)
	results = append(results, r)

	// The agents' first start writes their cache files.
	r, agents = storm(t, c, "boltinformer cold", n, idle, startBolt)
	for i, a := range agents {
		if got := len(a.inf.GetStore().ListKeys()); got != fleetPodsPerNode {
			t.Fatalf("agent %d: %d Pods, want %d", i, got, fleetPodsPerNode)
		}
	}
	stopAll(t, agents)
	results = append(results, r)

	// While the fleet is down, one Pod per node changes.
	if err := parallel(ctx, n, 16, func(ctx context.Context, i int) error {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, fmt.Sprintf("p-%04d-00", i), metav1.GetOptions{})
		if err != nil {
			return err
		}
		p.Labels["gen"] = "1"
		_, err = cs.CoreV1().Pods(ns).Update(ctx, p, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}

	r, agents = storm(t, c, "client-go WatchList", n, idle, startClientGo)
	stopAll(t, agents)
	results = append(results, r)
	t.Run("client-go LIST", func(t *testing.T) {
		clientfeaturestesting.SetFeatureDuringTest(t, clientfeatures.WatchListClient, false)
		r, agents := storm(t, c, "client-go LIST", n, idle, startClientGo)
		stopAll(t, agents)
		results = append(results, r)
	})
	if t.Failed() {
		return
	}

	warm, agents := storm(t, c, "boltinformer warm", n, idle, startBolt)
	results = append(results, warm)
	// Every warm agent catches up with its node's changed Pod.
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "gen=1"})
	if err != nil {
		stopAll(t, agents)
		t.Fatal(err)
	}
	want := map[string]*corev1.Pod{}
	for i := range pods.Items {
		want[pods.Items[i].Spec.NodeName] = &pods.Items[i]
	}
	for i, a := range agents {
		p := want[node(i)]
		ok := p != nil && eventually(30*time.Second, func() bool {
			obj, exists, err := a.inf.GetStore().GetByKey(p.Namespace + "/" + p.Name)
			return err == nil && exists && obj.(*corev1.Pod).ResourceVersion == p.ResourceVersion
		})
		if !ok {
			stopAll(t, agents)
			t.Fatalf("warm agent %d did not catch up with its changed Pod", i)
		}
	}
	stopAll(t, agents)

	for _, r := range results {
		t.Log(r)
	}
	t.Log("\n" + fleetTable(results, fleetPodsPerNode))
	if warm.Warm != n {
		t.Errorf("%d of %d agents started warm", warm.Warm, n)
	}
	if warm.Lists != 0 || warm.ServerLists != 0 {
		t.Errorf("the warm fleet made %d LISTs (apiserver: %.0f), want 0", warm.Lists, warm.ServerLists)
	}
	for _, r := range results[2:4] {
		if warm.Bytes*10 > r.Bytes {
			t.Errorf("the warm fleet read %s, %s read %s: want at least 10x less", mib(warm.Bytes), r.Name, mib(r.Bytes))
		}
	}
}

// fleetTable renders results as the Markdown table of docs/BENCHMARKS.md,
// with ratios to the warm start.
func fleetTable(rs []stormResult, podsPerNode int) string {
	var warm stormResult
	for _, r := range rs {
		if r.Name == "boltinformer warm" {
			warm = r
		}
	}
	ratio := func(a, b float64) string {
		if b <= 0 {
			if a <= 0 {
				return "-"
			}
			return "inf"
		}
		return fmt.Sprintf("%.1fx", a/b)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| start (%d agents x %d Pods) | LIST (agents / apiserver) | WATCH | bytes read | all synced | all watching | apiserver CPU (net of idle) | vs warm: CPU | vs warm: bytes |\n", warm.Agents, podsPerNode)
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		fmt.Fprintf(&b, "| %s | %d / %.0f | %d | %s | %s | %s | %s (%s) | %s | %s |\n",
			r.Name, r.Lists, r.ServerLists, r.Watches, mib(r.Bytes), r.Synced.Round(time.Millisecond), r.Watching.Round(time.Millisecond),
			r.APIServerCPU, r.APIServerCPUNet.Round(10*time.Millisecond),
			ratio(float64(r.APIServerCPUNet), float64(warm.APIServerCPUNet)), ratio(float64(r.Bytes), float64(warm.Bytes)))
	}
	return b.String()
}

// eventually polls cond every 20 ms until it holds or timeout passes.
func eventually(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}
