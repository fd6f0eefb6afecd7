// Command kas-build builds (or finds in the cache) a binary of this module
// and prints its path: kas (the default), kcm (kube-controller-manager on
// boltinformer's informers, cmd/kcm) or kubectl. build.sh runs it; the
// harness and the tests call the same code directly.
//
//	kas-build [kas|kcm|kubectl]
package main
