// Package encryptionconfig reads the key file that the agents and
// cmd/inspect share: a Kubernetes EncryptionConfiguration
// (apiserver.config.k8s.io/v1), the file kube-apiserver takes with
// --encryption-provider-config, so that an operator writes and rotates the
// keys of a cache the way they do an API server's.
//
// What it reads, of that format:
//
//	apiVersion: apiserver.config.k8s.io/v1
//	kind: EncryptionConfiguration
//	resources:
//	- resources: [secrets, widgets.example.com]   # resource or resource.group
//	  providers:
//	  - aesgcm:                  # the first provider seals; every one opens
//	      keys:
//	      - name: k2             # the key id records name
//	        secret: <base64 of 16, 24 or 32 bytes>
//	      - name: k1             # an older key, to open older records
//	        secret: ...
//	  - identity: {}             # plaintext records are read too
//
// Each resources entry gives its resources one keyring: the aesgcm keys of
// all its providers (the records name the key that sealed them), the
// current key being the first provider's first key, or none when the
// first provider is identity (records are then stored in plaintext and the
// keys only open older ones, which the informer rewrites in plaintext).
// An entry whose only provider is identity has no keyring.
//
// What it refuses, with an error that says so (never a key silently
// ignored, never a resource silently left in plaintext):
//   - aescbc, secretbox and kms providers: boltinformer's records are
//     sealed with AES-GCM (nonce and tag in the record, authenticated with
//     the record's key), a format none of them can be read from or written
//     to; Kubernetes itself recommends against aescbc;
//   - wildcards (*.*, *.apps, *.): boltinformer encrypts the resources it
//     is told, by name; a wildcard that also covered what the agent caches
//     later would change its files' keys without a word;
//   - a resource named twice, two keys of one name with different secrets,
//     unknown fields (a misspelled "provider:" would otherwise mean no
//     encryption), and any other apiVersion or kind.
package encryptionconfig

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"unicode"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/boltinformer/boltinformer/internal/codec"
	"github.com/boltinformer/boltinformer/internal/safefile"
)

// APIVersion and Kind are the file's type.
const (
	APIVersion = "apiserver.config.k8s.io/v1"
	Kind       = "EncryptionConfiguration"
)

// ErrInvalid is wrapped by every error about the file's content.
var ErrInvalid = errors.New("encryptionconfig: invalid EncryptionConfiguration")

// Config is a parsed EncryptionConfiguration.
type Config struct {
	// Resources are the file's resources entries, one per resource name,
	// in the file's order.
	Resources []Resource
}

// Resource is one resource the file names, with its keyring.
type Resource struct {
	// Name is the resource as the file names it: "secrets" (the core
	// group) or "resource.group" ("deployments.apps",
	// "widgets.example.com").
	Name string
	// GroupResource is Name parsed.
	GroupResource schema.GroupResource
	// Keyring opens (and, with Current set, seals) the resource's records;
	// nil when the entry's only provider is identity (plaintext).
	Keyring *codec.Keyring
}

// For returns the keyring of gr: the entry naming it, or nil when no entry
// does or its entry is identity only.
func (c *Config) For(gr schema.GroupResource) *codec.Keyring {
	if c == nil {
		return nil
	}
	for _, r := range c.Resources {
		if r.GroupResource == gr {
			return r.Keyring
		}
	}
	return nil
}

// Names returns the resource names of the file, in order.
func (c *Config) Names() []string {
	if c == nil {
		return nil
	}
	names := make([]string, len(c.Resources))
	for i, r := range c.Resources {
		names[i] = r.Name
	}
	return names
}

// The file's types: our own, of the fields this package reads, strict (an
// unknown field is an error). The providers this package refuses are kept
// as raw values, only to be named in the error.
type file struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Resources  []resourceEntry `json:"resources"`
}

type resourceEntry struct {
	Resources []string   `json:"resources"`
	Providers []provider `json:"providers"`
}

