package boltinformer_test

// Review 5 of commit 18b6ff2 (Fresh at R ahead of the watch skips the
// watch's history up to R; a catch-up is judged at the end of its batch):
// tests staged as in informer_fresh_review23_test.go.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/resourceversion"

	corev1 "k8s.io/api/core/v1"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/internal/testobj"
)

// stageListCatchup stages a warm start of a file at A holding two Pods,
// whose catch-up plan (the metadata list of every object, at once) is
// installed while the resumed watch is held. While down, the first Pod is
// labelled hold=yes, then down() makes its changes; R is the server's
// resourceVersion after them. The watch is then released: the loop is
// held on the first Pod's update until the reflector has taken the event
// at last (so the rest is queued and pops in batches); it returns the
// informer.
func stageListCatchup(t *testing.T, f *cacheFile, down func(keys []string), last func() string, opts *boltinformer.InformerOptions) (*boltinformer.Informer, *stagedServer, *evRecorder) {
	t.Helper()
	keys := sortedKeys(f.src.Objects())
	p := f.src.Objects()[keys[0]].(*corev1.Pod).DeepCopy()
	p.Labels["hold"] = "yes"
	if _, err := f.src.Update(p); err != nil {
		t.Fatal(err)
	}
	down(keys)
	lastRV := last()
	srv := &stagedServer{Source: f.src, held: true}
	release := make(chan struct{})
	if opts == nil {
		opts = &boltinformer.InformerOptions{SyncPolicy: boltinformer.SyncAfterFresh, FreshBookmarkWait: time.Hour, Metadata: srv}
	}
	inf := f.openStaged(srv, holdIndex(release), opts)
	rec := newEvRecorder("handler")
	if _, err := inf.AddEventHandler(rec); err != nil {
		t.Fatal(err)
	}
	stop := runInformer(t, inf)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
		stop()
	})
	waitFor(t, "the catch-up plan", func() bool { return inf.Health().CatchupPending > 0 })
	if inf.Health().Fresh {
		t.Fatal("fresh before the watch was released")
	}
	w := srv.watch(t, 0)
	w.open()
	w.taken(t, lastRV)
	close(release)
	return inf, srv, rec
}

// TestReview5BatchCatchupThenTransientCreate: the catch-up's last wanted
// key comes in a batch followed by the create of an object that was
// created and deleted while down (both before R). Catchup.Observe returns
// "caught up" at once for every later delta once its want map is empty,
// so the create does not re-open the plan: EndBatch marks Fresh at R with
// the transient object in the cache (its version < R), sets skipTo = R,
// and its delete (<= R) is then skipped: the object stays in the cache
// (and the file) for good, while the informer says it equals the server.
// With single deltas (no batch) the create would come after Fresh and be
// skipped too, so this is a batch-only divergence.
func TestReview5BatchCatchupThenTransientCreate(t *testing.T) {
	f := newCacheFile(t, 2)
	ghost := testobj.Pod(50, 3, 2, "")
	ghostKey := ghost.Namespace + "/" + ghost.Name
	inf, _, _ := stageListCatchup(t, f, func(keys []string) {
		p := f.src.Objects()[keys[1]].(*corev1.Pod).DeepCopy()
		p.Labels["changed"] = "yes"
		if _, err := f.src.Update(p); err != nil {
			t.Fatal(err)
		}
		if _, err := f.src.Create(ghost); err != nil {
			t.Fatal(err)
		}
		if err := f.src.Delete(ghostKey); err != nil {
			t.Fatal(err)
		}
	}, f.src.ResourceVersion, nil)
	waitFor(t, "HasSynced", inf.HasSynced)
	// An event past R: the watch has delivered everything up to R.
	after := testobj.Pod(60, 3, 2, "")
	if _, err := f.src.Create(after); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the event past R", func() bool {
		return inf.Health().AppliedResourceVersion == f.src.ResourceVersion()
	})
	h := inf.Health()
	if d := diffObjects(f.src.Objects(), inf.GetStore().List()); d != "" {
		t.Fatalf("fresh at %s; after the watch passed R the cache differs from the server:\n%s", h.FreshResourceVersion, d)
	}
}

