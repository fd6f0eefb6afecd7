// Package columns holds the table columns of common kinds (Pods, Nodes,
// Services, ...), in the spirit of kubectl's printers: what cmd/inspect
// prints and what the local API (localapi) answers as a metav1.Table, so
// that both show an object the same way. It only formats; it never reads
// a file or serves a request.
package columns
