package boltinformer_test

// Error texts and log lines that callers match (issue 14, item 9): each is
// compared with client-go's informer on the same calls.

import (
	"context"
	"errors"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/indexer"
)

// logEntry is one captured log call: its message, every key (the
// logger's values' and the call's, sorted), its verbosity (0 for errors)
// and whether it was an error.
type logEntry struct {
	msg   string
	keys  []string
	kv    []any // the logger's values and the call's, in order
	level int
	err   bool
}

// captureSink is a logr.LogSink that records every entry.
type captureSink struct {
	mu      *sync.Mutex
	entries *[]logEntry
	values  []any
}

func newCapture() (klog.Logger, func() []logEntry) {
	s := captureSink{mu: &sync.Mutex{}, entries: &[]logEntry{}}
	return logr.New(s), func() []logEntry {
		s.mu.Lock()
		defer s.mu.Unlock()
		return slices.Clone(*s.entries)
	}
}

func (s captureSink) Init(logr.RuntimeInfo) {}
func (s captureSink) Enabled(int) bool      { return true }
func (s captureSink) Info(level int, msg string, kv ...any) {
	s.record(logEntry{msg: msg, level: level}, kv)
}
func (s captureSink) Error(_ error, msg string, kv ...any) {
	s.record(logEntry{msg: msg, err: true}, kv)
}
func (s captureSink) record(e logEntry, kv []any) {
	var keys []string
	for _, list := range [][]any{s.values, kv} {
		for i := 0; i < len(list); i += 2 {
			keys = append(keys, list[i].(string))
		}
	}
	sort.Strings(keys)
	e.keys = keys
	e.kv = append(slices.Clone(s.values), kv...)
	s.mu.Lock()
	*s.entries = append(*s.entries, e)
	s.mu.Unlock()
}
func (s captureSink) WithValues(kv ...any) logr.LogSink {
	s.values = append(slices.Clone(s.values), kv...)
	return s
}
func (s captureSink) WithName(string) logr.LogSink { return s }

// panicHandler panics on every add.
type panicHandler struct{ calls chan struct{} }

func (h panicHandler) OnAdd(any, bool) {
	h.calls <- struct{}{}
	panic("test handler panic")
}
func (h panicHandler) OnUpdate(_, _ any) {}
func (h panicHandler) OnDelete(any)      {}

// panicKeys runs inf with a handler that panics on its first add (with
// utilruntime.ReallyCrash off) and returns the keys of the "Observed a
// panic" line logged through get.
func panicKeys(t *testing.T, inf cache.SharedIndexInformer, opts cache.HandlerOptions, get func() []logEntry) []string {
	t.Helper()
	h := panicHandler{calls: make(chan struct{}, 100)}
	if _, err := inf.AddEventHandlerWithOptions(h, opts); err != nil {
		t.Fatal(err)
	}
	stop := runInformer(t, inf)
	defer stop()
	<-h.calls
	var keys []string
	waitFor(t, "the panic's log line", func() bool {
		for _, e := range get() {
			if e.msg == "Observed a panic" {
				keys = e.keys
				return true
			}
		}
		return false
	})
	return keys
}

// TestRegressionHandlerPanicLogKeys: a handler panic is logged as
// client-go logs it, with its keys only (no "informer" or "handler" of
// ours), whether the logger comes from HandlerOptions or from the
// informer's options. Not parallel: ReallyCrash is global.
func TestRegressionHandlerPanicLogKeys(t *testing.T) {
	old := utilruntime.ReallyCrash
	utilruntime.ReallyCrash = false
	t.Cleanup(func() { utilruntime.ReallyCrash = old })
	src := podSource(t, 1)

	logger, get := newCapture()
	want := panicKeys(t, cache.NewSharedIndexInformer(src, &corev1.Pod{}, 0, nil), cache.HandlerOptions{Logger: &logger}, get)
	if !slices.Equal(want, []string{"panic", "stacktrace"}) {
		t.Fatalf("client-go's panic line has keys %v; the test expects panic and stacktrace", want)
	}

	logger, get = newCapture()
	inf := newOurs(t, src, &logger)
	if got := panicKeys(t, inf, cache.HandlerOptions{Logger: &logger}, get); !slices.Equal(got, want) {
		t.Errorf("HandlerOptions.Logger: panic line keys %v, want client-go's %v", got, want)
	}
	logger, get = newCapture()
	inf = newOurs(t, src, &logger)
	if got := panicKeys(t, inf, cache.HandlerOptions{}, get); !slices.Equal(got, want) {
		t.Errorf("InformerOptions.Logger: panic line keys %v, want client-go's %v", got, want)
	}
}

