package indexer_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer/indexer"
	"github.com/boltinformer/boltinformer/internal/testobj"
	"github.com/boltinformer/boltinformer/store"
)

// informerName is the informer bucket every test indexer uses.
const informerName = "pods"

// ---- index functions ----

// nodeIndexFunc indexes Pods by node; unscheduled Pods and other types have
// no value.
func nodeIndexFunc(obj any) ([]string, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok || p.Spec.NodeName == "" {
		return nil, nil
	}
	return []string{p.Spec.NodeName}, nil
}

// labelPairsIndexFunc returns one value per label ("k=v"): several values,
// or none for an object without labels.
func labelPairsIndexFunc(obj any) ([]string, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, fmt.Errorf("labels index: %w", err)
	}
	out := make([]string, 0, len(m.GetLabels()))
	for k, v := range m.GetLabels() {
		out = append(out, k+"="+v)
	}
	return out, nil
}

// appTwiceIndexFunc returns the app label twice (client-go tolerates
// duplicate values; so must we).
func appTwiceIndexFunc(obj any) ([]string, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, fmt.Errorf("app index: %w", err)
	}
	if app, ok := m.GetLabels()["app"]; ok {
		return []string{app, app}, nil
	}
	return nil, nil
}

// noValuesIndexFunc never returns a value.
func noValuesIndexFunc(any) ([]string, error) { return nil, nil }

// phaseIndexFunc indexes Pods by phase (added later with AddIndexers).
func phaseIndexFunc(obj any) ([]string, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, nil
	}
	return []string{string(p.Status.Phase)}, nil
}

// tierIndexFunc indexes by the tier label.
func tierIndexFunc(obj any) ([]string, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, fmt.Errorf("tier index: %w", err)
	}
	if v, ok := m.GetLabels()["tier"]; ok {
		return []string{v}, nil
	}
	return nil, nil
}

// testIndexers returns a fresh set of index functions (client-go's indexer
// keeps and mutates the map it is given, so never share one).
func testIndexers() cache.Indexers {
	return cache.Indexers{
		cache.NamespaceIndex: cache.MetaNamespaceIndexFunc,
		"node":               nodeIndexFunc,
		"labels":             labelPairsIndexFunc,
		"app-twice":          appTwiceIndexFunc,
		"none":               noValuesIndexFunc,
	}
}

func copyIndexers(in cache.Indexers) cache.Indexers {
	out := cache.Indexers{}
	for k, v := range in {
		out[k] = v
	}
	return out
}

// ---- objects ----

type podOpt func(*corev1.Pod)

func onNode(n string) podOpt { return func(p *corev1.Pod) { p.Spec.NodeName = n } }

// labeled replaces the labels with the given key, value pairs.
func labeled(kv ...string) podOpt {
	return func(p *corev1.Pod) {
		p.Labels = nil
		for i := 0; i+1 < len(kv); i += 2 {
			if p.Labels == nil {
				p.Labels = map[string]string{}
			}
			p.Labels[kv[i]] = kv[i+1]
		}
	}
}

func inPhase(ph corev1.PodPhase) podOpt { return func(p *corev1.Pod) { p.Status.Phase = ph } }

func hashOf(s string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s))
	return int(h.Sum32() % 1000000)
}

// newPod returns a realistic Pod (testobj) named ns/name (ns "" makes it
// cluster-scoped for the key function) with resourceVersion rv, a UID
// derived from its name, on node-a, labelled app=web,tier=front, then
// modified by opts. Content must only change together with rv (the
// indexer, like any informer, treats an unchanged resourceVersion as
// unchanged content).
func newPod(ns, name, rv string, opts ...podOpt) *corev1.Pod {
	p := testobj.Pod(hashOf(ns+"/"+name), 1, 1, rv)
	p.Namespace, p.Name = ns, name
	p.UID = types.UID("uid-" + ns + "-" + name)
	p.Spec.NodeName = "node-a"
	p.Labels = map[string]string{"app": "web", "tier": "front"}
	for _, o := range opts {
		o(p)
	}
	return p
}

// newNode returns a cluster-scoped Node with the given labels (pairs).
func newNode(name, rv string, kv ...string) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-node-" + name), ResourceVersion: rv},
		Spec:       corev1.NodeSpec{PodCIDR: "10.244.0.0/24", ProviderID: "test://" + name},
		Status: corev1.NodeStatus{
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}},
		},
	}
	for i := 0; i+1 < len(kv); i += 2 {
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		n.Labels[kv[i]] = kv[i+1]
	}
	return n
}

