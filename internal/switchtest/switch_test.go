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
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/internal/switchtest"
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

func TestSwitchFakeClientset(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a bound against a hang
	defer cancel()
	path := filepath.Join(t.TempDir(), "cache.db")
	logger := klog.Background().V(5)
	db, err := boltinformer.Open(path, &boltinformer.Options{Logger: &logger, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	client := fake.NewClientset(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "q0"}})
	if err := switchtest.Create(ctx, client, "demo"); err != nil {
		t.Fatal(err)
	}
	clientGo, persistent, err := switchtest.RunBoth(ctx, client, db, "demo")
	if err != nil {
		t.Fatal(err)
	}
	if got := switchtest.WithoutResourceVersions(clientGo); !reflect.DeepEqual(got, switchtest.Want) {
		t.Fatalf("client-go's factory saw %+v, want %+v", got, switchtest.Want)
	}
	if !reflect.DeepEqual(persistent, clientGo) {
		t.Fatalf("boltinformer's factory saw %+v, client-go's %+v", persistent, clientGo)
	}
	// The informers were persistent: the file holds what they saw (all
	// namespaces: the program's factory has none).
	for name, n := range map[string]int64{"v1/pods": 6, "v1/configmaps": 3} {
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
