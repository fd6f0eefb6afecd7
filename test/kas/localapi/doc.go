// Package localapi tests boltinformer's local API (the library's localapi
// package) against the real kube-apiserver of the harness, with clients
// nobody here wrote: kubectl built from the Kubernetes sources of this
// module (the server's version), the system's kubectl when there is one,
// client-go's informer, and Python's kubernetes client; with the apiserver
// stopped; across agent restarts; and under load, side by side with
// kube-apiserver (BOLTINFORMER_LOCALAPI_LOAD=1 or BOLTINFORMER_HEAVY=1).
//
// The agent is this test binary run as a child process (agentMain), so
// that it can be restarted, and its CPU and memory measured, on its own.
package localapi
