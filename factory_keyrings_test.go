package boltinformer_test

// FactoryOptions.Keyrings: entries written as kubectl names resources
// encrypt those resources; an entry that can never match is NewFactory's
// error, never plaintext.

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/store"
)

// secretPlaintext is in every test Secret's data: found on disk, a payload
// is not sealed.
const secretPlaintext = "hunter2-plaintext-marker"

func testKeyring(id string, fill byte) *boltinformer.Keyring {
	return &boltinformer.Keyring{Current: id, Keys: map[string][]byte{id: bytes.Repeat([]byte{fill}, 32)}}
}

func testSecret(i int) *corev1.Secret {
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: fmt.Sprintf("s%04d", i), UID: types.UID(fmt.Sprintf("uid-s%04d", i)), ResourceVersion: "10"},
		Data:       map[string][]byte{"password": []byte(secretPlaintext)},
	}
	return s
}

// offlineFactory is a factory whose server is unreachable (the tests
// write through the informers' indexers), on a new file.
func offlineFactory(t *testing.T, keyrings map[string]*boltinformer.Keyring) (*boltinformer.DB, *boltinformer.Factory, error) {
	t.Helper()
	db, err := boltinformer.Open(filepath.Join(t.TempDir(), "cache.db"), &boltinformer.Options{Logger: &quietLogger, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	f, err := boltinformer.NewFactory(db, &rest.Config{Host: unreachable(t)}, &boltinformer.FactoryOptions{ClusterID: "c1", Keyrings: keyrings})
	return db, f, err
}

// recordsOf returns the records of informer, by key.
func recordsOf(t *testing.T, db *boltinformer.DB, informer string) map[string]*store.Record {
	t.Helper()
	out := map[string]*store.Record{}
	err := db.Store().View(func(tx *store.Tx) error {
		return tx.ForEach(informer, func(key string, r *store.Record) error {
			out[key] = r
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// checkSealed checks that informer has n records, all with key id keyID,
// and, when keyID is not "", that no payload holds secretPlaintext.
func checkSealed(t *testing.T, db *boltinformer.DB, informer, keyID string, n int) {
	t.Helper()
	recs := recordsOf(t, db, informer)
	if len(recs) != n {
		t.Fatalf("informer %q has %d records, want %d", informer, len(recs), n)
	}
	for k, r := range recs {
		if r.KeyID != keyID {
			t.Errorf("informer %q record %q: key id %q, want %q", informer, k, r.KeyID, keyID)
		}
		if keyID != "" && bytes.Contains(r.Payload, []byte(secretPlaintext)) {
			t.Errorf("informer %q record %q: the payload holds the plaintext", informer, k)
		}
	}
}

// TestRegressionKeyringsByResourceName: an entry written as the docs (and
// kubectl) write resources encrypts them; only "/v1, Resource=secrets"
// did, and "secrets" stored Secrets in plaintext without an error.
func TestRegressionKeyringsByResourceName(t *testing.T) {
	for _, entry := range []string{"secrets", "secret", "Secrets", "secrets.v1.", "v1/secrets", "/v1, Resource=secrets"} {
		t.Run(entry, func(t *testing.T) {
			db, f, err := offlineFactory(t, map[string]*boltinformer.Keyring{entry: testKeyring("k1", 1)})
			if err != nil {
				t.Fatal(err)
			}
			inf, err := f.PersistentInformer(&corev1.Secret{})
			if err != nil {
				t.Fatal(err)
			}
			if err := inf.GetStore().Replace([]any{testSecret(0), testSecret(1)}, "10"); err != nil {
				t.Fatal(err)
			}
			if err := inf.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			checkSealed(t, db, inf.Name(), "k1", 2)
			// Other resources stay plaintext.
			cms, err := f.PersistentInformer(&corev1.ConfigMap{})
			if err != nil {
				t.Fatal(err)
			}
			if cms.Indexer().Codec().Encrypted() {
				t.Fatalf("Keyrings[%q] encrypts configmaps", entry)
			}
		})
	}
	// Group-qualified, and custom resources by their CRD name.
	for _, c := range []struct {
		entry string
		gvr   schema.GroupVersionResource
	}{
		{"deployments.apps", appsv1.SchemeGroupVersion.WithResource("deployments")},
		{"deployments.v1.apps", appsv1.SchemeGroupVersion.WithResource("deployments")},
		{"apps/v1/deployments", appsv1.SchemeGroupVersion.WithResource("deployments")},
		{"widgets.example.com", schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}},
		{"widgets.v1.example.com", schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}},
	} {
		t.Run(c.entry, func(t *testing.T) {
			_, f, err := offlineFactory(t, map[string]*boltinformer.Keyring{c.entry: testKeyring("k1", 1)})
			if err != nil {
				t.Fatal(err)
			}
			var inf *boltinformer.Informer
			if c.gvr.Group == "apps" {
				inf, err = f.PersistentInformer(&appsv1.Deployment{})
			} else {
				inf, err = f.DynamicInformer(c.gvr, nil)
			}
			if err != nil {
				t.Fatal(err)
			}
			if !inf.Indexer().Codec().Encrypted() {
				t.Fatalf("Keyrings[%q] does not encrypt %s", c.entry, c.gvr)
			}
			other, err := f.DynamicInformer(schema.GroupVersionResource{Group: "other.example.com", Version: "v1", Resource: "widgets"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if other.Indexer().Codec().Encrypted() {
				t.Fatalf("Keyrings[%q] encrypts widgets of another group", c.entry)
			}
		})
	}
	// The dynamic informer of a built-in resource is encrypted too.
	db, f, err := offlineFactory(t, map[string]*boltinformer.Keyring{"secrets": testKeyring("k1", 1)})
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := f.DynamicInformer(corev1.SchemeGroupVersion.WithResource("secrets"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !dyn.Indexer().Codec().Encrypted() {
		t.Fatal("the dynamic secrets informer is not encrypted")
	}
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("v1")
	u.SetKind("Secret")
	u.SetNamespace("prod")
	u.SetName("u")
	u.SetResourceVersion("10")
	if err := unstructured.SetNestedField(u.Object, secretPlaintext, "stringData", "password"); err != nil {
		t.Fatal(err)
	}
	if err := dyn.GetStore().Replace([]any{u}, "10"); err != nil {
		t.Fatal(err)
	}
	if err := dyn.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkSealed(t, db, dyn.Name(), "k1", 1)
}

// TestRegressionKeyringsUnmatchedEntry: an entry that can never match a
// resource is NewFactory's error (it was silently ignored, and the
// resource it meant stored in plaintext).
func TestRegressionKeyringsUnmatchedEntry(t *testing.T) {
	for _, entry := range []string{
		"secrest",                  // not a built-in resource
		"widgets",                  // a custom resource must be group-qualified
		"secrets.v1",               // "v1" is a version, not a group
		"deployments.batch",        // a built-in group without that resource
		"deployments.v1beta9.apps", // no such version
		"/v1, Resource=secrest",
		"v1/secrest",
		"widgets.example",      // a dotless group that is not built in
		"Widgets_.example.com", // not a DNS label
		"a/b/c/d",
		"",
	} {
		t.Run(entry, func(t *testing.T) {
			_, _, err := offlineFactory(t, map[string]*boltinformer.Keyring{entry: testKeyring("k1", 1)})
			if err == nil || !strings.Contains(err.Error(), "never match") {
				t.Fatalf("NewFactory with Keyrings[%q]: %v, want an error saying it can never match", entry, err)
			}
		})
	}
	for name, keyrings := range map[string]map[string]*boltinformer.Keyring{
		"nil keyring":      {"secrets": nil},
		"bad key length":   {"secrets": {Current: "k1", Keys: map[string][]byte{"k1": []byte("short")}}},
		"current missing":  {"secrets": {Current: "k2", Keys: map[string][]byte{"k1": bytes.Repeat([]byte{1}, 32)}}},
		"no keys":          {"secrets": {}},
		"two keyrings":     {"secrets": testKeyring("k1", 1), "/v1, Resource=secrets": testKeyring("k2", 2)},
		"any group vs one": {"events": testKeyring("k1", 1), "events.events.k8s.io": testKeyring("k2", 2)},
	} {
		t.Run(name, func(t *testing.T) {
			if _, _, err := offlineFactory(t, keyrings); err == nil {
				t.Fatalf("NewFactory with Keyrings %v: no error", keyrings)
			}
		})
	}
	// The same keyring under two names is fine.
	k := testKeyring("k1", 1)
	if _, _, err := offlineFactory(t, map[string]*boltinformer.Keyring{"secrets": k, "/v1, Resource=secrets": k}); err != nil {
		t.Fatal(err)
	}
}
