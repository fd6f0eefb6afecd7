package boltinformer_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	corev1informers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer"
)

// TestRegressionProbeLateRequest: a request that an informer built for an
// earlier probe makes late (client-go's reflector lists in a goroutine
// that it does not wait for when stopped) is not taken for the next
// probe's. It was: the probes shared one client that recorded requests
// for whichever probe was current, and kube-controller-manager's resource
// quota monitor got a LimitRange informer that "lists roles" (kept in
// memory); a late request of the same group would have given a type
// another resource's name, namespace or selectors.
func TestRegressionProbeLateRequest(t *testing.T) {
	db, _ := openFactoryDB(t)
	client := fake.NewClientset(
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p1"}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "b", Name: "p2"}},
	)
	f := boltinformer.NewSharedInformerFactory(db, client, 0)
	release := make(chan struct{})
	sent := make(chan struct{})
	// The first probe's informer leaves a request behind: it lists the
	// ConfigMaps of namespace "x" through the probe's client once released.
	f.InformerFor(&rbacv1.Role{}, func(c kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		go func() {
			<-release
			_, _ = c.CoreV1().ConfigMaps("x").List(context.Background(), metav1.ListOptions{})
			close(sent)
		}()
		return cache.NewSharedIndexInformer(&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				return c.RbacV1().Roles("").List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return c.RbacV1().Roles("").Watch(ctx, o)
			},
		}, &rbacv1.Role{}, resync, cache.Indexers{})
	})
	// The second probe: the late request arrives first.
	f.InformerFor(&corev1.Pod{}, func(c kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		close(release)
		<-sent
		return corev1informers.NewPodInformer(c, metav1.NamespaceAll, resync, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	})
	inf, err := f.PersistentInformer(&corev1.Pod{})
	if err != nil {
		t.Fatal(err)
	}
	if inf.Name() != "v1/pods" {
		t.Fatalf("the Pod informer is %q, want v1/pods", inf.Name())
	}
	startFactory(t, f)
	pods, err := corev1listers.NewPodLister(inf.GetIndexer()).List(labels.Everything())
	if err != nil || len(pods) != 2 {
		t.Fatalf("the Pod informer holds %d Pods (%v), want both namespaces' 2", len(pods), err)
	}
}
