// Package program is a small program written for client-go's shared
// informer factory: it watches Pods and ConfigMaps, counts what its Pod
// handler is told about one namespace, and reports what its listers hold
// there once its changes are made and done says so.
//
// internal/switchtest/clientgo and internal/switchtest/persistent hold
// this program word for word, but for the line that builds the factory:
// client-go's informers.NewSharedInformerFactory in one,
// boltinformer.NewSharedInformerFactory in the other (the switchtest
// tests keep it so, and run both).
package program

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer"
)

// Observation is what the program saw.
type Observation struct {
	// Pods are the namespace/name@resourceVersion of the Pod lister's
	// Pods, sorted, and WebPods the namespace/name of those it lists with
	// the selector app=web.
	Pods, WebPods []string
	// ConfigMaps are the namespace/name@resourceVersion of ForResource's
	// generic lister's ConfigMaps, sorted.
	ConfigMaps []string
	// Added, Updated and Deleted count the Pod handler's calls for Pods
	// of the namespace.
	Added, Updated, Deleted int
	// Synced counts the informers WaitForCacheSync reported synced.
	Synced int
}

// Run runs the program in namespace with client (db is the cache file of
// the persistent variant) until done says what it sees is complete, after
// change has made its changes.
func Run(ctx context.Context, client kubernetes.Interface, db *boltinformer.DB, namespace string, change func(context.Context) error, done func(Observation) bool) (Observation, error) {
	factory := boltinformer.NewSharedInformerFactory(db, client, 0)
	return observe(ctx, factory, namespace, change, done)
}

func observe(ctx context.Context, factory informers.SharedInformerFactory, namespace string, change func(context.Context) error, done func(Observation) bool) (Observation, error) {
	pods := factory.Core().V1().Pods()
	configMaps, err := factory.ForResource(corev1.SchemeGroupVersion.WithResource("configmaps"))
	if err != nil {
		return Observation{}, err
	}
	var (
		mu                      sync.Mutex
		added, updated, deleted int
	)
	inNamespace := func(obj any) bool {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		p, ok := obj.(*corev1.Pod)
		return ok && p.Namespace == namespace
	}
	_, err = pods.Informer().AddEventHandler(cache.FilteringResourceEventHandler{
		FilterFunc: inNamespace,
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc: func(obj any) {
				mu.Lock()
				defer mu.Unlock()
				added++
			},
			UpdateFunc: func(old, obj any) {
				mu.Lock()
				defer mu.Unlock()
				updated++
			},
			DeleteFunc: func(obj any) {
				mu.Lock()
				defer mu.Unlock()
				deleted++
			},
		},
	})
	if err != nil {
		return Observation{}, err
	}

	stop := make(chan struct{})
	defer factory.Shutdown()
	defer close(stop)
	factory.Start(stop)
	synced := 0
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return Observation{}, fmt.Errorf("%v did not sync: %w", typ, ctx.Err())
		}
		synced++
	}
	if err := change(ctx); err != nil {
		return Observation{}, err
	}
	for {
		var obs Observation
		all, err := pods.Lister().Pods(namespace).List(labels.Everything())
		if err != nil {
			return obs, err
		}
		web, err := pods.Lister().Pods(namespace).List(labels.SelectorFromSet(labels.Set{"app": "web"}))
		if err != nil {
			return obs, err
		}
		cms, err := configMaps.Lister().ByNamespace(namespace).List(labels.Everything())
		if err != nil {
			return obs, err
		}
		for _, p := range all {
			obs.Pods = append(obs.Pods, p.Namespace+"/"+p.Name+"@"+p.ResourceVersion)
		}
		for _, p := range web {
			obs.WebPods = append(obs.WebPods, p.Namespace+"/"+p.Name)
		}
		for _, o := range cms {
			cm := o.(*corev1.ConfigMap)
			obs.ConfigMaps = append(obs.ConfigMaps, cm.Namespace+"/"+cm.Name+"@"+cm.ResourceVersion)
		}
		sort.Strings(obs.Pods)
		sort.Strings(obs.WebPods)
		sort.Strings(obs.ConfigMaps)
		mu.Lock()
		obs.Added, obs.Updated, obs.Deleted = added, updated, deleted
		mu.Unlock()
		obs.Synced = synced
		if done(obs) {
			return obs, nil
		}
		select {
		case <-ctx.Done():
			return obs, fmt.Errorf("not done: %w", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}
