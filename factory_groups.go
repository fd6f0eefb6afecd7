package boltinformer

// The group accessors of client-go's informers.SharedInformerFactory: each
// gives client-go's generated informers of a group, built through
// InformerFor (persistent), with the factory's Namespace and
// TweakListOptions.

import (
	"k8s.io/client-go/informers/admissionregistration"
	"k8s.io/client-go/informers/apiserverinternal"
	"k8s.io/client-go/informers/apps"
	"k8s.io/client-go/informers/autoscaling"
	"k8s.io/client-go/informers/batch"
	"k8s.io/client-go/informers/certificates"
	"k8s.io/client-go/informers/coordination"
	"k8s.io/client-go/informers/core"
	"k8s.io/client-go/informers/discovery"
	"k8s.io/client-go/informers/events"
	"k8s.io/client-go/informers/extensions"
	"k8s.io/client-go/informers/flowcontrol"
	"k8s.io/client-go/informers/lifecycle"
	"k8s.io/client-go/informers/networking"
	"k8s.io/client-go/informers/node"
	"k8s.io/client-go/informers/policy"
	"k8s.io/client-go/informers/rbac"
	"k8s.io/client-go/informers/resource"
	"k8s.io/client-go/informers/scheduling"
	"k8s.io/client-go/informers/storage"
	"k8s.io/client-go/informers/storagemigration"
)

// Admissionregistration returns the informers of the admissionregistration group.
func (f *Factory) Admissionregistration() admissionregistration.Interface {
	return admissionregistration.New(f, f.opts.Namespace, f.opts.TweakListOptions)
}

// Internal returns the informers of the apiserverinternal group.
func (f *Factory) Internal() apiserverinternal.Interface {
	return apiserverinternal.New(f, f.opts.Namespace, f.opts.TweakListOptions)
}

// Apps returns the informers of the apps group.
func (f *Factory) Apps() apps.Interface {
	return apps.New(f, f.opts.Namespace, f.opts.TweakListOptions)
}

// Autoscaling returns the informers of the autoscaling group.
func (f *Factory) Autoscaling() autoscaling.Interface {
	return autoscaling.New(f, f.opts.Namespace, f.opts.TweakListOptions)
}

// Batch returns the informers of the batch group.
func (f *Factory) Batch() batch.Interface {
	return batch.New(f, f.opts.Namespace, f.opts.TweakListOptions)
}

// Certificates returns the informers of the certificates group.
func (f *Factory) Certificates() certificates.Interface {
	return certificates.New(f, f.opts.Namespace, f.opts.TweakListOptions)
}

// Coordination returns the informers of the coordination group.
func (f *Factory) Coordination() coordination.Interface {
	return coordination.New(f, f.opts.Namespace, f.opts.TweakListOptions)
}

// Core returns the informers of the core group.
func (f *Factory) Core() core.Interface {
	return core.New(f, f.opts.Namespace, f.opts.TweakListOptions)
}

// Discovery returns the informers of the discovery group.
func (f *Factory) Discovery() discovery.Interface {
	return discovery.New(f, f.opts.Namespace, f.opts.TweakListOptions)
}

// Events returns the informers of the events group.
func (f *Factory) Events() events.Interface {
	return events.New(f, f.opts.Namespace, f.opts.TweakListOptions)
}

// Extensions returns the informers of the extensions group.
func (f *Factory) Extensions() extensions.Interface {
	return extensions.New(f, f.opts.Namespace, f.opts.TweakListOptions)
}

// Flowcontrol returns the informers of the flowcontrol group.
func (f *Factory) Flowcontrol() flowcontrol.Interface {
	return flowcontrol.New(f, f.opts.Namespace, f.opts.TweakListOptions)
}

// Lifecycle returns the informers of the lifecycle group.
func (f *Factory) Lifecycle() lifecycle.Interface {
	return lifecycle.New(f, f.opts.Namespace, f.opts.TweakListOptions)
}

// Networking returns the informers of the networking group.
func (f *Factory) Networking() networking.Interface {
	return networking.New(f, f.opts.Namespace, f.opts.TweakListOptions)
}

// Node returns the informers of the node group.
func (f *Factory) Node() node.Interface {
	return node.New(f, f.opts.Namespace, f.opts.TweakListOptions)
}

// Policy returns the informers of the policy group.
func (f *Factory) Policy() policy.Interface {
	return policy.New(f, f.opts.Namespace, f.opts.TweakListOptions)
}

// Rbac returns the informers of the rbac group.
func (f *Factory) Rbac() rbac.Interface {
	return rbac.New(f, f.opts.Namespace, f.opts.TweakListOptions)
}

// Resource returns the informers of the resource group.
func (f *Factory) Resource() resource.Interface {
	return resource.New(f, f.opts.Namespace, f.opts.TweakListOptions)
}

// Scheduling returns the informers of the scheduling group.
func (f *Factory) Scheduling() scheduling.Interface {
	return scheduling.New(f, f.opts.Namespace, f.opts.TweakListOptions)
}

// Storage returns the informers of the storage group.
func (f *Factory) Storage() storage.Interface {
	return storage.New(f, f.opts.Namespace, f.opts.TweakListOptions)
}

// Storagemigration returns the informers of the storagemigration group.
func (f *Factory) Storagemigration() storagemigration.Interface {
	return storagemigration.New(f, f.opts.Namespace, f.opts.TweakListOptions)
}
