package boltinformer

import (
	"fmt"

	"github.com/boltinformer/boltinformer/internal/encryptionconfig"
)

// ReadEncryptionConfiguration reads the keys of encryption at rest from a
// Kubernetes EncryptionConfiguration file (apiserver.config.k8s.io/v1, the
// file kube-apiserver takes with --encryption-provider-config), as
// FactoryOptions.Keyrings. cmd/inspect's --key-file reads the same file.
//
// Each resources entry gives its resources one keyring: the keys of its
// aesgcm providers (named keys: the records name the key that sealed
// them), sealing with the first provider's first key, or with none when
// the first provider is identity (records are then written in plaintext,
// and the keys open the older ones). An entry whose only provider is
// identity adds nothing. Resources are named as in the file: "secrets"
// (the core group) or "resource.group" ("deployments.apps",
// "widgets.example.com"); the map names them in a Keyrings form of the
// same meaning ("secrets.v1." for the core group's secrets, whatever
// their version).
//
// It refuses, with an error that says why: aescbc, secretbox and kms
// providers (records are sealed with AES-GCM, which none of them reads),
// wildcards (*.*, *.apps: name the resources), a resource named twice,
// two keys of one name with different secrets, unknown fields, and other
// kinds. Its errors never contain a secret.
//
// It reads the file only when it may be trusted with keys, as ssh trusts
// a private key (StrictModes): a regular file, not a symbolic link, of
// this process's user or root, of mode 0600 or 0400, in directories no
// other user owns or may write (sticky ones above its own excepted, as
// /tmp); otherwise the error names the path and the reason. In a
// Kubernetes Secret volume, give DIR/..data/NAME (the file, not the link).
func ReadEncryptionConfiguration(path string) (map[string]*Keyring, error) {
	data, err := encryptionconfig.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("boltinformer: encryption configuration: %w", err)
	}
	k, err := ParseEncryptionConfiguration(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// ParseEncryptionConfiguration is ReadEncryptionConfiguration of the
// file's content.
func ParseEncryptionConfiguration(data []byte) (map[string]*Keyring, error) {
	c, err := encryptionconfig.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("boltinformer: %w", err)
	}
	out := map[string]*Keyring{}
	for _, r := range c.Resources {
		if r.Keyring == nil {
			continue // identity: plaintext
		}
		entry := r.Name
		if r.GroupResource.Group == "" {
			// "secrets" alone is any group's in Keyrings; the file's is
			// the core group's.
			entry = r.GroupResource.Resource + ".v1."
		}
		e, err := parseKeyringEntry(entry)
		if err != nil {
			return nil, fmt.Errorf("boltinformer: %w: resource %q: %v", encryptionconfig.ErrInvalid, r.Name, err)
		}
		if e.group != r.GroupResource.Group || e.resource != r.GroupResource.Resource {
			// A group whose first label looks like a version
			// ("widgets.v1.example.com") reads otherwise in Keyrings.
			return nil, fmt.Errorf("boltinformer: %w: resource %q would be resource %q of group %q: name resources as kube-apiserver does (the plural, then the group)",
				encryptionconfig.ErrInvalid, r.Name, e.resource, e.group)
		}
		keys := make(map[string][]byte, len(r.Keyring.Keys))
		for id, key := range r.Keyring.Keys {
			keys[id] = key
		}
		out[entry] = &Keyring{Current: r.Keyring.Current, Keys: keys}
	}
	return out, nil
}
