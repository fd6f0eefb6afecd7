// Package derive is the example operator's controller. For every
// ConfigMap labeled example.boltinformer.io/derive=true it keeps a
// ConfigMap <name>-derived in the same namespace that holds the SHA-256 of
// each of the source's values, and it deletes that derived object when the
// source is deleted or loses the label.
//
// The cleanup needs no finalizer and no owner reference: a delete reaches
// the reconciler as a request whose Get returns NotFound, and the derived
// objects are found through a field index. The derived objects are the
// operator's output, not its input: it does not watch them (no request
// comes from them), as an operator whose outputs live outside the cluster
// (DNS records, buckets, files) cannot. With controller-runtime's own
// cache, a source deleted while the operator was down is then never
// reconciled and its derived object stays forever: when the operator
// starts, its handlers get the objects that exist, as Adds, and nothing
// about those that are gone. With boltcr's persistent cache the deletes
// that happened while it was down reach the reconciler when it starts.
package derive

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

const (
	// SourceLabel is "true" on the ConfigMaps the operator derives from.
	SourceLabel = "example.boltinformer.io/derive"
	// DerivedFromLabel names, on a derived ConfigMap, its source.
	DerivedFromLabel = "example.boltinformer.io/derived-from"
	// DerivedFromIndex is the field index of ConfigMaps by DerivedFromLabel.
	DerivedFromIndex = "derivedFrom"
	// Suffix ends a derived ConfigMap's name.
	Suffix = "-derived"
)

// Action is what a reconcile did.
type Action string

// The actions of a reconcile.
const (
	Created   Action = "created"   // the derived object was created
	Updated   Action = "updated"   // the derived object was brought up to date
	Unchanged Action = "unchanged" // the derived object was up to date
	Cleaned   Action = "cleaned"   // the source is gone: its derived objects were deleted
)

// Reconciler keeps the derived ConfigMaps.
type Reconciler struct {
	Client client.Client
	// OnReconcile, when set, is called after each successful reconcile.
	OnReconcile func(req reconcile.Request, action Action, deleted int)
	// NewQueue, when set, builds the controller's queue: boltcr.NewQueue
	// makes a warm start reconcile only the sources changed, created or
	// deleted while the operator was down (and the requests pending at
	// its stop), not every source. nil is controller-runtime's queue.
	NewQueue func(controllerName string, rateLimiter workqueue.TypedRateLimiter[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request]
}

// SetupWithManager adds the field index and the controller to mgr.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	err := mgr.GetFieldIndexer().IndexField(ctx, &corev1.ConfigMap{}, DerivedFromIndex, func(o client.Object) []string {
		if from := o.GetLabels()[DerivedFromLabel]; from != "" {
			return []string{from}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("derive: field index: %w", err)
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("derive").
		WithOptions(controller.Options{NewQueue: r.NewQueue}).
		Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(toSource)).
		Complete(r)
}

// toSource maps a source ConfigMap to its request, and any other
// ConfigMap to none. An update maps the old and the new object, so a
// source that loses its label is reconciled (and cleaned up).
func toSource(_ context.Context, o client.Object) []reconcile.Request {
	if o.GetLabels()[SourceLabel] != "true" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}}}
}

// Reconcile brings the derived object of req's source up to date, or
// deletes it when the source is gone.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var src corev1.ConfigMap
	err := r.Client.Get(ctx, req.NamespacedName, &src)
	if apierrors.IsNotFound(err) || (err == nil && src.Labels[SourceLabel] != "true") {
		n, err := r.cleanup(ctx, req)
		if err == nil {
			r.done(ctx, req, Cleaned, n)
		}
		return reconcile.Result{}, err
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	want := Derived(&src)
	var got corev1.ConfigMap
	err = r.Client.Get(ctx, client.ObjectKeyFromObject(want), &got)
	switch {
	case apierrors.IsNotFound(err):
		if err := r.Client.Create(ctx, want); err != nil {
			return reconcile.Result{}, err
		}
		r.done(ctx, req, Created, 0)
	case err != nil:
		return reconcile.Result{}, err
	case !maps.Equal(got.Data, want.Data) || got.Labels[DerivedFromLabel] != src.Name:
		got.Data = want.Data
		got.Labels = want.Labels
		if err := r.Client.Update(ctx, &got); err != nil {
			return reconcile.Result{}, err
		}
		r.done(ctx, req, Updated, 0)
	default:
		r.done(ctx, req, Unchanged, 0)
	}
	return reconcile.Result{}, nil
}

// cleanup deletes the objects derived from req's source (found through
// the field index), and returns how many it deleted.
func (r *Reconciler) cleanup(ctx context.Context, req reconcile.Request) (int, error) {
	var derived corev1.ConfigMapList
	if err := r.Client.List(ctx, &derived, client.InNamespace(req.Namespace), client.MatchingFields{DerivedFromIndex: req.Name}); err != nil {
		return 0, err
	}
	n := 0
	for i := range derived.Items {
		d := &derived.Items[i]
		err := r.Client.Delete(ctx, d, client.Preconditions{UID: &d.UID})
		switch {
		case err == nil:
			n++
		case !apierrors.IsNotFound(err) && !apierrors.IsConflict(err):
			return n, err
		}
	}
	return n, nil
}

func (r *Reconciler) done(ctx context.Context, req reconcile.Request, a Action, deleted int) {
	if a != Unchanged {
		log.FromContext(ctx).Info("Reconciled", "action", a, "deleted", deleted)
	}
	if r.OnReconcile != nil {
		r.OnReconcile(req, a, deleted)
	}
}

// Derived returns the derived ConfigMap of src.
func Derived(src *corev1.ConfigMap) *corev1.ConfigMap {
	data := make(map[string]string, len(src.Data))
	for k, v := range src.Data {
		sum := sha256.Sum256([]byte(v))
		data[k] = hex.EncodeToString(sum[:])
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: src.Namespace,
			Name:      src.Name + Suffix,
			Labels:    map[string]string{DerivedFromLabel: src.Name},
		},
		Data: data,
	}
}