// gatedLister holds the metadata lists of every object (not the one-object
// reads) until open is closed.
type gatedLister struct {
	*stagedServer
	open chan struct{}
}

func (g *gatedLister) ListMetadata(ctx context.Context, o metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
	if o.Limit != 1 {
		select {
		case <-g.open:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return g.stagedServer.ListMetadata(ctx, o)
}

// changeLog records what an observer saw.
type changeLog struct {
	mu  sync.Mutex
	chs []boltinformer.Change
}

func (c *changeLog) add(ch boltinformer.Change) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.chs = append(c.chs, ch)
}

func (c *changeLog) list() []boltinformer.Change {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.chs)
}

// TestReview5QueuedBookmarkBehindRMovesTheCacheBack: the metadata list's
// plan is done at once (nothing changed but an object created and deleted
// while down), so the informer is Fresh at R while its watch has applied
// nothing: the indexer is bookmarked to R and observers get a
// ChangeBookmark at R. A bookmark the server sent before R's events (at
// the resume point A, queued in the reflector's FIFO) is then applied as
// is: Skip only looks at object deltas. The indexer's resourceVersion goes
// back from R to A (Health.AppliedResourceVersion, the file, the observers
// after their bookmark at R), while its content stays the server's at R.
func TestReview5QueuedBookmarkBehindRMovesTheCacheBack(t *testing.T) {
	f := newCacheFile(t, 2)
	a := f.src.ResourceVersion()
	srv := &stagedServer{Source: f.src, held: true}
	g := &gatedLister{stagedServer: srv, open: make(chan struct{})}
	ghost := testobj.Pod(50, 3, 2, "")
	ghostKey := ghost.Namespace + "/" + ghost.Name
	srv.onRead = func(n int, read func() (*metav1.PartialObjectMetadataList, error)) (*metav1.PartialObjectMetadataList, error) {
		if n == 1 {
			// The watch has started (held): a bookmark at A goes to it,
			// then the object created and deleted.
			srv.watch(t, 0)
			f.src.Bookmark()
			if _, err := f.src.Create(ghost); err != nil {
				t.Error(err)
			}
			if err := f.src.Delete(ghostKey); err != nil {
				t.Error(err)
			}
			defer close(g.open)
		}
		return read()
	}
	opts := &boltinformer.InformerOptions{SyncPolicy: boltinformer.SyncAfterFresh, FreshBookmarkWait: time.Hour, Metadata: g}
	inf := f.openStaged(srv, podIndexers(), opts)
	var log changeLog
	_, stopObs := inf.Observe(log.add)
	t.Cleanup(stopObs)
	runInformer(t, inf)
	r := ""
	waitFor(t, "Fresh", func() bool { h := inf.Health(); r = h.FreshResourceVersion; return h.Fresh })
	if r != f.src.ResourceVersion() {
		t.Fatalf("fresh at %q, want R %s (the plan done at once)", r, f.src.ResourceVersion())
	}
	w := srv.watch(t, 0)
	w.open()
	w.taken(t, r)
	// A sync point past R: an object created now.
	after := testobj.Pod(60, 3, 2, "")
	if _, err := f.src.Create(after); err != nil {
		t.Fatal(err)
	}
	afterKey := after.Namespace + "/" + after.Name
	waitFor(t, "the observer saw the event past R", func() bool {
		for _, ch := range log.list() {
			if ch.Key == afterKey {
				return true
			}
		}
		return false
	})
	var seq []string
	last := ""
	back := false
	for _, ch := range log.list() {
		seq = append(seq, fmt.Sprintf("%d@%s", ch.Type, ch.ResourceVersion))
		if last != "" && ch.ResourceVersion != "" {
			if c, err := resourceversion.CompareResourceVersion(ch.ResourceVersion, last); err == nil && c < 0 {
				back = true
			}
		}
		if ch.ResourceVersion != "" {
			last = ch.ResourceVersion
		}
	}
	if back {
		t.Fatalf("fresh at R=%s (resumed from A=%s); the observer's changes (type@resourceVersion) went back: %v", r, a, seq)
	}
}

