// Package readyz waits for a kube-apiserver to report ready on /readyz.
package readyz