type provider struct {
	AESGCM    *aesConfig      `json:"aesgcm,omitempty"`
	AESCBC    *map[string]any `json:"aescbc,omitempty"`
	Secretbox *map[string]any `json:"secretbox,omitempty"`
	Identity  *struct{}       `json:"identity,omitempty"`
	KMS       *map[string]any `json:"kms,omitempty"`
}

type aesConfig struct {
	Keys []key `json:"keys"`
}

type key struct {
	Name   string `json:"name"`
	Secret string `json:"secret"`
}

// ErrUntrusted is wrapped by the error of a key file that ReadFile does
// not trust.
var ErrUntrusted = safefile.ErrUntrusted

// ReadFile reads the key file at path when it may be trusted with keys,
// as the local API's token is (ssh's StrictModes): a regular file, not a
// symbolic link (give the file itself: in a Kubernetes Secret volume,
// DIR/..data/NAME), owned by this process's user or root, that group and
// others may neither read nor write (mode 0600 or 0400), in a directory
// that another user neither owns nor may write, nor one above it (but a
// sticky one, as /tmp). Otherwise its error names the path and the reason
// and wraps ErrUntrusted. kube-apiserver reads its
// --encryption-provider-config whatever its mode: these files hold the
// keys of a node's cache, often on a machine shared with other users.
func ReadFile(path string) ([]byte, error) {
	return safefile.ReadTrusted(path, true)
}

// Read reads (ReadFile) and parses the file at path.
func Read(path string) (*Config, error) {
	data, err := ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("encryptionconfig: %w", err)
	}
	c, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Parse parses an EncryptionConfiguration (YAML or JSON). Its errors wrap
// ErrInvalid and never contain a secret's value.
func Parse(data []byte) (*Config, error) {
	if looksLikeKeyLines(data) {
		return nil, fmt.Errorf(`%w: this looks like the "keyid:base64key" lines of earlier versions; `+
			`write an EncryptionConfiguration instead (apiVersion: %s, kind: %s, `+
			`with each key as {name: keyid, secret: base64key} of an aesgcm provider)`, ErrInvalid, APIVersion, Kind)
	}
	var f file
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err) // names fields, never values
	}
	if f.APIVersion != APIVersion || f.Kind != Kind {
		return nil, fmt.Errorf("%w: apiVersion %q kind %q, want apiVersion %s kind %s", ErrInvalid, f.APIVersion, f.Kind, APIVersion, Kind)
	}
	if len(f.Resources) == 0 {
		return nil, fmt.Errorf("%w: no resources", ErrInvalid)
	}
	c := &Config{}
	seen := map[string]int{} // resource name -> entry
	for i, e := range f.Resources {
		where := fmt.Sprintf("resources[%d]", i)
		if len(e.Resources) == 0 {
			return nil, fmt.Errorf("%w: %s: no resources named", ErrInvalid, where)
		}
		k, err := keyring(e.Providers)
		if err != nil {
			return nil, fmt.Errorf("%w: %s (%s): %v", ErrInvalid, where, strings.Join(e.Resources, ", "), err)
		}
		for _, name := range e.Resources {
			gr, err := parseResource(name)
			if err != nil {
				return nil, fmt.Errorf("%w: %s: resource %q: %v", ErrInvalid, where, name, err)
			}
			if j, dup := seen[gr.String()]; dup {
				return nil, fmt.Errorf("%w: %s: resource %q is also in resources[%d]: name each resource once", ErrInvalid, where, name, j)
			}
			seen[gr.String()] = i
			c.Resources = append(c.Resources, Resource{Name: name, GroupResource: gr, Keyring: k})
		}
	}
	return c, nil
}

