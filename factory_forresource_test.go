package boltinformer_test

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/boltinformer/boltinformer"
)

// ForResource serves exactly the resources client-go's factory serves: a
// controller manager's garbage collector and quota controller ask the
// typed factory first and fall back to metadata-only informers on its
// error (k8s.io/controller-manager/pkg/informerfactory), so a resource
// served by one and refused by the other would be watched another way.
func TestFactoryForResourceAsClientGo(t *testing.T) {
	db, _ := openFactoryDB(t)
	client := fake.NewClientset()
	ours := boltinformer.NewSharedInformerFactory(db, client, 0)
	theirs := informers.NewSharedInformerFactory(client, 0)
	n := 0
	for gvk := range scheme.Scheme.AllKnownTypes() {
		if gvk.Version == runtime.APIVersionInternal {
			continue
		}
		plural, _ := meta.UnsafeGuessKindToResource(gvk)
		_, errTheirs := theirs.ForResource(plural)
		_, errOurs := ours.ForResource(plural)
		if (errTheirs == nil) != (errOurs == nil) {
			t.Errorf("ForResource(%v): client-go's error %v, ours %v", plural, errTheirs, errOurs)
		}
		if errTheirs == nil {
			n++
		}
	}
	if n < 50 {
		t.Fatalf("client-go's factory served %d resources of its scheme, want many", n)
	}
}
