// Command inspect looks into a boltinformer cache file offline, like
// kubectl looks into a cluster: what each informer had cached, single
// objects, index buckets, consistency, bbolt statistics, exports and
// compacted copies. It opens the file read-only (a shared lock, given up
// after --timeout when the agent holds the file) and never writes to it;
// only compact writes, to a new file. See README.md.
package main