// keyring builds the keyring of one entry's providers: nil for identity
// alone.
func keyring(providers []provider) (*codec.Keyring, error) {
	if len(providers) == 0 {
		return nil, errors.New("no providers")
	}
	k := &codec.Keyring{Keys: map[string][]byte{}}
	for i, p := range providers {
		kind, n := "", 0
		for _, set := range []struct {
			name string
			on   bool
		}{{"aesgcm", p.AESGCM != nil}, {"aescbc", p.AESCBC != nil}, {"secretbox", p.Secretbox != nil}, {"identity", p.Identity != nil}, {"kms", p.KMS != nil}} {
			if set.on {
				kind, n = set.name, n+1
			}
		}
		switch {
		case n == 0:
			return nil, fmt.Errorf("providers[%d]: no provider (want aesgcm or identity)", i)
		case n > 1:
			return nil, fmt.Errorf("providers[%d]: more than one provider in one item (one per list item)", i)
		}
		switch kind {
		case "identity":
			continue
		case "aescbc", "secretbox", "kms":
			return nil, fmt.Errorf("providers[%d]: %s is not supported: boltinformer seals records with AES-GCM; use an aesgcm provider (keys of 16, 24 or 32 bytes)", i, kind)
		}
		if len(p.AESGCM.Keys) == 0 {
			return nil, fmt.Errorf("providers[%d]: aesgcm has no keys", i)
		}
		for j, key := range p.AESGCM.Keys {
			where := fmt.Sprintf("providers[%d].aesgcm.keys[%d]", i, j)
			if key.Name == "" || len(key.Name) > 256 || strings.ContainsFunc(key.Name, unicode.IsControl) {
				return nil, fmt.Errorf("%s: want a name of 1 to 256 printable characters", where)
			}
			secret, err := base64.StdEncoding.DecodeString(key.Secret)
			if err != nil {
				return nil, fmt.Errorf("%s (%q): secret is not standard base64", where, key.Name)
			}
			switch len(secret) {
			case 16, 24, 32:
			default:
				return nil, fmt.Errorf("%s (%q): secret is %d bytes, want 16, 24 or 32 (AES-GCM)", where, key.Name, len(secret))
			}
			if old, dup := k.Keys[key.Name]; dup {
				if !bytes.Equal(old, secret) {
					return nil, fmt.Errorf("%s: key name %q is given twice with different secrets: the records name their key, so names must be unique", where, key.Name)
				}
				continue
			}
			k.Keys[key.Name] = secret
			if i == 0 && j == 0 {
				k.Current = key.Name // the first provider's first key seals
			}
		}
	}
	if len(k.Keys) == 0 {
		return nil, nil // identity only
	}
	if err := k.Validate(); err != nil {
		return nil, err
	}
	return k, nil
}

// parseResource parses "secrets" (the core group) or "resource.group".
func parseResource(name string) (schema.GroupResource, error) {
	if strings.Contains(name, "*") {
		return schema.GroupResource{}, errors.New("wildcards are not supported: name each resource the agent caches (resource, or resource.group)")
	}
	res, group, _ := strings.Cut(name, ".")
	if name != strings.ToLower(name) {
		return schema.GroupResource{}, errors.New("resource names are lower case")
	}
	if errs := validation.IsDNS1123Label(res); len(errs) > 0 {
		return schema.GroupResource{}, errors.New(strings.Join(errs, "; "))
	}
	if strings.Contains(name, ".") {
		if errs := validation.IsDNS1123Subdomain(group); len(errs) > 0 {
			return schema.GroupResource{}, fmt.Errorf("group %q: %s", group, strings.Join(errs, "; "))
		}
	}
	return schema.GroupResource{Group: group, Resource: res}, nil
}

// looksLikeKeyLines reports whether data is in the "keyid:base64key" line
// format of earlier versions: every line that is not blank or a comment is
// one word, a colon and base64, with no YAML key of this format.
func looksLikeKeyLines(data []byte) bool {
	found := false
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		id, b64, ok := strings.Cut(line, ":")
		b64 = strings.TrimSpace(b64)
		if !ok || strings.ContainsAny(id, " \t") || b64 == "" || strings.ContainsAny(b64, " \t") {
			return false
		}
		if _, err := base64.StdEncoding.DecodeString(b64); err != nil {
			if _, err := base64.RawStdEncoding.DecodeString(b64); err != nil {
				return false
			}
		}
		found = true
	}
	return found
}