// relistLW is a ListerWatcher over a stagedServer whose lists, once armed,
// answer with the Source's state at listAt (what a kube-apiserver whose
// watch cache lags may answer a list "not older than" an older
// resourceVersion), and whose next failWatch watches fail.
type relistLW struct {
	*stagedServer
	mu        sync.Mutex
	listAt    int64
	failWatch int
	lists     []string
}

func (l *relistLW) List(o metav1.ListOptions) (runtime.Object, error) {
	return l.ListWithContext(context.Background(), o)
}

func (l *relistLW) ListWithContext(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
	l.mu.Lock()
	at := l.listAt
	l.lists = append(l.lists, o.ResourceVersion)
	l.mu.Unlock()
	if at == 0 {
		return l.Source.ListWithContext(ctx, o)
	}
	list := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: strconv.FormatInt(at, 10)}}
	state := l.Source.StateAt(at)
	for _, k := range sortedKeys(state) {
		list.Items = append(list.Items, *state[k].(*corev1.Pod).DeepCopy())
	}
	return list, nil
}

func (l *relistLW) Watch(o metav1.ListOptions) (watch.Interface, error) {
	return l.WatchWithContext(context.Background(), o)
}

func (l *relistLW) WatchWithContext(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	l.mu.Lock()
	fail := l.failWatch > 0
	if fail {
		l.failWatch--
	}
	l.mu.Unlock()
	if fail {
		return nil, errors.New("review5: watch refused")
	}
	return l.stagedServer.WatchWithContext(ctx, o)
}

// TestReview5RelistBehindSkipToDropsEvents: Fresh at R ahead of the watch
// (the plan done at once: only an object created at A+1 and deleted at
// R=A+2 while down) sets skipTo = R. The watch then fails before it
// delivered anything, and the reflector relists "not older than" its own
// last resourceVersion, A: the answer is the server's state at A+1 (the
// object exists; a kube-apiserver whose watch cache lags may answer so).
// Listed does not clear skipTo, so the new watch's delete of the object
// (at R) is skipped as history the cache holds: the object stays in the
// cache, which the informer says is the server's.
func TestReview5RelistBehindSkipToDropsEvents(t *testing.T) {
	f := newCacheFile(t, 2)
	ghost := testobj.Pod(50, 3, 2, "")
	ghostKey := ghost.Namespace + "/" + ghost.Name
	if _, err := f.src.Create(ghost); err != nil {
		t.Fatal(err)
	}
	created := f.src.ResourceVersion()
	if err := f.src.Delete(ghostKey); err != nil {
		t.Fatal(err)
	}
	srv := &stagedServer{Source: f.src, held: true}
	lw := &relistLW{stagedServer: srv}
	db, err := boltinformer.Open(f.path, &boltinformer.Options{Logger: &quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	inf, err := db.NewInformer("pods", lw, &corev1.Pod{}, 0, podIndexers(),
		&boltinformer.InformerOptions{SyncPolicy: boltinformer.SyncAfterFresh, FreshBookmarkWait: time.Hour, Metadata: srv})
	if err != nil {
		t.Fatal(err)
	}
	runInformer(t, inf)
	waitFor(t, "Fresh", inf.HasSynced)
	if h := inf.Health(); h.FreshResourceVersion != f.src.ResourceVersion() {
		t.Fatalf("health %+v, want fresh at R %s ahead of the watch", h, f.src.ResourceVersion())
	}
	at, _ := strconv.ParseInt(created, 10, 64)
	lw.mu.Lock()
	lw.listAt, lw.failWatch = at, 1
	lw.mu.Unlock()
	srv.mu.Lock()
	srv.held = false
	srv.mu.Unlock()
	srv.watch(t, 0).Stop()
	waitFor(t, "the relist", func() bool { return inf.WatchStats().Lists > 0 })
	srv.watch(t, 1)
	after := testobj.Pod(60, 3, 2, "")
	if _, err := f.src.Create(after); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the event past R", func() bool {
		return inf.Health().AppliedResourceVersion == f.src.ResourceVersion()
	})
	if d := diffObjects(f.src.Objects(), inf.GetStore().List()); d != "" {
		lw.mu.Lock()
		lists := lw.lists
		lw.mu.Unlock()
		t.Fatalf("fresh at R; relisted (list resourceVersions asked: %q) at %s; the cache differs from the server:\n%s", lists, created, d)
	}
}
