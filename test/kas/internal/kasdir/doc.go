// Package kasdir owns the files of a kas directory: where each one lives, and
// how the credentials the apiserver and its clients share are made. Files that
// exist are reused, so restarting on the same directory keeps the same token,
// keys, serving certificate and (when still free) port, and a kubeconfig
// written before a restart stays valid after it.
//
// Layout of a directory D:
//
//	D/etcd/               etcd data (survives restarts)
//	D/etcd-url            client URL of the running etcd, one line
//	D/kubeconfig          token auth, CA data of D/pki/apiserver.crt
//	D/token.csv           --token-auth-file: one user in group system:masters
//	D/sa.key              service-account signing key (RSA, PEM)
//	D/pki/apiserver.crt   self-signed serving certificate and its CA
//	D/pki/apiserver.key
//	D/secure-port         the apiserver's port on 127.0.0.1, one line
//	D/etcd.log            logs, when the harness or `kas up` runs the processes
//	D/apiserver.log
package kasdir
