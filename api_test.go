package boltinformer

import (
	"testing"

	"github.com/boltinformer/boltinformer/indexer"
	"github.com/boltinformer/boltinformer/recovery"
)

// The root package's copies of the layers' constants (written out so that
// go doc shows their values) are the layers' values.
func TestPublicConstantsMatchTheLayers(t *testing.T) {
	for _, c := range []struct{ root, layer string }{
		{ReasonResumable, recovery.ReasonResumable},
		{ReasonResealed, recovery.ReasonResealed},
		{ReasonNoState, recovery.ReasonNoState},
		{ReasonNotSynced, recovery.ReasonNotSynced},
		{ReasonCluster, recovery.ReasonCluster},
		{ReasonResource, recovery.ReasonResource},
		{ReasonListOptions, recovery.ReasonListOptions},
		{ReasonTransform, recovery.ReasonTransform},
		{ReasonCorrupt, recovery.ReasonCorrupt},
	} {
		if c.root != c.layer {
			t.Errorf("reason %q, recovery's %q", c.root, c.layer)
		}
	}
	if DefaultCacheSize != indexer.DefaultCacheSize {
		t.Errorf("DefaultCacheSize %d, indexer's %d", DefaultCacheSize, indexer.DefaultCacheSize)
	}
	for m, want := range map[MemoryMode]indexer.Mode{FullMemory: indexer.Full, BoundedMemory: indexer.Bounded} {
		if got, err := m.indexerMode(); err != nil || got != want {
			t.Errorf("%v: indexer mode %v, %v; want %v", m, got, err, want)
		}
	}
	if _, err := MemoryMode(7).indexerMode(); err == nil {
		t.Error("MemoryMode(7): no error")
	}
}
