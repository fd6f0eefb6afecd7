package localapi

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/internal/testobj"
)

// benchPods are n Pods in 100 namespaces on 50 nodes.
func benchPods(n int) []any {
	objs := make([]any, n)
	for i := range n {
		objs[i] = testobj.Pod(i, 100, 50, strconv.Itoa(i+1))
	}
	return objs
}

// BenchmarkList serves LISTs of a 10,000-Pod cache in process (no network):
// the selection, the encoding and the response, as a request costs the
// agent. Compare the side-by-side numbers with kube-apiserver in test/kas.
func BenchmarkList(b *testing.B) {
	logger := klog.Background().V(10)
	h := newHandler(&Options{Logger: &logger})
	objs := benchPods(10000)
	v := newView(DefaultWindowEvents, h.budget)
	v.initLocked(boltinformer.ObservedState{Objects: objs, ResourceVersion: "10000", Synced: true})
	sv := &served{view: v}
	var err error
	sv.res, err = describe(Resource{Informer: "pods"}, "/v1, Resource=pods", &corev1.Pod{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	h.addLocked(sv, nil)
	for _, bc := range []struct{ name, path, accept string }{
		{"all/json", "/api/v1/pods", ""},
		{"all/protobuf", "/api/v1/pods", mediaProtobuf},
		{"namespace/json", "/api/v1/namespaces/ns-7/pods", ""},
		{"namespace/protobuf", "/api/v1/namespaces/ns-7/pods", mediaProtobuf},
		{"namespace/table", "/api/v1/namespaces/ns-7/pods", "application/json;as=Table;v=v1;g=meta.k8s.io"},
		{"label/json", "/api/v1/pods?labelSelector=app%3Dapp-7", ""},
		{"node/json", "/api/v1/pods?fieldSelector=spec.nodeName%3Dnode-7", ""},
		{"page500/json", "/api/v1/pods?limit=500", ""},
		{"metadata/protobuf", "/api/v1/pods?limit=500", mediaProtobuf + ";as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			var bytes int
			for b.Loop() {
				req := httptest.NewRequest(http.MethodGet, bc.path, nil)
				if bc.accept != "" {
					req.Header.Set("Accept", bc.accept)
				}
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatalf("%s: %d %s", bc.path, rec.Code, rec.Body.String())
				}
				bytes = rec.Body.Len()
			}
			b.ReportMetric(float64(bytes), "resp-bytes")
		})
	}
}

// BenchmarkWindowMemory measures what a full window holds: a 10,000-Pod
// view gets WindowEvents updates, each a new version of a Pod (as a watch
// decodes it), and each event's JSON and protobuf encodings are cached (as
// watches in both formats fill them). It reports the heap the window adds
// per event and in all (its previous versions and encodings; the current
// versions are the cache's own).
func BenchmarkWindowMemory(b *testing.B) {
	for _, capacity := range []int{1024, DefaultWindowEvents} {
		b.Run(fmt.Sprintf("events=%d", capacity), func(b *testing.B) {
			for b.Loop() {
				objs := benchPods(10000)
				v := newView(capacity, nil)
				v.initLocked(boltinformer.ObservedState{Objects: objs, ResourceVersion: "10000", Synced: true})
				before := heap()
				rv := 10000
				for i := range capacity {
					rv++
					p := objs[i%len(objs)].(*corev1.Pod).DeepCopy()
					p.ResourceVersion = strconv.Itoa(rv)
					v.apply(boltinformer.Change{Type: boltinformer.ChangeUpsert, Key: p.Namespace + "/" + p.Name, Object: p, ResourceVersion: p.ResourceVersion})
				}
				// The first versions are garbage but for the window's
				// previous objects: measure with the encodings too.
				objs = nil
				withObjects := heap() - before
				var buf bytes.Buffer
				v.mu.RLock()
				events := v.eventsLocked(nil, v.first, capacity)
				v.mu.RUnlock()
				for _, e := range events {
					for _, f := range []format{formatJSON, formatProtobuf} {
						buf.Reset()
						if err := encodeObject(&buf, f, withKind(e.obj.obj, corev1.SchemeGroupVersion.WithKind("Pod"))); err != nil {
							b.Fatal(err)
						}
						c := bytes.Clone(buf.Bytes())
						e.enc[f].Store(&c)
					}
				}
				events = nil
				withEncodings := heap() - before
				b.ReportMetric(float64(withObjects)/float64(capacity), "B/event")
				b.ReportMetric(float64(withEncodings)/float64(capacity), "B/event-encoded")
				b.ReportMetric(float64(withEncodings)/(1<<20), "MiB-window-encoded")
				runtime.KeepAlive(v)
			}
		})
	}
}

func heap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
