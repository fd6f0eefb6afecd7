package e2e

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/boltinformer/boltinformer"
	boltcr "github.com/boltinformer/boltinformer/controllerruntime"
)

func keyring(id string, fill byte) func(schema.GroupVersionKind) *boltinformer.Keyring {
	return func(gvk schema.GroupVersionKind) *boltinformer.Keyring {
		if gvk.Kind != "ConfigMap" {
			return nil
		}
		return &boltinformer.Keyring{Current: id, Keys: map[string][]byte{id: bytes.Repeat([]byte{fill}, 32)}}
	}
}

// TestKeyringMismatchStopsTheManager: ConfigMaps encrypted with one key,
// then a restart with another key under the same id. controller-runtime's
// NewInformer cannot fail, so the informer runs in memory; the cache's
// Start returns ErrEncryptionKey and the manager stops with it, instead of
// running on without persisting (or over a file it cannot read).
func TestKeyringMismatchStopsTheManager(t *testing.T) {
	cs := clientset(t)
	ns := newNamespace(t, cs, "keyring")
	createConfigMaps(t, cs, ns, 5, nil)
	p := newProxy(t)
	path := cachePath(t)
	s := newSeen()
	o := managerOptions{config: p.config(), path: path, bolt: &boltcr.Options{Keyring: keyring("k1", 1)},
		cache: cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
		setup: func(_ context.Context, r *run) error { return watchController(r, "keyring", &corev1.ConfigMap{}, s) }}
	first := startManager(t, o)
	if !eventually(waitTimeout, func() bool { return len(s.keys()) >= 5 }) {
		t.Fatalf("first run reconciled %v", s.keys())
	}
	first.stop(t)

	o.bolt = &boltcr.Options{Keyring: keyring("k1", 2)}
	second := startManager(t, o)
	var err error
	select {
	case err = <-second.done:
		second.cancel = nil
		second.closeDB(t)
	case <-time.After(waitTimeout):
		t.Fatal("the manager kept running with a keyring that does not open the file")
	}
	if !errors.Is(err, boltinformer.ErrEncryptionKey) {
		t.Fatalf("the manager stopped with %v, want ErrEncryptionKey", err)
	}
}
