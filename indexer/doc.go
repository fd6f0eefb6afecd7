// Package indexer implements client-go's cache.Indexer (exactly, for the
// client-go version in go.mod) over a boltinformer store: objects in the
// informer's objects bucket, secondary indexes in index buckets kept in
// step in the same transaction, and the resourceVersion of what was applied
// in the state record of that transaction.
//
// Mutations apply to the in-memory view at once and are written behind, in
// batches, by a store.Committer (group commit). Two memory modes: full (every
// decoded object in memory; reads as fast as client-go's indexer) and
// bounded (only keys in memory, plus an LRU of decoded objects; a miss
// decodes from bbolt). Opening a file reads only the record envelopes (keys,
// index values, resourceVersions, all checksummed): a full indexer then
// decodes payloads on first access and in a background fill that it owns
// and stops in Close (lazy.go).
//
// It owns the decoded-object cache and the index functions. It never talks
// to the API server and never mutates an object it was given or returns
// (objects are shared with every reader, as in client-go).
package indexer
