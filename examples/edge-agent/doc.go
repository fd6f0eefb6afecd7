// Command edge-agent is an example node agent built on boltinformer: it
// watches the Pods bound to its node, and the ConfigMaps and Secrets of a
// namespace, from a cache file that survives restarts. On a warm start its
// listers answer from disk before any list or watch returns (after the
// factory's one cluster-identity request, which gives up after 2 s when
// the network does not answer), it resumes the watch from the saved
// resourceVersion instead of relisting, and it works with the API server
// unreachable.
//
// It serves /metrics (Prometheus), /healthz and a small /status page on a
// loopback address, and with -report prints one JSON line with its start
// timings and the requests it made, for the demo (test/kas/cmd/demo).
//
// SIGTERM or SIGINT (or the end of -duration) stops it: the informers
// stop, the cache file is flushed and closed, and it exits 0, also when
// the stop comes before the caches synced (a cold start against a slow or
// unreachable server), which it says on stderr ("stopped before the caches
// synced", with the cause and the informers not synced). It exits 1 on an
// error (the kubeconfig, the cache file, -listen).
package main
