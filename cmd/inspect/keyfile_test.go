package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/boltinformer/boltinformer/store"
)

func TestReadKeyFile(t *testing.T) {
	keys, err := readKeyFile(keyFile(t, testKey))
	if err != nil {
		t.Fatal(err)
	}
	if k := keys.For(schema.GroupResource{Resource: "secrets"}); k == nil || string(k.Keys[testKeyID]) != string(testKey) {
		t.Fatalf("%+v", k)
	}
	if k, err := readKeyFile(""); k != nil || err != nil {
		t.Fatalf("no --key-file: %v %v", k, err)
	}
	if _, err := readKeyFile("/nonexistent/keys"); err == nil || !strings.HasPrefix(err.Error(), "--key-file: encryptionconfig: open /nonexistent/keys") {
		t.Errorf("missing file: %v", err)
	}
	// The "keyid:base64key" lines of earlier versions are not read as
	// something else: the error says what to write.
	old := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(old, []byte("# keyid:base64key\nk1:BwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readKeyFile(old); err == nil || !strings.Contains(err.Error(), `"keyid:base64key" lines of earlier versions; write an EncryptionConfiguration`) {
		t.Errorf("old format: %v", err)
	}
}

func TestInformerResource(t *testing.T) {
	for _, tc := range []struct {
		name string
		st   *store.State
		want schema.GroupResource
	}{
		{"v1/secrets", &store.State{Resource: "/v1, Resource=secrets"}, schema.GroupResource{Resource: "secrets"}},
		{"x", &store.State{Resource: "apps/v1, Resource=deployments"}, schema.GroupResource{Group: "apps", Resource: "deployments"}},
		{"x", &store.State{Kind: "/v1, Kind=Secret"}, schema.GroupResource{Resource: "secrets"}},
		{"x", &store.State{Resource: "*v1.ConfigMap"}, schema.GroupResource{Resource: "configmaps"}},
		{"v1/secrets", nil, schema.GroupResource{Resource: "secrets"}},
		{"apps/v1/deployments", &store.State{}, schema.GroupResource{Group: "apps", Resource: "deployments"}},
		{"dynamic/example.com/v1/widgets", nil, schema.GroupResource{Group: "example.com", Resource: "widgets"}},
		{"widgets", nil, schema.GroupResource{Resource: "widgets"}},
	} {
		if got := informerResource(tc.name, tc.st); got != tc.want {
			t.Errorf("%s %+v: %v, want %v", tc.name, tc.st, got, tc.want)
		}
	}
}
