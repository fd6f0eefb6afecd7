// Package testobj builds realistic Kubernetes objects for tests and
// benchmarks: deterministic for a given index, about 2 KB of protobuf per
// Pod, with the fields that are hard to round-trip (quantities, times,
// int-or-string, owner references). It is for tests, benchmarks and the
// test kit only: the library itself never builds objects.
package testobj
