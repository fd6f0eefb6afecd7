// Package fleet measures restarts against a real kube-apiserver (the
// harness): a fleet of node agents restarting at once (TestFleetRestart)
// and one informer's restart at 10k (100k) objects
// (BenchmarkInformerRestart), client-go's informer (WatchList and LIST)
// side by side with boltinformer. Results are recorded in
// docs/BENCHMARKS.md, "Real API server".
//
// The package starts one cluster, on first use, shared by its tests and
// benchmarks. klog output is discarded unless BOLTINFORMER_FLEET_LOGS is
// set.
package fleet
