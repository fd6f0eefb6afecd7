package main

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/boltinformer/boltinformer/internal/encryptionconfig"
	"github.com/boltinformer/boltinformer/store"
)

// readKeyFile reads a --key-file: a Kubernetes EncryptionConfiguration
// (apiserver.config.k8s.io/v1, aesgcm providers with named keys), the file
// the agent's keys come from (boltinformer.ReadEncryptionConfiguration
// reads the same). Each informer is decrypted with the keys of the entry
// naming its resource. An empty path means no keys.
func readKeyFile(path string) (*encryptionconfig.Config, error) {
	if path == "" {
		return nil, nil
	}
	c, err := encryptionconfig.Read(path)
	if err != nil {
		return nil, fmt.Errorf("--key-file: %w", err)
	}
	return c, nil
}

// informerResource is the resource of an informer's objects, as an
// EncryptionConfiguration names it: from the state's Resource (a
// GroupVersionResource, what a Factory records), else the plural of its
// kind, else the informer's name ("v1/secrets", "apps/v1/deployments",
// "dynamic/example.com/v1/widgets").
func informerResource(informer string, st *store.State) schema.GroupResource {
	if st != nil {
		if gv, r, ok := strings.Cut(st.Resource, ", Resource="); ok && r != "" {
			if g, err := schema.ParseGroupVersion(strings.TrimPrefix(gv, "/")); err == nil {
				return schema.GroupResource{Group: g.Group, Resource: r}
			}
		}
	}
	if gvk := informerKind(st); gvk.Kind != "" {
		plural, _ := meta.UnsafeGuessKindToResource(gvk)
		return plural.GroupResource()
	}
	parts := strings.Split(strings.TrimPrefix(informer, "dynamic/"), "/")
	switch len(parts) {
	case 2: // v1/secrets
		return schema.GroupResource{Resource: parts[1]}
	case 3: // apps/v1/deployments
		return schema.GroupResource{Group: parts[0], Resource: parts[2]}
	}
	return schema.GroupResource{Resource: parts[len(parts)-1]}
}

// resourceName is gr as an EncryptionConfiguration writes it.
func resourceName(gr schema.GroupResource) string {
	if gr.Group == "" {
		return gr.Resource
	}
	return gr.Resource + "." + gr.Group
}
