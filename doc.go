// Package boltinformer assembles a Kubernetes informer whose cache survives
// restarts: a cache.SharedIndexInformer whose Indexer lives in a bbolt
// file, with secondary-index buckets, that warm-restarts from disk, serves
// listers at once (even with the API server unreachable), and resumes the
// watch from the saved resourceVersion instead of relisting.
//
// Open a cache file with Open, then build informers with DB.NewInformer (any
// cache.ListerWatcher) or a Factory (typed and dynamic clients). Close the
// DB after the informers have stopped: it flushes and closes the file.
//
// The root package only assembles: the file is store's, the Indexer is
// indexer's, list/watch is reflector's (over client-go's Reflector),
// handler fan-out is processor's, the warm-or-cold decision is recovery's.
package boltinformer
