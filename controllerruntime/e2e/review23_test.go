package e2e

// The third independent review (issue 23, item 10), with real managers:
// PartialRelistRatio, log keys, Resumed of a cold start, the relist's log
// line, and informers no longer used.

import (
	"context"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/boltinformer/boltinformer"
	boltcr "github.com/boltinformer/boltinformer/controllerruntime"
)

// logLine is one captured log call.
type logLine struct {
	msg   string
	kv    []any // the logger's values, then the call's
	level int
	err   bool
}

// keys returns l's keys, sorted.
func (l logLine) keys() []string {
	var keys []string
	for i := 0; i+1 < len(l.kv); i += 2 {
		if k, ok := l.kv[i].(string); ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

// value returns the value of key in l (the last one).
func (l logLine) value(key string) (any, bool) {
	var v any
	found := false
	for i := 0; i+1 < len(l.kv); i += 2 {
		if l.kv[i] == key {
			v, found = l.kv[i+1], true
		}
	}
	return v, found
}

// logCapture is a logr.LogSink that records every call, at every level.
type logCapture struct {
	mu     *sync.Mutex
	lines  *[]logLine
	values []any
}

func newLogCapture() (logr.Logger, func() []logLine) {
	c := logCapture{mu: &sync.Mutex{}, lines: &[]logLine{}}
	return logr.New(c), func() []logLine {
		c.mu.Lock()
		defer c.mu.Unlock()
		return slices.Clone(*c.lines)
	}
}

func (c logCapture) Init(logr.RuntimeInfo) {}
func (c logCapture) Enabled(int) bool      { return true }
func (c logCapture) Info(level int, msg string, kv ...any) {
	c.add(logLine{msg: msg, level: level}, kv)
}
func (c logCapture) Error(_ error, msg string, kv ...any) { c.add(logLine{msg: msg, err: true}, kv) }
func (c logCapture) add(l logLine, kv []any) {
	l.kv = append(slices.Clone(c.values), kv...)
	c.mu.Lock()
	*c.lines = append(*c.lines, l)
	c.mu.Unlock()
}
func (c logCapture) WithValues(kv ...any) logr.LogSink {
	c.values = append(slices.Clone(c.values), kv...)
	return c
}
func (c logCapture) WithName(string) logr.LogSink { return c }

// TestRegressionPartialRelistRatio: an operator down while a quarter of
// its ConfigMaps changed, and an apiserver restart (its new watch cache
// answers the resumed watch 410), relists with only what changed when
// its PartialRelistRatio allows it: no ConfigMap listed in full, every
// change reconciled. boltcr could not set the ratio (5%, the library's
// default), so such a restart listed everything. The relist is one log
// line at the default level, and no line carries a key twice.
func TestRegressionPartialRelistRatio(t *testing.T) {
	cs := clientset(t)
	ns := newNamespace(t, cs, "partial-ratio")
	seedSources(t, cs, ns, restartSources)
	p := newProxy(t)
	logger, lines := newLogCapture()
	o := managerOptions{config: p.config(), path: cachePath(t),
		cache: cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}}, // the ratio is of this namespace's ConfigMaps
		bolt:  &boltcr.Options{PartialRelistRatio: 0.5, Logger: &logger}}
	first := startManager(t, o)
	if !eventually(waitTimeout, func() bool { return derivedState(t, cs, ns, restartSources, churn{}) == "" }) {
		t.Fatalf("first run: %s", derivedState(t, cs, ns, restartSources, churn{}))
	}
	first.stop(t)
	// 60 deleted, 60 updated, 60 created of 600 ConfigMaps (sources and
	// their derived objects): 27% changed, above the default 5%.
	c := newChurn(restartSources, 60)
	c.apply(t, cs, ns)
	restartAPIServer(t, false)
	mark := p.mark()
	second := startManager(t, o)
	total := restartSources + len(c.created)
	if !eventually(waitTimeout, func() bool { return derivedState(t, cs, ns, total, c) == "" }) {
		t.Fatalf("after the apiserver restart: %s", derivedState(t, cs, ns, total, c))
	}
	tr := summarize(p.since(mark), "configmaps")
	t.Logf("warm restart after an apiserver restart, 27%% changed: configmaps requests %+v", tr)
	if tr.FullLists != 0 || tr.ExactReads == 0 {
		t.Errorf("want no full list and exact reads of what changed: %+v, %v", tr, p.since(mark))
	}
	var partial int64
	for _, inf := range second.cache.Informers() {
		if inf.Persistent() == nil {
			t.Fatalf("informer %s not persisted: %s", inf.Name(), inf.NotPersisted())
		}
		ws := inf.Persistent().WatchStats()
		partial += ws.PartialRelists
		if ws.Expired == 0 {
			t.Errorf("informer %s got no 410: %+v", inf.Name(), ws)
		}
	}
	if partial != 1 {
		t.Errorf("%d partial relists, want 1", partial)
	}
	second.stop(t)
	var relists []logLine
	for _, l := range lines() {
		if strings.HasPrefix(l.msg, "Relisted") {
			relists = append(relists, l)
		}
		checkKeysOnce(t, l)
	}
	if len(relists) != 1 || relists[0].level != 0 || relists[0].err {
		t.Fatalf("relist lines %+v, want one at the default level", relists)
	}
	if v, _ := relists[0].value("partial"); v != true {
		t.Errorf("relist line %+v, want partial", relists[0])
	}
}

// checkKeysOnce fails the test when l carries a key twice.
func checkKeysOnce(t testing.TB, l logLine) {
	t.Helper()
	keys := l.keys()
	for i := 1; i < len(keys); i++ {
		if keys[i] == keys[i-1] {
			t.Errorf("%q carries the key %q twice: %v", l.msg, keys[i], l.kv)
			return
		}
	}
}

