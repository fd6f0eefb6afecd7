package indexer

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer/store"
)

// Kept deletes (format version 5, docs/FORMAT.md section 7b): while a
// checkpoint names the informer, each delete it commits also keeps the
// object's last state, at the delete's resourceVersion, so that a consumer
// resuming from a position behind it hears of it (Deletes).

// KeepDeletes makes the indexer keep every delete from now on. The first
// call of an indexer that kept none records its resourceVersion as the
// point from which deletes are kept (DeletesFrom).
func (x *Indexer) KeepDeletes() {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.keepDeletes {
		return
	}
	x.keepDeletes = true
	// synced: a list is applied (a cold start's, whose reset may not be
	// committed yet: its tombstones are written after the reset drops the
	// old ones, in the same batch).
	if x.deletesFrom == "" && x.synced {
		x.deletesFrom = x.rv
		x.stateDirty = true
	}
}

// DeletesFrom returns the resourceVersion from which every delete is kept
// ("" when none are): a position behind it cannot be served by Deletes.
func (x *Indexer) DeletesFrom() string {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.deletesFrom
}

// PruneDeletes removes, with the next commit, the kept deletes at or
// before resourceVersion rv: every consumer is past them.
func (x *Indexer) PruneDeletes(rv string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if rv == "" || rv == x.pruned {
		return
	}
	x.prune = rv
	x.stateDirty = true
}

// tombstoneLocked returns the object to keep for the delete of key: final
// (the delete's last state, whose resourceVersion is the delete's) or, for
// a list that no longer has the key (final nil), the cached object at the
// list's resourceVersion rv. nil when deletes are not kept. Caller holds
// mu.
func (x *Indexer) tombstoneLocked(key string, final any, rv string) any {
	if !x.keepDeletes {
		return nil
	}
	if t, ok := final.(cache.DeletedFinalStateUnknown); ok {
		final = t.Obj
	}
	if final != nil {
		return final
	}
	obj, _, err := x.fetchLocked(key)
	if err != nil || obj == nil {
		return nil
	}
	ro, ok := obj.(runtime.Object)
	if !ok {
		return nil
	}
	c := ro.DeepCopyObject() // cached objects are shared: never changed
	if m, err := meta.Accessor(c); err == nil {
		m.SetResourceVersion(rv)
	}
	return c
}

// Deletes returns the last state of every object deleted after
// resourceVersion after: those kept in the file and those applied since
// its last commit, one per key (the latest). It fails with ErrNotKept when
// the deletes after it are not all kept (DeletesFrom is later, or none).
func (x *Indexer) Deletes(after string) ([]any, error) {
	x.mu.RLock()
	from := x.deletesFrom
	mem := map[string]any{}
	for _, ops := range []map[string]*pendingOp{x.inflight, x.pending} {
		for k, op := range ops {
			last := op.tomb
			if op.kind == opDelete {
				last = op.obj
			}
			if last != nil && laterRV(last, after) {
				mem[k] = last
			}
		}
	}
	x.mu.RUnlock()
	if from == "" || (after != "" && laterThan(from, after)) {
		return nil, fmt.Errorf("indexer %q: deletes after %q: %w (kept from %q)", x.name, after, ErrNotKept, from)
	}
	out := make([]any, 0, len(mem))
	err := x.db.View(func(tx *store.Tx) error {
		return tx.ForEachDelete(x.name, func(key string, raw []byte, err error) error {
			if err != nil {
				x.logger.Error(err, "A kept delete in the cache file is damaged: left out")
				return nil
			}
			if _, newer := mem[key]; newer {
				return nil
			}
			obj, err := x.decodeRecord(key, raw)
			if err != nil {
				x.logger.Error(err, "A kept delete in the cache file does not decode: left out", "key", key)
				return nil
			}
			if laterRV(obj, after) {
				out = append(out, obj)
			}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("indexer %q: kept deletes: %w", x.name, err)
	}
	for _, obj := range mem {
		out = append(out, obj)
	}
	return out, nil
}

// laterRV reports whether obj's resourceVersion is after rv (any when rv
// is "", or when they do not compare: a delete not known to be older is
// delivered).
func laterRV(obj any, rv string) bool {
	m, err := meta.Accessor(obj)
	if err != nil || rv == "" {
		return true
	}
	c, err := resourceversion.CompareResourceVersion(m.GetResourceVersion(), rv)
	return err != nil || c > 0
}

// laterThan reports whether resourceVersion a is after b (false when they
// do not compare).
func laterThan(a, b string) bool {
	c, err := resourceversion.CompareResourceVersion(a, b)
	return err == nil && c > 0
}

// pruneFunc returns the store's test for the kept deletes to remove: at
// or before rv.
func pruneFunc(rv string) func(string) bool {
	return func(r string) bool {
		c, err := resourceversion.CompareResourceVersion(r, rv)
		return err == nil && c <= 0
	}
}
