// Package kcm holds the end-to-end tests and the benchmark of
// kube-controller-manager on boltinformer's persistent informers (the kcm
// binary of cmd/kcm) against the real kube-apiserver of the harness.
//
// They build kcm (kasbuild.BuildKCM: minutes the first time, then cached)
// and run only when asked: BOLTINFORMER_KCM=1 for the tests (`make
// test-kcm`), BOLTINFORMER_BENCH_KCM=1 for the benchmark (`make
// bench-kcm`). Without either, the package's tests skip and nothing is
// built.
//
// Pods stay Pending (no kubelet, no scheduler): the tests count them, as
// the ReplicaSet and Job controllers create them and the garbage collector
// and the namespace controller delete them. The apiserver's audit log
// (every Pod created, every object deleted, and by which client) is the
// record the tests check for duplicate Pods and wrong deletions.
package kcm
