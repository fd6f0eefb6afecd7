//go:build kcm

package main

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/controller-manager/pkg/clientbuilder"
	"k8s.io/controller-manager/pkg/informerfactory"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app/config"

	"github.com/boltinformer/boltinformer"
)

// trimID fingerprints trimManagedFields: the objects in the file have no
// managedFields, and a file saved otherwise is not resumed.
const trimID = "kube-controller-manager/trim-managed-fields/v1"

// trimManagedFields is kube-controller-manager's transform of every
// informer (CreateControllerContext): managedFields are dropped, for
// memory, and here for the file too.
func trimManagedFields(obj any) (any, error) {
	if a, err := meta.Accessor(obj); err == nil && a.GetManagedFields() != nil {
		a.SetManagedFields(nil)
	}
	return obj, nil
}

// persistence is what persistent mode opened: the file and the factories
// over it.
type persistence struct {
	db       *boltinformer.DB
	factory  *boltinformer.Factory
	metadata *boltinformer.MetadataFactory
}

// persist replaces cc's informer factories by persistent ones over the
// cache file: the typed factory every controller uses, and the
// typed-or-metadata factory of the garbage collector and the resource
// quota controller (typed informers for built-in resources, the same as
// the controllers', metadata-only ones for the rest); the garbage
// collector's graph builder is rebuilt over it.
func persist(ctx context.Context, c *config.CompletedConfig, root clientbuilder.ControllerClientBuilder, cc *app.ControllerContext, b *boltFlags) (*persistence, error) {
	client, err := root.Client("shared-informers")
	if err != nil {
		return nil, fmt.Errorf("kcm: %w", err)
	}
	var keyrings map[string]*boltinformer.Keyring
	if b.encryptionConfig != "" {
		if keyrings, err = boltinformer.ReadEncryptionConfiguration(b.encryptionConfig); err != nil {
			return nil, fmt.Errorf("kcm: %w", err)
		}
	}
	policy := boltinformer.SyncAfterFresh
	if b.syncPolicy == "disk-load" {
		policy = boltinformer.SyncAfterDiskLoad
	}
	db, err := boltinformer.Open(b.cache, nil)
	if err != nil {
		return nil, fmt.Errorf("kcm: %w", err)
	}
	f, err := boltinformer.NewFactoryForClient(db, client, &boltinformer.FactoryOptions{
		ResyncPeriod: app.ResyncPeriod(c)(),
		Transform:    trimManagedFields,
		// The stock factory's name: kube-controller-manager's, taken once
		// per process by CreateControllerContext.
		InformerName: cc.InformerFactory.InformerName(),
		Keyrings:     keyrings,
		Informer: boltinformer.InformerOptions{
			TransformID:  trimID,
			SyncPolicy:   policy,
			FreshTimeout: b.freshTimeout,
			// Fresh by a bookmark only: the metadata list of every object
			// that small caches make at once by default carries
			// managedFields (the transform trims them client side), which
			// the apiserver-bytes target of issue 25 cannot afford.
			FreshListMax: -1,
		},
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("kcm: %w", err)
	}
	md, err := f.MetadataFactory(nil)
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("kcm: %w", err)
	}
	cc.InformerFactory = f
	cc.ObjectOrMetadataInformerFactory = informerfactory.NewInformerFactory(f, md)
	if err := rebuildGraphBuilder(ctx, cc, root); err != nil {
		_ = db.Close()
		return nil, err
	}
	klog.FromContext(ctx).Info("Persistent informers", "cache", b.cache, "clusterID", f.ClusterID(), "syncPolicy", b.syncPolicy)
	return &persistence{db: db, factory: f, metadata: md}, nil
}

// health is every persistent informer's Health, by name.
func (p *persistence) health() map[string]boltinformer.Health {
	out := map[string]boltinformer.Health{}
	for name, inf := range p.factory.Informers() {
		out[name] = inf.Health()
	}
	return out
}

// close closes the file, once the factories are shut down: the last
// commit is flushed.
func (p *persistence) close(logger klog.Logger) {
	for name, inf := range p.factory.Informers() {
		if h := inf.Health(); h.Stale || h.NotPersisted > 0 {
			logger.Info("Informer at shutdown", "informer", name, "health", h)
		}
	}
	if err := p.db.Close(); err != nil {
		logger.Error(err, "Closing the cache file")
	}
}

func metadataClient(c *rest.Config) (metadata.Interface, error) {
	mc, err := metadata.NewForConfig(c)
	if err != nil {
		return nil, fmt.Errorf("kcm: metadata client: %w", err)
	}
	return mc, nil
}