func keyOf(obj any) string {
	k, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		panic(err)
	}
	return k
}

// ---- the indexer under test ----

// subjectConfig configures a subject; the zero value is a Full indexer of
// Pods with its own committer.
type subjectConfig struct {
	mode      indexer.Mode
	cacheSize int
	example   runtime.Object
	dbOpts    *store.Options
	committer *store.CommitterOptions
	// shared, when set, is used as the indexer's committer (the test drives
	// it with Flush; nothing runs in the background).
	shared func(*store.DB) *store.Committer
	// verifyRecords: a Full warm load reads the records, not the envelope
	// snapshot the last Close wrote.
	verifyRecords bool
}

// subject is one of our indexers with its file, which it can close and
// reopen.
type subject struct {
	tb   testing.TB
	cfg  subjectConfig
	path string
	db   *store.DB
	x    *indexer.Indexer
	// reopens counts how often the file was reopened.
	reopens int
}

func newSubject(tb testing.TB, cfg subjectConfig, indexers cache.Indexers) *subject {
	tb.Helper()
	if cfg.example == nil {
		cfg.example = &corev1.Pod{}
	}
	s := &subject{tb: tb, cfg: cfg, path: filepath.Join(tb.TempDir(), "cache.db")}
	s.open(indexers)
	tb.Cleanup(func() {
		if s.x != nil {
			_ = s.x.Close()
		}
		if s.db != nil {
			_ = s.db.Close()
		}
	})
	return s
}

func (s *subject) open(indexers cache.Indexers) {
	s.tb.Helper()
	db, err := store.Open(s.path, s.cfg.dbOpts)
	if err != nil {
		s.tb.Fatalf("store.Open: %v", err)
	}
	s.db = db
	mustCheck(s.tb, db)
	opts := &indexer.Options{
		Example:          s.cfg.example,
		Mode:             s.cfg.mode,
		CacheSize:        s.cfg.cacheSize,
		CommitterOptions: s.cfg.committer,
		VerifyRecords:    s.cfg.verifyRecords,
	}
	if s.cfg.shared != nil {
		opts.Committer = s.cfg.shared(db)
	}
	x, err := indexer.Open(db, informerName, indexers, opts)
	if err != nil {
		s.tb.Fatalf("indexer.Open: %v", err)
	}
	s.x = x
}

// close flushes and closes the indexer and the file, checking the file.
func (s *subject) close() {
	s.tb.Helper()
	if err := s.x.Close(); err != nil {
		s.tb.Fatalf("indexer.Close: %v", err)
	}
	s.x = nil
	mustCheck(s.tb, s.db)
	if err := s.db.Close(); err != nil {
		s.tb.Fatalf("db.Close: %v", err)
	}
	s.db = nil
}

// reopen closes everything and opens the file again with the indexer's
// current index functions.
func (s *subject) reopen() { s.reopenWith(s.x.GetIndexers()) }

func (s *subject) reopenWith(indexers cache.Indexers) {
	s.tb.Helper()
	s.close()
	s.open(indexers)
	s.reopens++
}

func (s *subject) flush() {
	s.tb.Helper()
	if err := s.x.Flush(context.Background()); err != nil {
		s.tb.Fatalf("Flush: %v", err)
	}
}

// mustCheck fails unless db.Check finds the file consistent.
func mustCheck(tb testing.TB, db *store.DB) {
	tb.Helper()
	probs, err := db.Check(nil)
	if err != nil {
		tb.Fatalf("db.Check: %v", err)
	}
	if len(probs) > 0 {
		tb.Fatalf("db.Check: %d problems, first: %v", len(probs), probs[0])
	}
}

// ---- comparison ----

// diffOpts tune diffIndexers.
type diffOpts struct {
	// shallow compares the objects returned by index queries by key only
	// (objects are still compared once, through List and GetByKey).
	shallow bool
	// probes are extra objects given to Index.
	probes []any
}

// defaultProbes are Index probes beyond the stored objects: the probe
// generated listers use, a probe with several label values, one with no
// values, and one that is not an object at all.
func defaultProbes() []any {
	return []any{
		&metav1.ObjectMeta{Namespace: "ns-a"},
		&metav1.ObjectMeta{Namespace: "ns-z"},
		&metav1.ObjectMeta{Labels: map[string]string{"app": "web", "tier": "back"}},
		&metav1.ObjectMeta{},
		newPod("ns-a", "probe", "1", onNode(""), labeled()),
		"not an object",
	}
}

