package boltinformer_test

import (
	"context"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/recovery/crashtest"
)

// countingLimiter is a rate limiter that never waits and counts the
// requests it was asked about.
type countingLimiter struct {
	flowcontrol.RateLimiter
	n atomic.Int64
}

func (c *countingLimiter) TryAccept() bool                { c.n.Add(1); return true }
func (c *countingLimiter) Accept()                        { c.n.Add(1) }
func (c *countingLimiter) Wait(ctx context.Context) error { c.n.Add(1); return nil }
func (c *countingLimiter) QPS() float32                   { return 1000 }
func (c *countingLimiter) Stop()                          {}

// TestRegressionFactoryMetadataClientRateLimit: the factory's own
// metadata client (metadata-only informers, freshness reads) over a
// clientset shares the clientset's rate limiter. It had client-go's
// default of 5 requests per second whatever the clientset's: with
// kube-controller-manager's ~70 informers, each reading one object per
// 3-second watch until fresh, the reads waited 8 s in the client and a
// warm start was fresh after 10 to 18 s.
func TestRegressionFactoryMetadataClientRateLimit(t *testing.T) {
	src := podSource(t, 3)
	handler := crashtest.NewHandler()
	handler.Serve(podsGVR, src)
	srv := httptest.NewServer(handler)
	defer srv.Close()
	limiter := &countingLimiter{}
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL, RateLimiter: limiter})
	if err != nil {
		t.Fatal(err)
	}
	db, _ := openFactoryDB(t)
	f, err := boltinformer.NewFactoryForClient(db, cs, nil)
	if err != nil {
		t.Fatal(err)
	}
	before := limiter.n.Load() // the identity lookup
	md, err := f.MetadataFactory(nil)
	if err != nil {
		t.Fatal(err)
	}
	gi := md.ForResource(podsGVR)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	md.Start(ctx.Done())
	defer md.Shutdown()
	defer cancel()
	if !md.WaitForCacheSync(ctx.Done())[podsGVR] {
		t.Fatal("not synced")
	}
	if n := len(gi.Informer().GetStore().List()); n != 3 {
		t.Fatalf("%d objects, want 3", n)
	}
	if got := limiter.n.Load() - before; got == 0 {
		t.Fatal("the metadata informer's requests did not go through the clientset's rate limiter")
	}
}
