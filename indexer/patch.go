package indexer

import (
	"errors"
	"slices"

	"k8s.io/client-go/tools/cache"
)

// Patch makes the cache the state of a list as of resourceVersion when only
// part of it changed: upserts are stored, the keys of deletes removed, and
// the resourceVersion becomes resourceVersion, under one lock acquisition
// (so in one group commit, with the state record: the file never holds
// half of it). Index function errors are returned, joined, as by
// Replace, after every object is stored; Options.Transform applies, and
// its error refuses the whole patch.
func (x *Indexer) Patch(upserts []any, deletes []string, resourceVersion string) error {
	keys := make([]string, len(upserts))
	if x.transform != nil {
		upserts = slices.Clone(upserts) // the caller's slice is not rewritten
	}
	for i, obj := range upserts {
		key, err := x.keyFunc(obj)
		if err != nil {
			return cache.KeyError{Obj: obj, Err: err}
		}
		keys[i] = key
		if upserts[i], err = x.transformed(obj); err != nil {
			return err
		}
	}
	x.mu.Lock()
	var errs error
	for i, obj := range upserts {
		if err := x.putLocked(keys[i], obj); err != nil {
			errs = errors.Join(errs, err)
		}
	}
	for _, key := range deletes {
		x.deleteLocked(key, nil, resourceVersion)
	}
	x.rv = resourceVersion
	x.synced = true
	x.listed = true
	x.stateDirty = true
	x.mu.Unlock()
	x.committer.Notify(len(upserts) + len(deletes) + 1)
	return errs
}
