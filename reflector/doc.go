// Package reflector owns how an informer talks to the API server: it feeds
// client-go's own Reflector (paginated list, watch with bookmarks, 410
// Gone/Expired -> relist, WatchList where the server has it, backoff with
// jitter, the watch error handler) through a ListerWatcher that resumes
// from disk.
//
// On a warm start, the first List is answered from the persisted objects
// with ListMeta.ResourceVersion set to the saved resourceVersion, so the
// Reflector's next request is a WATCH from that resourceVersion and no LIST
// reaches the server when it accepts it. If the server answers 410 (the
// resourceVersion is too old), client-go's Reflector relists from the
// server and the informer diffs the answer against the cache. A warm
// ListerWatcher opts out of WatchList (IsWatchListSemanticsUnSupported), as
// a WatchList cannot start from a saved resourceVersion without
// re-sending every object; cold starts keep WatchList.
//
// It also observes the watch (event counts, last event time, resume
// outcome) for health and metrics. It never writes the store.
package reflector
