// Package localapi serves a boltinformer cache as a read-only Kubernetes
// API, so that unmodified clients on the node (kubectl, client-go
// informers, clients in other languages) read what an agent's informers
// hold, while the cluster is reachable and while it is not.
//
// It owns: discovery (/api, /apis, group and version resource lists,
// /version); GET, LIST and WATCH of every served informer's resource,
// namespaced and cluster-wide, with label and field selectors,
// limit/continue, JSON, YAML and protobuf, Tables and
// PartialObjectMetadata; the window of recent events that lets a watch
// resume from a resourceVersion (a bounded watch cache, fed by
// boltinformer.Informer.Observe and kept in the cache file by
// Informer.KeepWindow, so that watches resume across restarts); the
// apiserver's error shapes; the listeners (a 0600 Unix socket, 127.0.0.1
// with a bearer token) and a kubeconfig for clients, whose port a
// restart keeps (ListenLocalKubeconfig).
//
// It serves only what the cache file holds: an informer's change reaches
// it once the group commit that wrote it has succeeded (Observe), so no
// client sees a resourceVersion that a crash and a restart of the agent
// take back.
//
// It never writes: every write verb is refused with a 405 Status, and the
// cache file is never touched. What it does not serve says why, in the
// shapes kubectl prints (notserved.go): built-in resources no informer
// serves are in discovery without verbs and answer with a 404 naming what
// is served; OpenAPI is a text/plain 403; SelfSubjectAccessReview and
// SelfSubjectRulesReview answer kubectl auth can-i. It does no admission, no authorization
// beyond the socket's mode or the one bearer token, no conversion between
// versions, and it serves only what the agent caches (an informer limited
// to one node's Pods serves those Pods). Secrets are served only when
// Options.Secrets says so; they are told by what the objects are, not by
// the informer's name. A request never holds the informer up: selections
// run over snapshots, outside the lock the informer's updates take. The
// token, TLS files and socket directory are trusted as ssh trusts its
// files (the user's or root's, written by no one else).
//
// A request wider than what an informer caches (its namespace and
// selectors, from its ListOptions fingerprint) gets a Warning header that
// says the answer is partial (scope.go). The probes and /version need no
// token; responses are gzipped and indented as kube-apiserver's are
// (respond.go).
//
// Two sources: New serves a live DB's informers (the window fills as
// their events arrive); NewStatic serves objects read from a closed file
// (cmd/inspect's `serve`), a snapshot whose watches get bookmarks only.
package localapi
