// Package store owns the boltinformer cache file: opening and closing it (with
// bbolt's file lock and a timeout), the format version and its validation, the
// bucket layout, the msgpack record envelope and state record, and write
// batching (group commit: many mutations of many informers in one bbolt
// transaction with one fsync).
//
// The layout and every record are described in schema.go and, for readers
// who are not reading Go, in docs/FORMAT.md; the two must agree.
//
// Store knows nothing about watches, handlers or the API server: it stores
// opaque, already-encoded object payloads under keys, keeps the secondary
// index buckets of each informer in step with the records in the same
// transaction, and writes the informer's state record (with its
// resourceVersion) in the transaction that writes the objects it describes.
// It never deletes a file; quarantine belongs to the recovery package.
package store
