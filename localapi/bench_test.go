package localapi

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

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

// hugeSelector is a label selector of n "!kI" terms (n = 114,746: 921 KB,
// the one of issue 23, finding 5), as a raw query value.
func hugeSelector(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "!k%d", i)
	}
	return b.String()
}

// BenchmarkApplyDuringHugeSelection measures how long the informer's
// observer (view.apply, under the informer's lock) takes while a LIST with
// the 921 KB selector of 114,746 terms selects over 2,000 Pods: it reports
// the apply's duration (apply-ms) and the LIST's (list-ms). Before issue
// 23 the apply waited for the whole selection.
func BenchmarkApplyDuringHugeSelection(b *testing.B) {
	h, v := podsHandler(b, 2000)
	defer h.Close()
	sel := hugeSelector(114746)
	rv := 2000
	var applyTotal, listTotal time.Duration
	runs := 0
	for b.Loop() {
		started := make(chan struct{})
		var once sync.Once
		h.testHookSelecting = func() { once.Do(func() { close(started) }) }
		listDone := make(chan time.Duration, 1)
		go func() {
			req := httptest.NewRequest(http.MethodGet, "/api/v1/pods?labelSelector="+sel, nil)
			rec := httptest.NewRecorder()
			t0 := time.Now()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				b.Errorf("list: %d %.300s", rec.Code, rec.Body.String())
			}
			listDone <- time.Since(t0)
		}()
		<-started
		rv++
		p := testobj.Pod(rv%2000, 100, 50, strconv.Itoa(rv))
		t0 := time.Now()
		v.apply(boltinformer.Change{Type: boltinformer.ChangeUpsert, Key: p.Namespace + "/" + p.Name, Object: p, ResourceVersion: p.ResourceVersion})
		applyTotal += time.Since(t0)
		listTotal += <-listDone
		runs++
	}
	b.ReportMetric(float64(applyTotal.Microseconds())/1000/float64(runs), "apply-ms")
	b.ReportMetric(float64(listTotal.Microseconds())/1000/float64(runs), "list-ms")
}

// BenchmarkApplyAfterSnapshot measures the copy on write a LIST costs the
// informer: an apply after each snapshot copies the view's keys and items
// (the worst case: a LIST between every two changes).
func BenchmarkApplyAfterSnapshot(b *testing.B) {
	for _, n := range []int{10000, 100000} {
		b.Run(fmt.Sprintf("objects=%d", n), func(b *testing.B) {
			v := newView(DefaultWindowEvents, nil)
			v.initLocked(boltinformer.ObservedState{Objects: benchPods(n), ResourceVersion: strconv.Itoa(n), Synced: true})
			rv := n
			b.ReportAllocs()
			for b.Loop() {
				v.mu.RLock()
				v.snapshotLocked(v.next)
				v.mu.RUnlock()
				rv++
				p := testobj.Pod(rv%n, 100, 50, strconv.Itoa(rv))
				v.apply(boltinformer.Change{Type: boltinformer.ChangeUpsert, Key: p.Namespace + "/" + p.Name, Object: p, ResourceVersion: p.ResourceVersion})
			}
		})
	}
}
