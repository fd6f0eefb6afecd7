// Package etcdrun runs a single-member embedded etcd on 127.0.0.1 for the
// harness. Its data directory survives restarts: starting again on the same
// directory keeps the keys and the revision counter, so resourceVersions keep
// growing across restarts of the whole cluster.
package etcdrun
