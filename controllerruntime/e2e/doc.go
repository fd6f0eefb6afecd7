// Package e2e tests boltcr against the real kube-apiserver of test/kas,
// with real controller-runtime managers: in this process, and as child
// processes (the example operator, killed with SIGKILL; the benchmark's
// operator). It is a module of its own so that neither the library's nor
// boltcr's go.mod requires the harness.
package e2e