// TestRegressionLogKeysOnceAndColdNotResumed: the lines boltcr and the
// library log for a cold and a warm start of an operator carry each key
// once (boltcr's logger had the key "informer", and the library added it
// again: every line of a persisted informer carried it twice); and a cold
// start's informers say they resumed nothing (WatchStats and Health
// Resumed were true after the cold start's list), a warm start's that
// they resumed.
func TestRegressionLogKeysOnceAndColdNotResumed(t *testing.T) {
	cs := clientset(t)
	ns := newNamespace(t, cs, "log-keys")
	seedSources(t, cs, ns, 20)
	logger, lines := newLogCapture()
	o := managerOptions{config: cluster.RESTConfig(), path: cachePath(t),
		cache: cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
		bolt:  &boltcr.Options{Logger: &logger}}
	var done churn // the sources updated so far
	for i, start := range []string{"cold", "warm"} {
		r := startManager(t, o)
		if !eventually(waitTimeout, func() bool { return derivedState(t, cs, ns, 20, done) == "" }) {
			t.Fatalf("%s run: %s", start, derivedState(t, cs, ns, 20, done))
		}
		// A change, so that each start's watch delivers an event.
		if _, err := cs.CoreV1().ConfigMaps(ns).Update(context.Background(), source(ns, i, 1), metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		done.updated = append(done.updated, i)
		infs := r.cache.Informers()
		if len(infs) == 0 {
			t.Fatal("no informers")
		}
		for _, inf := range infs {
			p := inf.Persistent()
			if p == nil {
				t.Fatalf("informer %s not persisted: %s", inf.Name(), inf.NotPersisted())
			}
			if !eventually(waitTimeout, func() bool {
				h := p.Health()
				return h.Live && h.Fresh && !h.LastWatchEvent.IsZero()
			}) {
				t.Fatalf("%s: informer %s not live: %+v", start, inf.Name(), p.Health())
			}
			h, ws := p.Health(), p.WatchStats()
			if h.Start != start || h.Resumed != (start == "warm") || ws.Resumed != h.Resumed {
				t.Errorf("%s start: informer %s: Health %+v, WatchStats %+v; want resumed only when warm", start, inf.Name(), h, ws)
			}
		}
		r.stop(t)
	}
	seen := map[string]bool{}
	for _, l := range lines() {
		checkKeysOnce(t, l)
		seen[l.msg] = true
	}
	// The lines of each layer: boltcr's informer, the library's informer
	// and its indexer (a close writes its envelope snapshot, or says why
	// not, at V(2)).
	for _, msg := range []string{"Cold start", "Warm start from cache file"} {
		if !seen[msg] {
			t.Errorf("no %q line: the test proves nothing (%v)", msg, keysOf(seen))
		}
	}
}

func keysOf(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestRegressionDropUnusedScopes: a cache over namespaces a and b, then
// over a alone: b's informer stayed in the file for good. With
// DropUnusedAfter, the stop of the cache that no longer uses b drops it
// (its last commit older than the duration), and keeps a's; a later cache
// over both resumes a warm and starts b cold. Without it, b stays.
func TestRegressionDropUnusedScopes(t *testing.T) {
	cs := clientset(t)
	a, b := newNamespace(t, cs, "drop-a"), newNamespace(t, cs, "drop-b")
	seedSources(t, cs, a, 10)
	seedSources(t, cs, b, 10)
	nameA, nameB := "controller-runtime/typed/core/v1/configmaps/"+a, "controller-runtime/typed/core/v1/configmaps/"+b
	both := cache.Options{DefaultNamespaces: map[string]cache.Config{a: {}, b: {}}}
	onlyA := cache.Options{DefaultNamespaces: map[string]cache.Config{a: {}}}
	for _, tc := range []struct {
		name  string
		after time.Duration
		kept  []string
	}{
		{"DropUnusedAfter", time.Nanosecond, []string{nameA}},
		{"kept without it", 0, []string{nameA, nameB}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := cachePath(t)
			bolt := &boltcr.Options{DropUnusedAfter: tc.after}
			r := startManager(t, managerOptions{config: cluster.RESTConfig(), path: path, cache: both, bolt: bolt})
			waitInformers(t, r, 2)
			r.stop(t)
			if got := savedInformers(t, path); !slices.Equal(got, []string{nameA, nameB}) {
				t.Fatalf("after the cache over a and b: %v", got)
			}
			r = startManager(t, managerOptions{config: cluster.RESTConfig(), path: path, cache: onlyA, bolt: bolt})
			waitInformers(t, r, 1)
			r.stop(t)
			if got := savedInformers(t, path); !slices.Equal(got, tc.kept) {
				t.Fatalf("after the cache over a alone: %v, want %v", got, tc.kept)
			}
			r = startManager(t, managerOptions{config: cluster.RESTConfig(), path: path, cache: both, bolt: bolt})
			infs := waitInformers(t, r, 2)
			for name, warm := range map[string]bool{nameA: true, nameB: slices.Contains(tc.kept, nameB)} {
				if d := infs[name].Persistent().Decision(); d.Warm != warm {
					t.Errorf("informer %s: %+v, want warm %v", name, d, warm)
				}
			}
			r.stop(t)
		})
	}
}

// savedInformers returns the names of the informers the file at path
// holds (the manager that used it stopped).
func savedInformers(t testing.TB, path string) []string {
	t.Helper()
	db, err := boltinformer.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	saved, err := db.SavedInformers()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, si := range saved {
		names = append(names, si.Name)
	}
	return names
}
