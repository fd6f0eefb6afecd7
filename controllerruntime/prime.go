package boltcr

import (
	"context"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// Informers started together. controller-runtime's cache over several
// namespaces (DefaultNamespaces, ByObject's Namespaces) creates a kind's
// informers one namespace after another, each waiting until it has
// synced before the next is created: for warm informers, which sync once
// fresh (a bookmark 0 to 2.3 s in), a first List or GetInformer took the
// sum of their waits. Cache creates them all first without waiting
// (cache.BlockUntilSynced(false)), then waits as asked: they start
// together and become fresh in parallel.

// primeKey names a kind's informers as the cache holds them.
type primeKey struct {
	gvk  schema.GroupVersionKind
	kind objectKind
}

// prime creates obj's informers in every namespace of the cache without
// waiting for them, once per kind (a failure is left to the call that
// follows, which reports it).
func (c *Cache) prime(ctx context.Context, obj client.Object) {
	if c.failOnMissing {
		return
	}
	gvk, err := apiutil.GVKForObject(obj, c.scheme)
	if err != nil {
		return
	}
	key := primeKey{gvk: gvk, kind: kindOf(obj)}
	if _, ok := c.primed.Load(key); ok {
		return
	}
	if _, err := c.Cache.GetInformer(ctx, obj, cache.BlockUntilSynced(false)); err == nil {
		c.primed.Store(key, true)
	}
}

// unprime forgets that obj's informers were created (RemoveInformer).
func (c *Cache) unprime(obj client.Object) {
	if gvk, err := apiutil.GVKForObject(obj, c.scheme); err == nil {
		c.primed.Delete(primeKey{gvk: gvk, kind: kindOf(obj)})
	}
}

// itemOf returns an empty item of list's kind, or nil.
func (c *Cache) itemOf(list client.ObjectList) client.Object {
	gvk, err := apiutil.GVKForObject(list, c.scheme)
	if err != nil || !strings.HasSuffix(gvk.Kind, "List") {
		return nil
	}
	gvk.Kind = strings.TrimSuffix(gvk.Kind, "List")
	switch list.(type) {
	case *unstructured.UnstructuredList:
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvk)
		return u
	case *metav1.PartialObjectMetadataList:
		m := &metav1.PartialObjectMetadata{}
		m.SetGroupVersionKind(gvk)
		return m
	}
	o, err := c.scheme.New(gvk)
	if err != nil {
		return nil
	}
	obj, _ := o.(client.Object)
	return obj
}

// GetInformer returns obj's informer, as controller-runtime's cache does;
// over several namespaces, their informers start together.
func (c *Cache) GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error) {
	c.prime(ctx, obj)
	return c.Cache.GetInformer(ctx, obj, opts...)
}

// GetInformerForKind returns gvk's informer, as controller-runtime's
// cache does; over several namespaces, their informers start together.
func (c *Cache) GetInformerForKind(ctx context.Context, gvk schema.GroupVersionKind, opts ...cache.InformerGetOption) (cache.Informer, error) {
	if o, err := c.scheme.New(gvk); err == nil {
		if obj, ok := o.(client.Object); ok {
			c.prime(ctx, obj)
		}
	}
	return c.Cache.GetInformerForKind(ctx, gvk, opts...)
}

// List lists from the cache, as controller-runtime's cache does; the
// first List of a kind over several namespaces starts their informers
// together.
func (c *Cache) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if item := c.itemOf(list); item != nil {
		c.prime(ctx, item)
	}
	return c.Cache.List(ctx, list, opts...)
}
