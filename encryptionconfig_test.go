package boltinformer_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/boltinformer/boltinformer"
)

func encryptionConfig(resources ...string) string {
	key := func(fill byte) string { return base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{fill}, 32)) }
	s := "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n"
	for _, r := range resources {
		s += "- resources: [" + r + "]\n  providers:\n  - aesgcm:\n      keys:\n      - {name: k2, secret: " + key(2) + "}\n      - {name: k1, secret: " + key(1) + "}\n"
	}
	return s
}

// An EncryptionConfiguration is FactoryOptions.Keyrings: each resource it
// names is sealed with its first key, and only that resource (its core
// "events" are not events.k8s.io's).
func TestReadEncryptionConfiguration(t *testing.T) {
	path := filepath.Join(t.TempDir(), "encryption.yaml")
	cfg := encryptionConfig("secrets, events", "deployments.apps", "widgets.example.com") +
		"- resources: [configmaps]\n  providers:\n  - identity: {}\n"
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	keyrings, err := boltinformer.ReadEncryptionConfiguration(path)
	if err != nil {
		t.Fatal(err)
	}
	var entries []string
	for e, k := range keyrings {
		entries = append(entries, e)
		if k.Current != "k2" || len(k.Keys) != 2 {
			t.Errorf("%s: %+v", e, k)
		}
	}
	sort.Strings(entries)
	if got := strings.Join(entries, ","); got != "deployments.apps,events.v1.,secrets.v1.,widgets.example.com" {
		t.Fatalf("entries %s", got)
	}
	db, f, err := offlineFactory(t, keyrings)
	if err != nil {
		t.Fatal(err)
	}
	secrets, err := f.PersistentInformer(&corev1.Secret{})
	if err != nil {
		t.Fatal(err)
	}
	if err := secrets.GetStore().Replace([]any{testSecret(0)}, "10"); err != nil {
		t.Fatal(err)
	}
	if err := secrets.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkSealed(t, db, secrets.Name(), "k2", 1)
	for _, c := range []struct {
		gvr       schema.GroupVersionResource
		encrypted bool
	}{
		{corev1.SchemeGroupVersion.WithResource("configmaps"), false},
		{corev1.SchemeGroupVersion.WithResource("events"), true},
		{eventsv1.SchemeGroupVersion.WithResource("events"), false},
		{appsv1.SchemeGroupVersion.WithResource("deployments"), true},
		{schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}, true},
	} {
		inf, err := f.DynamicInformer(c.gvr, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := inf.Indexer().Codec().Encrypted(); got != c.encrypted {
			t.Errorf("%s: encrypted %t, want %t", c.gvr, got, c.encrypted)
		}
	}
	if _, err := boltinformer.ReadEncryptionConfiguration(path + ".missing"); err == nil {
		t.Error("no error for a missing file")
	}
}

func TestParseEncryptionConfigurationErrors(t *testing.T) {
	for in, want := range map[string]string{
		encryptionConfig("secret"):                 `resource "secret" would be resource "secrets" of group "": name resources as kube-apiserver does`,
		encryptionConfig("secrest"):                `resource "secrest": group "core" has no resource "secrest"`,
		encryptionConfig("deployments.batch"):      `resource "deployments.batch": group "batch" has no resource "deployments"`,
		encryptionConfig("widgets.v1.example.com"): `resource "widgets.v1.example.com" would be resource "widgets" of group "example.com"`,
		encryptionConfig("'*.*'"):                  "wildcards are not supported",
		"k1:AAAAAAAAAAAAAAAAAAAAAA==\n":            `"keyid:base64key" lines of earlier versions`,
	} {
		_, err := boltinformer.ParseEncryptionConfiguration([]byte(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", in, err, want)
		}
	}
}

// TestRegressionReadEncryptionConfigurationTrusted (issue 23, finding 8):
// ReadEncryptionConfiguration refuses a key file that others may read,
// naming it and why; it read it whatever its mode.
func TestRegressionReadEncryptionConfigurationTrusted(t *testing.T) {
	path := filepath.Join(t.TempDir(), "encryption.yaml")
	if err := os.WriteFile(path, []byte(encryptionConfig("secrets")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := boltinformer.ReadEncryptionConfiguration(path)
	if err == nil || !strings.Contains(err.Error(), path+": mode 0644: group or others may read it") {
		t.Fatalf("a key file of mode 0644: %v", err)
	}
}
