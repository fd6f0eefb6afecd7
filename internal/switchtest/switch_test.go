package switchtest_test

// A program written for client-go's informer factory
// (internal/switchtest/clientgo) runs unchanged but for the line that
// builds the factory (internal/switchtest/persistent) on persistent
// informers, and observes the same objects and events. The real
// kube-apiserver runs the same pair in test/kas/e2e (TestSwitchProgram).

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"

	"github.com/boltinformer/boltinformer"
	clientgoprogram "github.com/boltinformer/boltinformer/internal/switchtest/clientgo"
	persistentprogram "github.com/boltinformer/boltinformer/internal/switchtest/persistent"
	"github.com/boltinformer/boltinformer/store"
)

// The two programs are one program: their sources differ in exactly the
// line that builds the factory.
func TestSwitchIsOneLine(t *testing.T) {
	read := func(p string) []string {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Split(string(b), "\n")
	}
	a, b := read("clientgo/program.go"), read("persistent/program.go")
	if len(a) != len(b) {
		t.Fatalf("clientgo/program.go has %d lines, persistent/program.go %d", len(a), len(b))
	}
	var diffs []int
	for i := range a {
		if a[i] != b[i] {
			diffs = append(diffs, i)
		}
	}
	if len(diffs) != 1 {
		t.Fatalf("the programs differ in %d lines (%v), want 1", len(diffs), diffs)
	}
	i := diffs[0]
	if strings.TrimSpace(a[i]) != "factory := informers.NewSharedInformerFactory(client, 0)" ||
		strings.TrimSpace(b[i]) != "factory := boltinformer.NewSharedInformerFactory(db, client, 0)" {
		t.Fatalf("the line that differs is not the constructor:\n%s\n%s", a[i], b[i])
	}
}

// seed is the cluster both programs start from: Pods and ConfigMaps in
// namespace demo (what the programs report) and in namespace other.
func seed() []runtime.Object {
	pod := func(ns, name string, web bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		if web {
			p.Labels = map[string]string{"app": "web"}
		}
		return p
	}
	return []runtime.Object{
		pod("demo", "p0", true), pod("demo", "p1", false), pod("demo", "p2", true),
		pod("demo", "p3", false), pod("demo", "p4", true), pod("other", "q0", true),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "cm0"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "cm1"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "cm2"}},
	}
}

// Change makes the same changes in namespace ns for both programs: a Pod
// created, one relabeled, one deleted, a ConfigMap created.
func Change(client kubernetes.Interface, ns string) func(context.Context) error {
	return func(ctx context.Context) error {
		pods := client.CoreV1().Pods(ns)
		if _, err := pods.Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "new", Labels: map[string]string{"app": "web"}}}, metav1.CreateOptions{}); err != nil {
			return err
		}
		p1, err := pods.Get(ctx, "p1", metav1.GetOptions{})
		if err != nil {
			return err
		}
		p1 = p1.DeepCopy()
		p1.Labels = map[string]string{"app": "web"}
		if _, err := pods.Update(ctx, p1, metav1.UpdateOptions{}); err != nil {
			return err
		}
		if err := pods.Delete(ctx, "p2", metav1.DeleteOptions{}); err != nil {
			return err
		}
		_, err = client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-new"}}, metav1.CreateOptions{})
		return err
	}
}

// done is when the programs have seen the changes: 6 Pods added at the
// start (both namespaces) and one later, one update, one delete.
func done(o clientgoprogram.Observation) bool {
	return o.Added == 7 && o.Updated == 1 && o.Deleted == 1 && len(o.Pods) == 5 && len(o.ConfigMaps) == 3
}

var want = clientgoprogram.Observation{
	Pods:       []string{"demo/new", "demo/p0", "demo/p1", "demo/p3", "demo/p4"},
	WebPods:    []string{"demo/new", "demo/p0", "demo/p1", "demo/p4"},
	ConfigMaps: []string{"demo/cm-new", "demo/cm0", "demo/cm1"},
	Added:      7, Updated: 1, Deleted: 1,
	Synced: 2,
}

func TestSwitchFakeClientset(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	client := fake.NewClientset(seed()...)
	got, err := clientgoprogram.Run(ctx, client, nil, "demo", Change(client, "demo"), done)
	if err != nil {
		t.Fatalf("client-go's factory: %v (saw %+v)", err, got)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("client-go's factory saw %+v, want %+v", got, want)
	}

	path := filepath.Join(t.TempDir(), "cache.db")
	logger := klog.Background().V(5)
	db, err := boltinformer.Open(path, &boltinformer.Options{Logger: &logger, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	client = fake.NewClientset(seed()...)
	pgot, err := persistentprogram.Run(ctx, client, db, "demo", Change(client, "demo"), func(o persistentprogram.Observation) bool {
		return done(clientgoprogram.Observation(o))
	})
	if err != nil {
		t.Fatalf("boltinformer's factory: %v (saw %+v)", err, pgot)
	}
	if !reflect.DeepEqual(clientgoprogram.Observation(pgot), got) {
		t.Fatalf("boltinformer's factory saw %+v, client-go's %+v", pgot, got)
	}
	// The informers were persistent: the file holds what they saw (all
	// namespaces: the program's factory has no namespace).
	for name, n := range map[string]int64{"v1/pods": 6, "v1/configmaps": 4} {
		var st *store.State
		if err := db.Store().View(func(tx *store.Tx) error {
			var err error
			st, err = tx.State(name)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if st == nil || !st.Synced || st.Objects != n {
			t.Fatalf("the file's %s: %+v, want %d objects, synced", name, st, n)
		}
	}
}
