// Package e2e tests boltinformer end to end against a real kube-apiserver and
// etcd on 127.0.0.1 (the harness in test/kas/harness). Each test asserts on
// the API server's own evidence where it can: the requests the agent made
// (a recording http.RoundTripper on its rest.Config) and the apiserver's
// apiserver_request_total.
//
// One cluster serves the whole package (tests run one at a time, each in
// its own namespace). It runs with a 5 s etcd compaction interval and no
// watch cache for Secrets, so that a saved resourceVersion for Secrets
// becomes too old (410) within seconds; the other resources keep their
// watch cache. Tests that restart the apiserver leave it running.
package e2e
