// Package fresh decides when a warm-started informer is fresh: when its
// cache equals the server's state at a known resourceVersion R (the moment
// Fresh, docs/ARCHITECTURE.md "Loaded, Fresh, Live").
//
// It owns every way a warm start becomes fresh, and the state each needs:
//   - the server's resourceVersion R, read with one object's metadata (a
//     consistent read) once the resumed watch has started: fresh at once
//     when the cache has applied R, else at the first bookmark or watch
//     event at or after R, when the cache then held the scope's size at R;
//   - the catch-up plan (plan.go): a metadata list of every object diffed
//     against the cache names what the resumed watch must still bring;
//     fresh when it has;
//   - a list from the server applied over the cache (a relist);
//   - the fallback, where none of these can tell: the first watch event or
//     bookmark the informer applies after the disk answer;
//   - the verdict that the server's history is not the cache's (a restored
//     or replaced cluster), answered by a relist of its latest state;
//   - the short watches that make kube-apiserver send a bookmark early, and
//     the metadata lists (one in flight; the last kept for a relist).
//
// The informer calls the Tracker's loop methods (Applied, Bookmark, Listed)
// for every delta it applies, one by one and in order, whether the deltas
// came alone or in a batch, and EndBatch after each batch (a single delta
// is a batch of one), holding the lock that serializes them
// (Options.Lock); the Tracker's Run reads the server and takes that lock
// to compare with the cache. When the informer is made fresh at an R
// ahead of what its watch has applied (a plan done by the metadata list),
// Skip tells it which of the watch's later events are history the cache
// already holds.
//
// It never applies a delta, writes the store, or calls a handler.
package fresh
