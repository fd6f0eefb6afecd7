package main

import (
	"sync/atomic"

	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer"
)

// agent is the edge agent's state: the Pods bound to its node and its
// namespace's ConfigMaps and Secrets (unless -secrets=false: secrets and
// secretLister are nil), each a persistent informer from one Factory, with
// the generated listers the agent reads and a count of Pod events it
// handled.
type agent struct {
	pods, configMaps, secrets *boltinformer.Informer

	podLister       corev1listers.PodLister
	configMapLister corev1listers.ConfigMapLister
	secretLister    corev1listers.SecretLister

	podEvents atomic.Int64
}

// newAgent wires listers and the agent's Pod handler to the informers
// (before they run, so the handler sees the initial list).
func newAgent(pods, configMaps, secrets *boltinformer.Informer) (*agent, error) {
	a := &agent{
		pods: pods, configMaps: configMaps, secrets: secrets,
		podLister:       corev1listers.NewPodLister(pods.GetIndexer()),
		configMapLister: corev1listers.NewConfigMapLister(configMaps.GetIndexer()),
	}
	if secrets != nil {
		a.secretLister = corev1listers.NewSecretLister(secrets.GetIndexer())
	}
	_, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { a.podEvents.Add(1) },
		UpdateFunc: func(any, any) { a.podEvents.Add(1) },
		DeleteFunc: func(any) { a.podEvents.Add(1) },
	})
	if err != nil {
		return nil, err
	}
	return a, nil
}

// informers returns the agent's informers.
func (a *agent) informers() []*boltinformer.Informer {
	infs := []*boltinformer.Informer{a.pods, a.configMaps}
	if a.secrets != nil {
		infs = append(infs, a.secrets)
	}
	return infs
}

// syncedCheckers are the informers' sync checkers.
func (a *agent) syncedCheckers() []cache.DoneChecker {
	var out []cache.DoneChecker
	for _, inf := range a.informers() {
		out = append(out, inf.HasSyncedChecker())
	}
	return out
}

// unsynced returns the names of the informers that have not synced.
func (a *agent) unsynced() []string {
	var names []string
	for _, inf := range a.informers() {
		if !inf.HasSynced() {
			names = append(names, inf.Name())
		}
	}
	return names
}
