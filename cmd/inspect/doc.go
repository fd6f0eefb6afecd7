// Command inspect looks into a boltinformer cache file offline, like
// kubectl looks into a cluster: what each informer had cached, single
// objects, index buckets, consistency, bbolt statistics, exports and
// compacted copies. It opens the file read-only (a shared lock, given up
// after --timeout when the agent holds the file) and never writes to it,
// but for two verbs: compact writes a new file, and drop removes
// informers from the file itself (with the agent stopped). See README.md.
package main
