package boltinformer_test

// Reviews of Fresh (issue 15): the races between the metadata list, the
// informer loop and the resumed watch.

import (
	"context"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/internal/testobj"
	"github.com/boltinformer/boltinformer/recovery/crashtest"
)

// listThenChange answers the first metadata list, then creates an object
// on the Source and returns only once the informer has applied it: an
// event newer than the list that the informer loop applies between the
// list and the diff (a busy resource).
type listThenChange struct {
	*crashtest.Source
	inf   atomic.Pointer[boltinformer.Informer]
	calls atomic.Int32
	t     *testing.T
}

func (l *listThenChange) ListMetadata(ctx context.Context, o metav1.ListOptions) (*metav1.PartialObjectMetadataList, error) {
	list, err := l.Source.ListMetadata(ctx, o)
	if err != nil || l.calls.Add(1) != 1 {
		return list, err
	}
	p, err := l.Source.Create(testobj.Pod(777, 3, 2, ""))
	if err != nil {
		return nil, err
	}
	key := p.(*corev1.Pod).Namespace + "/" + p.(*corev1.Pod).Name
	waitFor(l.t, "the informer to apply the event after the list", func() bool {
		_, ok, _ := l.inf.Load().GetIndexer().GetByKey(key)
		return ok
	})
	return list, nil
}

// TestRegressionFreshEventAfterListIsNotOtherTimeline: an event newer than
// the metadata list, applied before the diff, is the watch passing the
// list's resourceVersion (fresh), not a server behind the cache: the
// informer took it for a restored cluster and listed every object again.
func TestRegressionFreshEventAfterListIsNotOtherTimeline(t *testing.T) {
	f := newCacheFile(t, 20)
	churn(t, f.src, 2)
	f.src.ResetCalls()
	ml := &listThenChange{Source: f.src, t: t}
	r := f.open(nil, &boltinformer.InformerOptions{SyncPolicy: boltinformer.SyncAfterFresh, Metadata: ml})
	ml.inf.Store(r.inf)
	r.run()
	r.waitSynced()
	r.waitApplied()
	if c := f.src.Calls(); c.Lists != 0 || c.MetadataLists != 1 {
		t.Fatalf("a full LIST (the event after the list taken for another timeline): %v", c.Log)
	}
	if h := r.inf.Health(); !h.Fresh {
		t.Fatalf("health: %+v", h)
	}
}
