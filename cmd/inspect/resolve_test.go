package main

import (
	"testing"

	"github.com/boltinformer/boltinformer/store"
)

// INFORMER as kubectl names resources.
func TestResolveInformer(t *testing.T) {
	db, err := store.Open(fixture(t), &store.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.View(func(tx *store.Tx) error {
		for arg, want := range map[string]string{
			"v1/pods": "v1/pods", "pods": "v1/pods", "pod": "v1/pods", "po": "v1/pods", "Pod": "v1/pods", "PODS": "v1/pods",
			"secret": "v1/secrets", "secrets": "v1/secrets",
			"widgets": "dynamic/example.com/v1/widgets", "widget": "dynamic/example.com/v1/widgets",
			"widgets.example.com": "dynamic/example.com/v1/widgets", "dynamic/example.com/v1/widgets": "dynamic/example.com/v1/widgets",
			"gadget": "example.com/v1/gadgets", "Gadget": "example.com/v1/gadgets", "gadgets.example.com": "example.com/v1/gadgets",
		} {
			got, err := resolveInformer(tx, arg)
			if err != nil || got != want {
				t.Errorf("%q: %q %v, want %q", arg, got, err, want)
			}
		}
		for _, arg := range []string{"deploy", "cm", "pods.apps", "widgets.other.com", "v1", ""} {
			if got, err := resolveInformer(tx, arg); err == nil {
				t.Errorf("%q: %q, want an error", arg, got)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
