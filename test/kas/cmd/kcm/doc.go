//go:build kcm

// Command kcm is kube-controller-manager v1.37.2 (the controllers of
// k8s.io/kubernetes/cmd/kube-controller-manager/app, unchanged) whose shared
// informers are either client-go's (--boltinformer-mode=stock) or
// boltinformer's, persisted in one cache file (--boltinformer-mode=persistent,
// --boltinformer-cache FILE): the typed SharedInformerFactory every
// controller uses and the metadata informer factory of the garbage collector
// and the resource quota controller. One binary for both modes, so that the
// end-to-end tests and the benchmark compare like with like.
//
//	kcm --kubeconfig D/kubeconfig --leader-elect=false --secure-port=0 \
//	    --boltinformer-mode persistent --boltinformer-cache /var/lib/kcm/cache.db \
//	    --boltinformer-stats /tmp/kcm-stats.json
//
// Every kube-controller-manager flag is accepted. What differs from
// kube-controller-manager's own Run: no leader election (--leader-elect
// must be false), no HTTPS server (--secure-port must be 0), no
// service-account-token controller (it needs a signing key and
// --use-service-account-credentials, which is refused). The rest is KCM's
// exported construction: CreateControllerContext, BuildControllers,
// RunControllers.
//
// It is built only with the build tag kcm (kasbuild.BuildKCM, `make
// test-kcm`), so that the default builds, vets and tests of this module
// never compile the controllers.
package main
