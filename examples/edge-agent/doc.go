// Command edge-agent is an example node agent built on boltinformer, meant
// to be copied: it watches the Pods bound to its node (in every
// namespace), and the ConfigMaps and Secrets of a namespace, from a cache
// file that survives restarts. On a warm start its listers answer from
// disk before any list or watch returns (after the factory's one
// cluster-identity request, which gives up after 2 s when the network
// does not answer), it resumes the watch from the saved resourceVersion
// instead of relisting, and it works with the API server unreachable.
//
// Its informers come from one boltinformer.Factory (FactoryOptions.Scopes
// gives the Pods a spec.nodeName field selector and the ConfigMaps and
// Secrets the namespace). Secrets are encrypted at rest with the keys of
// -key-file, a Kubernetes EncryptionConfiguration (the file kube-apiserver
// takes with --encryption-provider-config, and inspect with --key-file):
// there is no default key, and the agent refuses to start without one
// while it caches Secrets (-secrets=false caches none). A transform drops
// metadata.managedFields before objects are stored (-keep-managed-fields
// keeps them); its TransformID is in each informer's identity, so a file
// written with the other setting is relisted, not resumed.
//
// Every flag, the key file and the kubeconfig are checked before the
// cache file is opened: a bad command line never creates or touches it
// (exit status 2 for a bad flag, 1 for a bad file).
//
// It serves /metrics (Prometheus), /healthz and a small /status page
// (which lists the node's Pods) on -listen, loopback by default; give
// ":9090" to let a Prometheus on the network scrape it.
//
// It serves the node's cache to other programs on the node as a read-only
// Kubernetes API (package localapi, the README's "Local API"): on a Unix
// socket beside the cache file by default (-api-socket; mode 0600, only
// the agent's user may connect, no token; Go clients use
// localapi.UnixConfig), and with -api-listen 127.0.0.1:PORT also with TLS
// and a bearer token on loopback, for kubectl and other languages'
// clients, which read the kubeconfig it writes in -api-dir (beside the
// cache file by default: edge-agent-api/kubeconfig for edge-agent.db).
// Secrets are not served: their requests say so. -api=false turns it off. With -report it
// prints one JSON line with its start timings and the requests it made,
// for the demo (test/kas/cmd/demo).
//
// SIGTERM or SIGINT (or the end of -duration) stops it: the informers
// stop, the cache file is flushed and closed, and it exits 0, also when
// the stop comes before the caches synced (a cold start against a slow or
// unreachable server), which it says on stderr ("stopped before the caches
// synced", with the cause and the informers not synced). It exits 1 on an
// error (the kubeconfig, the key file, the cache file, -listen, the local
// API's socket, directory or address).
//
// Its restart test (restart_test.go) runs agentMain, the wiring main runs,
// in children that recovery/crashtest kills with SIGKILL, against a fake
// API server on 127.0.0.1 (crashtest.Handler) whose history is known.
package main
