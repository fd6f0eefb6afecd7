package localapi

import (
	"errors"
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Errors of the window, turned into Status by the callers.
var (
	errTooOld = errors.New("localapi: resourceVersion is older than the window")
	errTooNew = errors.New("localapi: resourceVersion is newer than the cache")
)

func badRequest(msg string) error { return apierrors.NewBadRequest(msg) }

func notFound(gr schema.GroupResource, name string) error { return apierrors.NewNotFound(gr, name) }

// pathNotFound is the apiserver's answer to a path it does not serve.
func pathNotFound() error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusNotFound, Reason: metav1.StatusReasonNotFound,
		Message: "the server could not find the requested resource",
		Details: &metav1.StatusDetails{},
	}}
}

// expired is the 410 of a resourceVersion before the window.
func expired(rv string, oldest string) error {
	return apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %s (the local API keeps events after %s)", rv, oldest))
}

// tooLarge is the apiserver's answer to a resourceVersion the cache has not
// reached (client-go relists without it).
func tooLarge(rv, current string) error {
	err := apierrors.NewTimeoutError(fmt.Sprintf("Too large resource version: %s, current: %s", rv, current), 1)
	err.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: metav1.CauseTypeResourceVersionTooLarge, Message: "Too large resource version"}}
	return err
}

func notAcceptable(msg string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusNotAcceptable, Reason: metav1.StatusReasonNotAcceptable, Message: msg,
	}}
}

// notSynced answers while an informer has no complete list yet.
func notSynced(gr schema.GroupResource) error {
	err := apierrors.NewServiceUnavailable(fmt.Sprintf("the local cache of %s has not synced yet", gr))
	err.ErrStatus.Details = &metav1.StatusDetails{RetryAfterSeconds: 1}
	return err
}

// toStatus turns any error into the Status a client gets.
func toStatus(err error) *metav1.Status {
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		s := se.Status()
		return &s
	}
	s := apierrors.NewInternalError(err).ErrStatus
	return &s
}
