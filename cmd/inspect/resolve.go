package main

import (
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/boltinformer/boltinformer/store"
)

// shortNames are kubectl's short names of built-in resources (what
// kubectl learns from discovery; offline, inspect knows these).
var shortNames = map[string][]schema.GroupResource{
	"cm":     {{Resource: "configmaps"}},
	"cs":     {{Resource: "componentstatuses"}},
	"ep":     {{Resource: "endpoints"}},
	"ev":     {{Resource: "events"}, {Group: "events.k8s.io", Resource: "events"}},
	"limits": {{Resource: "limitranges"}},
	"ns":     {{Resource: "namespaces"}},
	"no":     {{Resource: "nodes"}},
	"pvc":    {{Resource: "persistentvolumeclaims"}},
	"pv":     {{Resource: "persistentvolumes"}},
	"po":     {{Resource: "pods"}},
	"rc":     {{Resource: "replicationcontrollers"}},
	"quota":  {{Resource: "resourcequotas"}},
	"sa":     {{Resource: "serviceaccounts"}},
	"svc":    {{Resource: "services"}},
	"crd":    {{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}},
	"crds":   {{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}},
	"ds":     {{Group: "apps", Resource: "daemonsets"}},
	"deploy": {{Group: "apps", Resource: "deployments"}},
	"rs":     {{Group: "apps", Resource: "replicasets"}},
	"sts":    {{Group: "apps", Resource: "statefulsets"}},
	"hpa":    {{Group: "autoscaling", Resource: "horizontalpodautoscalers"}},
	"cj":     {{Group: "batch", Resource: "cronjobs"}},
	"csr":    {{Group: "certificates.k8s.io", Resource: "certificatesigningrequests"}},
	"ing":    {{Group: "networking.k8s.io", Resource: "ingresses"}},
	"netpol": {{Group: "networking.k8s.io", Resource: "networkpolicies"}},
	"pdb":    {{Group: "policy", Resource: "poddisruptionbudgets"}},
	"pc":     {{Group: "scheduling.k8s.io", Resource: "priorityclasses"}},
	"sc":     {{Group: "storage.k8s.io", Resource: "storageclasses"}},
}

// resolveInformer finds the informer named arg, as kubectl names
// resources: the informer's name in the file ("v1/pods"), its last path
// element ("pods"), its resource's plural, singular or short name ("pods",
// "pod", "po"), its kind ("Pod"), or resource.group ("deployments.apps",
// "widgets.example.com"), case aside. Several informers that match are
// an error naming them.
func resolveInformer(tx *store.Tx, arg string) (string, error) {
	names := tx.Informers()
	for _, n := range names {
		if n == arg {
			return n, nil
		}
	}
	var matches []string
	for _, n := range names {
		if strings.HasSuffix(n, "/"+arg) {
			matches = append(matches, n)
		}
	}
	if len(matches) == 0 {
		for _, n := range names {
			st, _ := tx.State(n) // a damaged state: matched by its name only
			if resourceMatches(arg, informerResource(n, st), informerKind(st)) {
				matches = append(matches, n)
			}
		}
	}
	switch len(matches) {
	case 1:
		return matches[0], nil
	case 0:
		if len(names) == 0 {
			return "", fmt.Errorf("no informer %q: the file has no informers", arg)
		}
		return "", fmt.Errorf("no informer %q (informers: %s)", arg, strings.Join(names, ", "))
	}
	sort.Strings(matches)
	return "", fmt.Errorf("informer %q is ambiguous: %s", arg, strings.Join(matches, ", "))
}

// resourceMatches reports whether arg names the resource gr of kind gvk.
func resourceMatches(arg string, gr schema.GroupResource, gvk schema.GroupVersionKind) bool {
	a := strings.ToLower(arg)
	if res, group, ok := strings.Cut(a, "."); ok {
		return group == gr.Group && nameMatches(res, gr, gvk)
	}
	return nameMatches(a, gr, gvk)
}

// nameMatches reports whether a (lower case, no group) is gr's plural,
// singular or short name, or gvk's kind.
func nameMatches(a string, gr schema.GroupResource, gvk schema.GroupVersionKind) bool {
	if a == gr.Resource {
		return true
	}
	if gvk.Kind != "" {
		if a == strings.ToLower(gvk.Kind) {
			return true
		}
		if _, singular := meta.UnsafeGuessKindToResource(gvk); a == singular.Resource {
			return true
		}
	} else if a+"s" == gr.Resource {
		return true // the singular of a custom resource whose kind the file does not say
	}
	for _, sn := range shortNames[a] {
		if sn == gr {
			return true
		}
	}
	return false
}
