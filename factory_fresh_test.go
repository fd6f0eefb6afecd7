package boltinformer_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/recovery/crashtest"
)

// metadataRequests records the metadata-only list requests an HTTP
// handler serves, by their limit parameter.
type metadataRequests struct {
	next http.Handler
	mu   sync.Mutex
	// limits are the limit parameters of the metadata lists, in order.
	limits []string
}

func (m *metadataRequests) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.Contains(r.Header.Get("Accept"), "as=PartialObjectMetadataList") {
		m.mu.Lock()
		m.limits = append(m.limits, r.URL.Query().Get("limit"))
		m.mu.Unlock()
	}
	m.next.ServeHTTP(w, r)
}

// has reports whether a metadata list with this limit was served since
// the last take.
func (m *metadataRequests) has(limit string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Contains(m.limits, limit)
}

func (m *metadataRequests) take() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := m.limits
	m.limits = nil
	return out
}

// TestFactoryFreshByBookmarkByDefault: a Factory's informers with
// SyncAfterFresh are fresh by a bookmark (DefaultFactoryFreshBookmarkWait):
// a warm start reads one object's metadata (limit=1), and lists the
// metadata of every object beside it only when the cache is small
// (DefaultFreshListMax; FreshListMax < 0: never); FreshBookmarkWait < 0
// lists every object's metadata only.
func TestFactoryFreshByBookmarkByDefault(t *testing.T) {
	src := podSource(t, 20)
	handler := crashtest.NewHandler()
	handler.Serve(corev1.SchemeGroupVersion.WithResource("pods"), src)
	rec := &metadataRequests{next: handler}
	srv := httptest.NewServer(rec)
	defer srv.Close()
	path := filepath.Join(t.TempDir(), "cache.db")
	start := func(wait time.Duration, listMax int, wantList bool) []string {
		t.Helper()
		db, err := boltinformer.Open(path, &boltinformer.Options{Logger: &quietLogger, NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = db.Close() }()
		f, err := boltinformer.NewFactory(db, &rest.Config{Host: srv.URL}, &boltinformer.FactoryOptions{
			Informer: boltinformer.InformerOptions{SyncPolicy: boltinformer.SyncAfterFresh, FreshBookmarkWait: wait, FreshListMax: listMax},
		})
		if err != nil {
			t.Fatal(err)
		}
		inf, err := f.PersistentInformer(&corev1.Pod{})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a bound against a hang
		defer cancel()
		rec.take()
		f.StartWithContext(ctx)
		defer f.Shutdown()
		defer cancel()
		for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
			if !ok {
				t.Fatalf("%v did not sync", typ)
			}
		}
		if h := inf.Health(); !h.Fresh || h.FreshResourceVersion != src.ResourceVersion() {
			t.Fatalf("health at sync: %+v (server at %s)", h, src.ResourceVersion())
		}
		if wantList {
			// Made at once, beside the read that may tell first.
			waitFor(t, "the list of every object's metadata", func() bool { return rec.has("") })
		}
		return rec.take()
	}
	start(0, 0, false) // cold: fills the file
	if got := start(0, -1, false); len(got) == 0 || strings.Join(got, ",") != strings.Repeat("1,", len(got)-1)+"1" {
		t.Fatalf("warm start by a bookmark only: metadata lists with limits %q, want one-object reads only", got)
	}
	if got := start(0, 0, true); !slices.Contains(got, "") {
		t.Fatalf("warm start by default, 20 objects: metadata lists with limits %q, want a list of every object (beside one-object reads until it tells)", got)
	}
	if got := start(-1, 0, true); len(got) != 1 || got[0] != "" {
		t.Fatalf("warm start with FreshBookmarkWait < 0: metadata lists with limits %q, want one list of every object", got)
	}
}
