package indexer

import "iter"

// Versions calls f, under the indexer's shared lock, with the
// resourceVersion of the last applied mutation and every cached object's
// key and resourceVersion, read together: what a metadata list is compared
// with. It decodes nothing; f must not call the indexer.
func (x *Indexer) Versions(f func(applied string, objects iter.Seq2[string, string])) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	f(x.rv, func(yield func(string, string) bool) {
		for k, it := range x.items {
			if !yield(k, it.rv) {
				return
			}
		}
	})
}

// VersionOf returns the resourceVersion of the object of key, without
// decoding it.
func (x *Indexer) VersionOf(key string) (string, bool) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	it, ok := x.items[key]
	if !ok {
		return "", false
	}
	return it.rv, true
}
