// Package crashtest is a test kit for restart-resilience tests of agents
// built on boltinformer (and of boltinformer itself).
//
// Source is a deterministic, in-memory API server for one resource: a
// cache.ListerWatcher with a full event history, resourceVersions,
// paginated lists, watches that resume from a resourceVersion, bookmarks,
// compaction (a watch from a compacted resourceVersion gets 410 Expired,
// like kube-apiserver), "too large resource version" errors and outages.
// Because its history is known, a test can check a cache against the
// truth at any resourceVersion (Source.StateAt).
//
// It never touches a file and never opens a network connection.
package crashtest
