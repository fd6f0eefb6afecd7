// Command demo shows boltinformer's warm restart against a real
// kube-apiserver: it starts etcd and kube-apiserver on 127.0.0.1 (the
// harness), seeds Pods, ConfigMaps and Secrets in namespace "edge", builds
// examples/edge-agent, runs it cold, changes objects while it is down, runs
// it again warm, and prints both starts side by side. Everything it starts
// is stopped before it exits.
//
// Run it with ./demo.sh from the repository root (which builds the
// apiserver binary and sets KAS_BINARY), or:
//
//	KAS_BINARY=$(test/kas/build.sh) GOWORK=off go -C test/kas run ./cmd/demo [-pods 2000]
package main
