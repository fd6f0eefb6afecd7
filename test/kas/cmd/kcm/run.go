//go:build kcm

package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	v1core "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/controller-manager/pkg/clientbuilder"
	controllerhealthz "k8s.io/controller-manager/pkg/healthz"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app/config"
	"k8s.io/kubernetes/cmd/kube-controller-manager/names"
	"k8s.io/kubernetes/pkg/controller/garbagecollector"
)

// run is kube-controller-manager's Run without leader election and HTTPS:
// the controller context of app.CreateControllerContext, its informer
// factories replaced by persistent ones in persistent mode, then
// app.BuildControllers, the factories started, app.RunControllers; on the
// way out the factories are shut down and the cache file closed (flushed).
func run(ctx context.Context, c *config.CompletedConfig, b *boltFlags) error {
	logger := klog.FromContext(ctx)
	logger.Info("Starting kcm", "mode", b.mode, "cache", b.cache, "syncPolicy", b.syncPolicy)

	st := newStats(b.stats, b.mode)
	c.Kubeconfig.Wrap(st.wrap)
	defer st.close()
	go st.run(ctx)

	c.EventBroadcaster.StartStructuredLogging(0)
	c.EventBroadcaster.StartRecordingToSink(&v1core.EventSinkImpl{Interface: c.Client.CoreV1().Events("")})
	defer c.EventBroadcaster.Shutdown()

	// Without --use-service-account-credentials (refused), kube-controller-
	// manager gives every controller the root client builder.
	root := clientbuilder.SimpleControllerClientBuilder{ClientConfig: c.Kubeconfig}
	cc, err := app.CreateControllerContext(ctx, c, root, root)
	if err != nil {
		return fmt.Errorf("kcm: controller context: %w", err)
	}
	var p *persistence
	if b.mode == modePersistent {
		if p, err = persist(ctx, c, root, &cc, b); err != nil {
			return err
		}
		defer p.close(logger)
		st.setHealth(p.health)
	}

	descriptors := app.NewControllerDescriptors()
	// The service-account-token controller needs the root client builder
	// that kube-controller-manager's Run gives it; kcm does not run it.
	delete(descriptors, names.ServiceAccountTokenController)
	controllers, err := app.BuildControllers(ctx, cc, descriptors, nil, controllerhealthz.NewMutableHealthzHandler())
	if err != nil {
		return fmt.Errorf("kcm: build controllers: %w", err)
	}
	cc.InformerFactory.Start(ctx.Done())
	cc.ObjectOrMetadataInformerFactory.Start(ctx.Done())
	close(cc.InformersStarted)
	st.controllersStarted(len(controllers))

	ok := app.RunControllers(ctx, cc, controllers, app.ControllerStartJitter, c.ControllerShutdownTimeout)
	cc.InformerFactory.Shutdown()
	if p != nil {
		p.metadata.Shutdown()
		st.write() // the informers' health at the stop, while the file is open
		st.setHealth(nil)
	}
	if !ok {
		return errors.New("kcm: controller shutdown timeout reached")
	}
	return nil
}

// gcOrderBound bounds how long the garbage collector's handler of a
// dependent resource waits for its owners' handlers (ownersFirst): the
// garbage collector's own initial sync timeout.
const gcOrderBound = 30 * time.Second

// rebuildGraphBuilder gives the garbage collector a graph builder over
// cc's (replaced) informer factory, as app.CreateControllerContext built it
// over the stock one, with owners' initial adds queued before their
// dependents' (ownersFirst).
func rebuildGraphBuilder(ctx context.Context, cc *app.ControllerContext, b clientbuilder.ControllerClientBuilder) error {
	if cc.GraphBuilder == nil {
		return nil
	}
	mc, err := b.Config("metadata-informers")
	if err != nil {
		return fmt.Errorf("kcm: %w", err)
	}
	meta, err := metadataClient(mc)
	if err != nil {
		return err
	}
	ignored := map[schema.GroupResource]struct{}{}
	for _, r := range cc.ComponentConfig.GarbageCollectorController.GCIgnoredResources {
		ignored[schema.GroupResource{Group: r.Group, Resource: r.Resource}] = struct{}{}
	}
	cc.GraphBuilder = garbagecollector.NewDependencyGraphBuilder(ctx, meta, cc.RESTMapper, ignored, newOwnersFirst(ctx, cc.ObjectOrMetadataInformerFactory, gcOrderBound), cc.InformersStarted)
	return nil
}
