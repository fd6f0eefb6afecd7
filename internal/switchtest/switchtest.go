// Package switchtest runs a program written for client-go's informer
// factory twice at once, over one cluster: as written (package clientgo:
// informers.NewSharedInformerFactory) and switched to boltinformer by its
// one line (package persistent: boltinformer.NewSharedInformerFactory),
// so that a test can check they observe the same objects and events. The
// library's tests run it over the fake clientset, test/kas/e2e over the
// real kube-apiserver.
package switchtest

import (
	"context"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/boltinformer/boltinformer"
	clientgoprogram "github.com/boltinformer/boltinformer/internal/switchtest/clientgo"
	persistentprogram "github.com/boltinformer/boltinformer/internal/switchtest/persistent"
)

// Observation is what a program saw.
type Observation = clientgoprogram.Observation

func pod(ns, name string, web bool) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
	}
	if web {
		p.Labels = map[string]string{"app": "web"}
	}
	return p
}

// Seed returns the objects the programs start from in namespace ns: five
// Pods (p0, p2 and p4 labeled app=web) and two ConfigMaps.
func Seed(ns string) []*corev1.Pod {
	return []*corev1.Pod{pod(ns, "p0", true), pod(ns, "p1", false), pod(ns, "p2", true), pod(ns, "p3", false), pod(ns, "p4", true)}
}

// SeedConfigMaps returns the ConfigMaps the programs start from.
func SeedConfigMaps(ns string) []*corev1.ConfigMap {
	return []*corev1.ConfigMap{
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm0"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cm1"}},
	}
}

// Create creates the seed objects in ns through client.
func Create(ctx context.Context, client kubernetes.Interface, ns string) error {
	for _, p := range Seed(ns) {
		if _, err := client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	for _, cm := range SeedConfigMaps(ns) {
		if _, err := client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// change makes the changes the programs watch in ns: a Pod created, one
// relabeled, one deleted, a ConfigMap created.
func change(ctx context.Context, client kubernetes.Interface, ns string) error {
	pods := client.CoreV1().Pods(ns)
	if _, err := pods.Create(ctx, pod(ns, "new", true), metav1.CreateOptions{}); err != nil {
		return err
	}
	p1, err := pods.Get(ctx, "p1", metav1.GetOptions{})
	if err != nil {
		return err
	}
	p1 = p1.DeepCopy()
	p1.Labels = map[string]string{"app": "web"}
	if _, err := pods.Update(ctx, p1, metav1.UpdateOptions{}); err != nil {
		return err
	}
	if err := pods.Delete(ctx, "p2", metav1.DeleteOptions{}); err != nil {
		return err
	}
	_, err = client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-new"}}, metav1.CreateOptions{})
	return err
}

// done is when a program has seen the changes: five Pods added at the
// start and one later, the updates, the delete (after the updates: a
// resource's events come in order), and the listers' content.
func done(o Observation) bool {
	return o.Added == 6 && o.Updated >= 1 && o.Deleted == 1 && len(o.Pods) == 5 && len(o.ConfigMaps) == 3
}

// Want is what both programs must report, without resourceVersions (see
// WithoutResourceVersions), over the fake clientset. kube-apiserver sends
// one more update: a deleted Pod's deletionTimestamp, before the delete.
var Want = Observation{
	Pods:       []string{"/new", "/p0", "/p1", "/p3", "/p4"},
	WebPods:    []string{"/new", "/p0", "/p1", "/p4"},
	ConfigMaps: []string{"/cm-new", "/cm0", "/cm1"},
	Added:      6, Updated: 1, Deleted: 1,
	Synced: 2,
}

// WithoutResourceVersions returns o's names without the namespace and the
// resourceVersions, to compare with Want.
func WithoutResourceVersions(o Observation) Observation {
	strip := func(in []string) []string {
		out := make([]string, len(in))
		for i, s := range in {
			for j := len(s) - 1; j >= 0; j-- {
				if s[j] == '@' {
					s = s[:j]
					break
				}
			}
			for j := range s {
				if s[j] == '/' {
					s = s[j:]
					break
				}
			}
			out[i] = s
		}
		return out
	}
	o.Pods, o.WebPods, o.ConfigMaps = strip(o.Pods), strip(o.WebPods), strip(o.ConfigMaps)
	return o
}

// RunBoth runs both programs at once in namespace ns over client (the
// persistent one with db), the seed objects created beforehand: each
// waits for its caches to sync, the changes are made once both have, and
// each returns when it has seen them.
func RunBoth(ctx context.Context, client kubernetes.Interface, db *boltinformer.DB, ns string) (clientGo, persistent Observation, err error) {
	var (
		mu      sync.Mutex
		arrived int
		ready   = make(chan struct{})
		chErr   error
	)
	barrier := func(ctx context.Context) error {
		mu.Lock()
		arrived++
		last := arrived == 2
		mu.Unlock()
		if last {
			chErr = change(ctx, client, ns)
			close(ready)
		}
		select {
		case <-ready:
			return chErr
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	var (
		wg         sync.WaitGroup
		cErr, pErr error
		p          persistentprogram.Observation
	)
	wg.Go(func() {
		clientGo, cErr = clientgoprogram.Run(ctx, client, nil, ns, barrier, done)
	})
	wg.Go(func() {
		p, pErr = persistentprogram.Run(ctx, client, db, ns, barrier, func(o persistentprogram.Observation) bool {
			return done(Observation(o))
		})
	})
	wg.Wait()
	if cErr != nil {
		return clientGo, Observation(p), fmt.Errorf("client-go's factory: %w (saw %+v)", cErr, clientGo)
	}
	if pErr != nil {
		return clientGo, Observation(p), fmt.Errorf("boltinformer's factory: %w (saw %+v)", pErr, p)
	}
	return clientGo, Observation(p), nil
}
