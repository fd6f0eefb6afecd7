package localapi_test

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/localapi"
)

// A request wider than what the informer lists (all namespaces, or
// another node, of a cache of one node's Pods) gets a Warning header that
// says the answer is partial, as kube-apiserver warns (kubectl prints it);
// a request within the scope gets none (issue 26 item 7: the answer was
// silently partial).
func TestRegressionPartialAnswerWarns(t *testing.T) {
	src := newPodSource(6)
	db, err := boltinformer.Open(filepath.Join(t.TempDir(), "cache.db"), &boltinformer.Options{NoSync: true, Logger: &quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	inf, err := db.NewInformer("v1/pods", src, &corev1.Pod{}, 0, nil, &boltinformer.InformerOptions{Resource: "/v1, Resource=pods",
		ListOptions: boltinformer.ListOptionsFingerprint("", metav1.ListOptions{FieldSelector: "spec.nodeName=node-1"})})
	if err != nil {
		t.Fatal(err)
	}
	h, err := localapi.New(db, &localapi.Options{Logger: &quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); inf.RunWithContext(ctx) }()
	defer func() { cancel(); <-done }()
	waitFor(t, "the informer to sync", inf.HasSynced)
	cfg := serve(t, h, "")
	waitFor(t, "the local API to serve", func() bool {
		resp, _ := sendGet(t, cfg, "/api/v1/pods", nil)
		return resp.StatusCode == http.StatusOK
	})
	for _, tc := range []struct {
		path string
		warn bool
	}{
		{"/api/v1/pods", true},
		{"/api/v1/namespaces/ns-0/pods", true},
		{"/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-2", true},
		{"/api/v1/pods?watch=1&timeoutSeconds=1", true},
		{"/api/v1/namespaces/ns-0/pods/nosuch", true},
		{"/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-1", false},
		{"/api/v1/namespaces/ns-0/pods?fieldSelector=spec.nodeName%3Dnode-1,metadata.name%3Dx", false},
		{"/api/v1/namespaces/ns-0/pods/pod-000000", false},
	} {
		resp, _ := sendGet(t, cfg, tc.path, nil)
		w := resp.Header.Get("Warning")
		if tc.warn != (w != "") {
			t.Errorf("%s: Warning %q, want one: %t", tc.path, w, tc.warn)
		}
		if tc.warn && (!strings.HasPrefix(w, `299 - "this local API serves only the pods its agent caches (fieldSelector spec.nodeName=node-1)`) || !strings.HasSuffix(w, `"`)) {
			t.Errorf("%s: Warning %q", tc.path, w)
		}
	}
}
