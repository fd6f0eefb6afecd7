package localapi

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// secretsRefused is why a resource of Secrets is not served.
const secretsRefused = "secrets are not served by this local API (localapi.Options.Secrets, inspect serve --secrets)"

// isSecret reports whether obj is a core Secret: typed, or of apiVersion
// v1 and kind Secret (unstructured, metadata-only), whatever the informer
// or resource that holds it is named.
func isSecret(obj runtime.Object) bool {
	switch obj.(type) {
	case nil:
		return false
	case *corev1.Secret:
		return true
	}
	gvk := obj.GetObjectKind().GroupVersionKind()
	return gvk.Group == "" && gvk.Kind == "Secret"
}

// secretResource reports whether r is core Secrets by its description: the
// kind Secret of the core group, or a core resource named secrets in any
// case.
func secretResource(r *Resource) bool {
	return r.Group == "" && (r.Kind == "Secret" || strings.EqualFold(r.Resource, "secrets"))
}

// holdsSecrets says why objects (an informer's example and its objects)
// are Secrets, or "".
func holdsSecrets(example runtime.Object, objs []runtime.Object) string {
	if isSecret(example) {
		return fmt.Sprintf("its objects are %T", example)
	}
	for _, o := range objs {
		if isSecret(o) {
			return "it holds core Secrets"
		}
	}
	return ""
}