func sortedCopy(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}

func indexNames(ix cache.Indexers) []string {
	names := make([]string, 0, len(ix))
	for n := range ix {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// byKey maps objects to their keys, failing on duplicates.
func byKey(objs []any) (map[string]any, []string, error) {
	m := make(map[string]any, len(objs))
	keys := make([]string, 0, len(objs))
	for _, o := range objs {
		k, err := cache.MetaNamespaceKeyFunc(o)
		if err != nil {
			return nil, nil, fmt.Errorf("object %T without key: %w", o, err)
		}
		if _, dup := m[k]; dup {
			return nil, nil, fmt.Errorf("key %q returned twice", k)
		}
		m[k] = o
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return m, keys, nil
}

func describe(obj any) string {
	if m, err := meta.Accessor(obj); err == nil {
		return fmt.Sprintf("%T %s/%s rv=%s", obj, m.GetNamespace(), m.GetName(), m.GetResourceVersion())
	}
	return fmt.Sprintf("%T %v", obj, obj)
}

func sameObject(want, got any) error { return (&comparer{}).same(want, got) }

// comparer compares objects semantically, remembering pairs already found
// equal (the same decoded object is returned by List, Get and ByIndex). It
// keeps the pairs alive, so their addresses are not reused meanwhile.
type comparer struct {
	equal map[[2]uintptr][2]any
}

func (c *comparer) same(want, got any) error {
	wv, gv := reflect.ValueOf(want), reflect.ValueOf(got)
	pointers := wv.Kind() == reflect.Pointer && wv.Type() == gv.Type()
	if pointers && wv.Pointer() == gv.Pointer() {
		return nil // the very same object
	}
	var pair [2]uintptr
	if pointers {
		pair = [2]uintptr{wv.Pointer(), gv.Pointer()}
		if _, ok := c.equal[pair]; ok {
			return nil
		}
	}
	if !apiequality.Semantic.DeepEqual(want, got) {
		return fmt.Errorf("want %s, got %s (not semantically equal)", describe(want), describe(got))
	}
	if pointers {
		if c.equal == nil {
			c.equal = map[[2]uintptr][2]any{}
		}
		c.equal[pair] = [2]any{want, got}
	}
	return nil
}

// compareObjects checks that got holds exactly the keys and, unless
// shallow, objects equal to want's.
func (c *comparer) compareObjects(what string, want map[string]any, wantKeys []string, got []any, shallow bool) error {
	gm, gk, err := byKey(got)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if !slices.Equal(wantKeys, gk) {
		return fmt.Errorf("%s: keys: want %v, got %v", what, wantKeys, gk)
	}
	if shallow {
		return nil
	}
	for _, k := range gk {
		if err := c.same(want[k], gm[k]); err != nil {
			return fmt.Errorf("%s: key %q: %w", what, k, err)
		}
	}
	return nil
}

func errorParity(what string, want, got error) error {
	if (want == nil) != (got == nil) {
		return fmt.Errorf("%s: want error %v, got %v", what, want, got)
	}
	return nil
}

// diffIndexers compares every read method of got against want (client-go's
// indexer) and returns the first difference.
func diffIndexers(want, got cache.Indexer, o diffOpts) error {
	c := &comparer{}
	wantKeys, gotKeys := sortedCopy(want.ListKeys()), sortedCopy(got.ListKeys())
	if !slices.Equal(wantKeys, gotKeys) {
		return fmt.Errorf("ListKeys: want %v, got %v", wantKeys, gotKeys)
	}
	wantObjs, wk, err := byKey(want.List())
	if err != nil {
		return fmt.Errorf("reference List: %w", err)
	}
	if !slices.Equal(wk, wantKeys) {
		return fmt.Errorf("reference List keys %v differ from its ListKeys %v", wk, wantKeys)
	}
	if err := c.compareObjects("List", wantObjs, wantKeys, got.List(), false); err != nil {
		return err
	}
	for _, k := range wantKeys {
		g, ok, err := got.GetByKey(k)
		if err != nil || !ok {
			return fmt.Errorf("GetByKey(%q): exists=%v err=%v", k, ok, err)
		}
		if err := c.same(wantObjs[k], g); err != nil {
			return fmt.Errorf("GetByKey(%q): %w", k, err)
		}
		g, ok, err = got.Get(wantObjs[k])
		if err != nil || !ok {
			return fmt.Errorf("Get(%q): exists=%v err=%v", k, ok, err)
		}
		if err := c.same(wantObjs[k], g); err != nil {
			return fmt.Errorf("Get(%q): %w", k, err)
		}
	}
	for _, k := range []string{"ns-z/absent", "absent"} {
		if _, ok, err := got.GetByKey(k); ok || err != nil {
			return fmt.Errorf("GetByKey(%q) of an absent key: exists=%v err=%v", k, ok, err)
		}
	}
	wn, gn := indexNames(want.GetIndexers()), indexNames(got.GetIndexers())
	if !slices.Equal(wn, gn) {
		return fmt.Errorf("GetIndexers: want %v, got %v", wn, gn)
	}
	// Stored objects as probes too: a spread sample, as every Index call
	// returns (and in bounded mode decodes) a share of the objects.
	probes := append([]any(nil), o.probes...)
	samples := 8
	if o.shallow {
		samples = 3
	}
	for i := 0; i < len(wantKeys) && samples > 0; i += max(1, len(wantKeys)/samples) {
		probes = append(probes, wantObjs[wantKeys[i]])
	}
	for _, name := range wn {
		wv, gv := sortedCopy(want.ListIndexFuncValues(name)), sortedCopy(got.ListIndexFuncValues(name))
		if !slices.Equal(wv, gv) {
			return fmt.Errorf("ListIndexFuncValues(%q): want %q, got %q", name, wv, gv)
		}
		for _, v := range append(wv, "\x01absent") {
			wik, werr := want.IndexKeys(name, v)
			gik, gerr := got.IndexKeys(name, v)
			if werr != nil || gerr != nil {
				return fmt.Errorf("IndexKeys(%q, %q): errors %v, %v", name, v, werr, gerr)
			}
			if !slices.Equal(wik, gik) {
				return fmt.Errorf("IndexKeys(%q, %q): want %v, got %v", name, v, wik, gik)
			}
			objs, err := got.ByIndex(name, v)
			if err != nil {
				return fmt.Errorf("ByIndex(%q, %q): %w", name, v, err)
			}
			if err := c.compareObjects(fmt.Sprintf("ByIndex(%q, %q)", name, v), wantObjs, sortedCopy(wik), objs, o.shallow); err != nil {
				return err
			}
		}
		for _, p := range probes {
			wl, werr := want.Index(name, p)
			gl, gerr := got.Index(name, p)
			what := fmt.Sprintf("Index(%q, %s)", name, describe(p))
			if err := errorParity(what, werr, gerr); err != nil {
				return err
			}
			if werr != nil {
				continue
			}
			_, wlk, err := byKey(wl)
			if err != nil {
				return fmt.Errorf("reference %s: %w", what, err)
			}
			if err := c.compareObjects(what, wantObjs, wlk, gl, o.shallow); err != nil {
				return err
			}
		}
	}
	const missing = "no-such-index"
	if _, err := got.IndexKeys(missing, "x"); err == nil {
		return errors.New("IndexKeys of a missing index: no error")
	}
	if _, err := got.ByIndex(missing, "x"); err == nil {
		return errors.New("ByIndex of a missing index: no error")
	}
	if _, err := got.Index(missing, &metav1.ObjectMeta{}); err == nil {
		return errors.New("Index of a missing index: no error")
	}
	if v := got.ListIndexFuncValues(missing); len(v) != 0 {
		return fmt.Errorf("ListIndexFuncValues of a missing index: %v", v)
	}
	if w, g := want.LastStoreSyncResourceVersion(), got.LastStoreSyncResourceVersion(); w != g {
		return fmt.Errorf("LastStoreSyncResourceVersion: want %q, got %q", w, g)
	}
	return nil
}

// ---- step results ----

func errResult(err error) string {
	if err == nil {
		return "ok"
	}
	return "error"
}

func txnResult(e *cache.TransactionError) string {
	if e == nil {
		return "ok"
	}
	return fmt.Sprintf("txn error: successful=%v total=%d errors=%d", e.SuccessfulIndices, e.TotalTransactions, len(e.Errors))
}

// initialList is every object InitialList hands over.
func initialList(x *indexer.Indexer) []any {
	var out []any
	x.InitialList(func(objs []any) { out = append(out, objs...) })
	return out
}
