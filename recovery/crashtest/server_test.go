package crashtest_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/boltinformer/boltinformer/recovery/crashtest"
)

// The Handler is an API server to client-go: lists with selectors and
// resourceVersions, watches that resume, metadata lists, exact reads,
// errors as Statuses.
func TestHandler(t *testing.T) {
	h := crashtest.NewHistory(3, &crashtest.HistoryOptions{Keys: 20, Namespaces: 2, Nodes: 2})
	pods := h.Source(0, 40)
	cms := crashtest.NewSource(func() runtime.Object { return &corev1.ConfigMapList{} })
	if _, err := cms.Create(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "edge", Name: "cfg", Labels: map[string]string{"app": "a"}}}); err != nil {
		t.Fatal(err)
	}
	handler := crashtest.NewHandler()
	handler.Serve(corev1.SchemeGroupVersion.WithResource("pods"), pods)
	handler.Serve(corev1.SchemeGroupVersion.WithResource("configmaps"), cms)
	srv := httptest.NewServer(handler)
	defer srv.Close()
	cfg := &rest.Config{Host: srv.URL}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	podsAPI := dc.Resource(corev1.SchemeGroupVersion.WithResource("pods"))
	cmAPI := dc.Resource(corev1.SchemeGroupVersion.WithResource("configmaps"))
	ctx := context.Background()

	ns, err := dc.Resource(corev1.SchemeGroupVersion.WithResource("namespaces")).Get(ctx, "kube-system", metav1.GetOptions{})
	if err != nil || ns.GetUID() != "crashtest-cluster" {
		t.Fatalf("kube-system: %v %+v", err, ns)
	}
	list, err := podsAPI.List(ctx, metav1.ListOptions{})
	if err != nil || list.GetResourceVersion() != "40" || len(list.Items) != len(h.StateAt(40)) || list.Items[0].GetKind() != "Pod" {
		t.Fatalf("list: %v: rv %s, %d pods, want %d", err, list.GetResourceVersion(), len(list.Items), len(h.StateAt(40)))
	}
	onNode, err := podsAPI.Namespace("ns-1").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node-1"})
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for _, o := range h.StateAt(40) {
		if p := o.(*corev1.Pod); p.Namespace == "ns-1" && p.Spec.NodeName == "node-1" {
			want++
		}
	}
	if len(onNode.Items) != want || want == 0 {
		t.Fatalf("field selector and namespace: %d pods, want %d", len(onNode.Items), want)
	}
	got, err := cmAPI.Namespace("edge").List(ctx, metav1.ListOptions{LabelSelector: "app=a"})
	if err != nil || len(got.Items) != 1 {
		t.Fatalf("label selector: %v %+v", err, got)
	}
	if got, _ := cmAPI.Namespace("edge").List(ctx, metav1.ListOptions{LabelSelector: "app=b"}); len(got.Items) != 0 {
		t.Fatalf("label selector app=b: %+v", got.Items)
	}
	// Too large a resourceVersion is the apiserver's error.
	if _, err := podsAPI.List(ctx, metav1.ListOptions{ResourceVersion: "99", ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan}); !apierrors.IsTimeout(err) {
		t.Fatalf("too large: %v", err)
	}

	// Metadata lists and exact reads.
	mc, err := metadata.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ml, err := mc.Resource(corev1.SchemeGroupVersion.WithResource("pods")).List(ctx, metav1.ListOptions{})
	if err != nil || len(ml.Items) != len(list.Items) || ml.Items[0].UID == "" {
		t.Fatalf("metadata list: %v %+v", err, ml)
	}
	key := h.Event(10).Key
	nsName, name := key[:4], key[5:]
	exact, err := podsAPI.Namespace(nsName).List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name, ResourceVersion: "10", ResourceVersionMatch: metav1.ResourceVersionMatchExact})
	if err != nil || len(exact.Items) != 1 || exact.Items[0].GetResourceVersion() != "10" {
		t.Fatalf("exact read of %s at 10: %v %+v", key, err, exact)
	}

	// A watch from a resourceVersion replays what came after it, then
	// streams.
	w, err := podsAPI.Watch(ctx, metav1.ListOptions{ResourceVersion: "38"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for _, e := range h.Events(40, 41) {
		if err := pods.Apply(e); err != nil {
			t.Fatal(err)
		}
	}
	timeout := time.NewTimer(time.Minute) // a bound against a hang
	defer timeout.Stop()
	for want := int64(39); want <= 41; want++ {
		select {
		case e := <-w.ResultChan():
			if e.Type == watch.Error {
				t.Fatalf("watch error %+v", e.Object)
			}
			rv, _ := strconv.ParseInt(e.Object.(*unstructured.Unstructured).GetResourceVersion(), 10, 64)
			if rv != want {
				t.Fatalf("watch event at %d, want %d", rv, want)
			}
		case <-timeout.C:
			t.Fatalf("no watch event %d", want)
		}
	}
	// Compacted: the watch gets 410 as an ERROR event.
	pods.Compact()
	w2, err := podsAPI.Watch(ctx, metav1.ListOptions{ResourceVersion: "20"})
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Stop()
	select {
	case e := <-w2.ResultChan():
		if e.Type != watch.Error || apierrors.FromObject(e.Object).(apierrors.APIStatus).Status().Code != 410 {
			t.Fatalf("watch from a compacted resourceVersion: %s %+v", e.Type, e.Object)
		}
	case <-timeout.C:
		t.Fatal("no 410")
	}
	// Down: 503.
	pods.SetDown(true)
	if _, err := podsAPI.List(ctx, metav1.ListOptions{}); !apierrors.IsServiceUnavailable(err) {
		t.Fatalf("down: %v", err)
	}
}

// Metadata-only requests get metadata only, as from kube-apiserver: a
// watch's events carry PartialObjectMetadata (no spec), and an exact read
// one PartialObjectMetadata at that resourceVersion.
func TestHandlerMetadataOnly(t *testing.T) {
	h := crashtest.NewHistory(5, &crashtest.HistoryOptions{Keys: 10, Namespaces: 1, Nodes: 1})
	pods := h.Source(0, 20)
	handler := crashtest.NewHandler()
	handler.Serve(corev1.SchemeGroupVersion.WithResource("pods"), pods)
	srv := httptest.NewServer(handler)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a bound against a hang
	defer cancel()

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/api/v1/pods?watch=true&resourceVersion=19", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadBytes('\n')
	if err != nil {
		t.Fatal(err)
	}
	var e metav1.WatchEvent
	if err := json.Unmarshal(line, &e); err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := json.Unmarshal(e.Object.Raw, &obj); err != nil {
		t.Fatal(err)
	}
	if obj["kind"] != "PartialObjectMetadata" || obj["spec"] != nil || obj["metadata"] == nil {
		t.Fatalf("metadata-only watch event %s: %s", e.Type, e.Object.Raw)
	}

	mc, err := metadata.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	key := h.Event(10).Key
	ns, name, _ := strings.Cut(key, "/")
	exact, err := mc.Resource(corev1.SchemeGroupVersion.WithResource("pods")).Namespace(ns).List(ctx, metav1.ListOptions{
		FieldSelector: "metadata.name=" + name, ResourceVersion: "10", ResourceVersionMatch: metav1.ResourceVersionMatchExact,
	})
	if err != nil || len(exact.Items) != 1 || exact.Items[0].ResourceVersion != "10" || exact.Items[0].Name != name {
		t.Fatalf("metadata exact read of %s at 10: %v %+v", key, err, exact)
	}
}
