package boltinformer_test

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/recovery/crashtest"
	"github.com/boltinformer/boltinformer/store"
)

// FactoryOptions.Scopes: one factory watches the Pods of one node in every
// namespace and the ConfigMaps of one namespace, each informer with its
// own list options in its identity.
func TestFactoryScopes(t *testing.T) {
	h := crashtest.NewHistory(5, &crashtest.HistoryOptions{Keys: 30, Namespaces: 3, Nodes: 2})
	pods := h.Source(0, 60)
	cms := crashtest.NewSource(func() runtime.Object { return &corev1.ConfigMapList{} })
	for _, ns := range []string{"edge", "other"} {
		if _, err := cms.Create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cfg"}}); err != nil {
			t.Fatal(err)
		}
	}
	handler := crashtest.NewHandler()
	handler.Serve(corev1.SchemeGroupVersion.WithResource("pods"), pods)
	handler.Serve(corev1.SchemeGroupVersion.WithResource("configmaps"), cms)
	srv := httptest.NewServer(handler)
	defer srv.Close()

	db, err := boltinformer.Open(filepath.Join(t.TempDir(), "cache.db"), &boltinformer.Options{Logger: &quietLogger, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	f, err := boltinformer.NewFactory(db, &rest.Config{Host: srv.URL}, &boltinformer.FactoryOptions{
		Scopes: map[string]boltinformer.Scope{
			"pods": {TweakListOptions: func(o *metav1.ListOptions) {
				o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", "node-1").String()
			}},
			"configmaps": {Namespace: "edge"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	podInf, err := f.PersistentInformer(&corev1.Pod{})
	if err != nil {
		t.Fatal(err)
	}
	cmInf, err := f.PersistentInformer(&corev1.ConfigMap{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a bound against a hang
	defer cancel()
	f.StartWithContext(ctx)
	defer func() {
		cancel()
		f.Shutdown()
	}()
	for name, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("%v did not sync", name)
		}
	}
	want := 0
	for _, o := range h.StateAt(60) {
		if o.(*corev1.Pod).Spec.NodeName == "node-1" {
			want++
		}
	}
	got := podInf.GetStore().List()
	if len(got) != want || want == 0 {
		t.Fatalf("%d pods, want the %d on node-1", len(got), want)
	}
	for _, o := range got {
		if p := o.(*corev1.Pod); p.Spec.NodeName != "node-1" {
			t.Fatalf("pod %s/%s on %s", p.Namespace, p.Name, p.Spec.NodeName)
		}
	}
	if keys := cmInf.GetStore().ListKeys(); len(keys) != 1 || keys[0] != "edge/cfg" {
		t.Fatalf("configmaps %v, want edge/cfg", keys)
	}
	// Each informer's identity has its own list options.
	if err := db.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	fingerprints := map[string]string{}
	err = db.Store().View(func(tx *store.Tx) error {
		for _, name := range []string{podInf.Name(), cmInf.Name()} {
			st, err := tx.State(name)
			if err != nil {
				return err
			}
			fingerprints[name] = st.ListOptions
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if p, c := fingerprints[podInf.Name()], fingerprints[cmInf.Name()]; p == c || p == "" {
		t.Fatalf("pods and configmaps have the list options fingerprints %q and %q", p, c)
	}
}

func TestFactoryScopesErrors(t *testing.T) {
	for _, tc := range []struct {
		scopes map[string]boltinformer.Scope
		want   string
	}{
		{map[string]boltinformer.Scope{"secrest": {}}, `Scopes["secrest"] can never match a resource`},
		{map[string]boltinformer.Scope{"secrets": {}, "v1/secrets": {Namespace: "x"}}, `Scopes["secrets"] and Scopes["v1/secrets"] name the same resource`},
	} {
		db, err := boltinformer.Open(filepath.Join(t.TempDir(), "cache.db"), &boltinformer.Options{Logger: &quietLogger, NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		_, err = boltinformer.NewFactory(db, &rest.Config{Host: unreachable(t)}, &boltinformer.FactoryOptions{ClusterID: "c", Scopes: tc.scopes})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.scopes, err, tc.want)
		}
		_ = db.Close()
	}
}