// newOurs builds a boltinformer informer on src with logger (nil: quiet).
func newOurs(t *testing.T, src cache.ListerWatcher, logger *klog.Logger) *boltinformer.Informer {
	t.Helper()
	if logger == nil {
		logger = &quietLogger
	}
	db, err := boltinformer.Open(t.TempDir()+"/cache.db", &boltinformer.Options{NoSync: true, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	inf, err := db.NewInformer("pods", src, &corev1.Pod{}, 0, podIndexers(), &boltinformer.InformerOptions{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	return inf
}

// TestRegressionErrorTextsMatchClientGo: the errors of calls made at the
// wrong time have client-go's text, word for word, and still wrap this
// package's sentinels.
func TestRegressionErrorTextsMatchClientGo(t *testing.T) {
	src := podSource(t, 3)
	type result struct{ handler, indexer, transform, watchErr, noIndex, conflict error }
	probe := func(inf cache.SharedIndexInformer) result {
		var r result
		stop := runInformer(t, inf)
		waitFor(t, "sync", inf.HasSynced)
		r.transform = inf.SetTransform(func(o any) (any, error) { return o, nil })
		r.watchErr = inf.SetWatchErrorHandler(func(*cache.Reflector, error) {})
		_, r.noIndex = inf.GetIndexer().ByIndex("nope", "x")
		r.conflict = inf.AddIndexers(podIndexers())
		stop()
		waitFor(t, "stopped", inf.IsStopped)
		_, r.handler = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{})
		r.indexer = inf.AddIndexers(cache.Indexers{"other": cache.MetaNamespaceIndexFunc})
		return r
	}
	want := probe(cache.NewSharedIndexInformer(src, &corev1.Pod{}, 0, podIndexers()))
	got := probe(newOurs(t, src, nil))
	for _, c := range []struct {
		name      string
		want, got error
		sentinel  error
	}{
		{"AddEventHandler after stop", want.handler, got.handler, boltinformer.ErrStopped},
		{"AddIndexers after stop", want.indexer, got.indexer, boltinformer.ErrStopped},
		{"SetTransform after Run", want.transform, got.transform, boltinformer.ErrStarted},
		{"SetWatchErrorHandler after Run", want.watchErr, got.watchErr, boltinformer.ErrStarted},
		{"ByIndex of no index", want.noIndex, got.noIndex, indexer.ErrNoIndex},
		{"AddIndexers of an existing index", want.conflict, got.conflict, indexer.ErrIndexConflict},
	} {
		if c.want == nil || c.got == nil {
			t.Errorf("%s: client-go %v, ours %v; want both errors", c.name, c.want, c.got)
			continue
		}
		if c.got.Error() != c.want.Error() {
			t.Errorf("%s: %q, want client-go's %q", c.name, c.got, c.want)
		}
		if !errors.Is(c.got, c.sentinel) {
			t.Errorf("%s: %v does not wrap %v", c.name, c.got, c.sentinel)
		}
	}
}

// TestRegressionRunTwiceLogsClientGoWarning: a second Run logs client-go's
// warning, through the Run context's logger.
func TestRegressionRunTwiceLogsClientGoWarning(t *testing.T) {
	src := podSource(t, 1)
	for name, inf := range map[string]cache.SharedIndexInformer{
		"client-go": cache.NewSharedIndexInformer(src, &corev1.Pod{}, 0, nil),
		"ours":      newOurs(t, src, nil),
	} {
		runInformer(t, inf)
		waitFor(t, "sync", inf.HasSynced)
		logger, get := newCapture()
		inf.RunWithContext(klog.NewContext(context.Background(), logger))
		var msgs []string
		for _, e := range get() {
			msgs = append(msgs, e.msg)
		}
		if !slices.Equal(msgs, []string{"Warning: the sharedIndexInformer has started, run more than once is not allowed"}) {
			t.Errorf("%s: second Run logged %q", name, msgs)
		}
	}
}

// TestRegressionSetTransformWithoutTransformIDWarns: the file's identity
// covers a transform only through InformerOptions.TransformID, so a
// transform set without one is logged as a warning.
func TestRegressionSetTransformWithoutTransformIDWarns(t *testing.T) {
	warned := func(id string) bool {
		logger, get := newCapture()
		db, err := boltinformer.Open(t.TempDir()+"/cache.db", &boltinformer.Options{NoSync: true, Logger: &logger})
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		inf, err := db.NewInformer("pods", newPodSource(), &corev1.Pod{}, 0, nil, &boltinformer.InformerOptions{TransformID: id})
		if err != nil {
			t.Fatal(err)
		}
		if err := inf.SetTransform(func(o any) (any, error) { return o, nil }); err != nil {
			t.Fatal(err)
		}
		for _, e := range get() {
			if strings.HasPrefix(e.msg, "Warning: SetTransform without InformerOptions.TransformID") {
				return true
			}
		}
		return false
	}
	if !warned("") {
		t.Error("no warning for a transform without TransformID")
	}
	if warned("strip/v1") {
		t.Error("a warning for a transform with a TransformID")
	}
}
