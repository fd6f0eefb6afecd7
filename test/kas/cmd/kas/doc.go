// Command kas runs a real kube-apiserver with embedded etcd on 127.0.0.1, for
// boltinformer's end-to-end tests, benchmarks and demo.
//
//	kas etcd --data-dir D [--url-file F]        embedded etcd, prints its client URL
//	kas apiserver --etcd URL --dir D [flags]    in-process kube-apiserver, prints D/kubeconfig
//	kas up --dir D [flags]                      both; stops cleanly on SIGTERM/SIGINT
//	kas wait --dir D                            waits until D's apiserver is ready
//
// Every listener is on 127.0.0.1. See test/kas/README.md.
package main
