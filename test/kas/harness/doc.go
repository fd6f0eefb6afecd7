// Package harness starts a real kube-apiserver and etcd on 127.0.0.1 for
// boltinformer's end-to-end tests and benchmarks.
//
// Start builds the kas binary (or reuses the cached one, see build.sh), runs
// `kas etcd` and `kas apiserver` as subprocesses and returns once /readyz
// answers. The apiserver can be stopped and started again while etcd keeps its
// data, so clients see a server restart with the same address, credentials and
// resourceVersions. Every process dies with the test: Start registers Stop with
// t.Cleanup, and the subprocesses get SIGKILL if the test process itself dies.
//
// A cold build of kas takes minutes; run test/kas/build.sh first (as .ci/run
// does) or give `go test` a -timeout above 10m.
package harness
