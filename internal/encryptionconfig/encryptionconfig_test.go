package encryptionconfig_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/boltinformer/boltinformer/internal/encryptionconfig"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func b64(fill byte, n int) string {
	return base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{fill}, n))
}

var valid = `# the agent's keys
apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
- resources:
  - secrets
  - widgets.example.com
  providers:
  - aesgcm:
      keys:
      - name: k2
        secret: ` + b64(2, 32) + `
      - name: k1
        secret: ` + b64(1, 16) + `
  - aesgcm:
      keys:
      - name: k0
        secret: ` + b64(9, 24) + `
      - name: k1
        secret: ` + b64(1, 16) + `
  - identity: {}
- resources: [configmaps]
  providers:
  - identity: {}
  - aesgcm:
      keys:
      - {name: old, secret: "` + b64(3, 32) + `"}
- resources: [deployments.apps]
  providers:
  - identity: {}
`

func TestParse(t *testing.T) {
	c, err := encryptionconfig.Parse([]byte(valid))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.Names(), ","); got != "secrets,widgets.example.com,configmaps,deployments.apps" {
		t.Fatalf("names %s", got)
	}
	secrets := c.For(schema.GroupResource{Resource: "secrets"})
	if secrets == nil || secrets.Current != "k2" || len(secrets.Keys) != 3 ||
		!bytes.Equal(secrets.Keys["k0"], bytes.Repeat([]byte{9}, 24)) || !bytes.Equal(secrets.Keys["k1"], bytes.Repeat([]byte{1}, 16)) {
		t.Fatalf("secrets: %+v", secrets)
	}
	if w := c.For(schema.GroupResource{Group: "example.com", Resource: "widgets"}); w != secrets {
		t.Errorf("widgets.example.com has another keyring than secrets: %+v", w)
	}
	// identity first: nothing is sealed, the keys open older records.
	if cm := c.For(schema.GroupResource{Resource: "configmaps"}); cm == nil || cm.Current != "" || len(cm.Keys) != 1 {
		t.Errorf("configmaps: %+v", cm)
	}
	for _, gr := range []schema.GroupResource{
		{Group: "apps", Resource: "deployments"}, // identity only
		{Group: "events.k8s.io", Resource: "secrets"},
		{Resource: "widgets"},
		{Resource: "pods"},
	} {
		if k := c.For(gr); k != nil {
			t.Errorf("%s: keyring %+v, want none", gr, k)
		}
	}
	var nilConfig *encryptionconfig.Config
	if nilConfig.For(schema.GroupResource{Resource: "secrets"}) != nil || nilConfig.Names() != nil {
		t.Error("a nil Config has keys")
	}
	// JSON is YAML.
	if _, err := encryptionconfig.Parse([]byte(`{"apiVersion":"apiserver.config.k8s.io/v1","kind":"EncryptionConfiguration","resources":[{"resources":["secrets"],"providers":[{"aesgcm":{"keys":[{"name":"a","secret":"` + b64(1, 32) + `"}]}}]}]}`)); err != nil {
		t.Error(err)
	}
}

func TestParseErrors(t *testing.T) {
	head := "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\n"
	gcm := func(keys string) string {
		return head + "resources:\n- resources: [secrets]\n  providers:\n  - aesgcm:\n      keys:\n" + keys
	}
	secret := b64(5, 32)
	for _, tc := range []struct{ name, in, want string }{
		{"empty", "", `apiVersion "" kind ""`},
		{"other kind", "apiVersion: v1\nkind: ConfigMap\n", `apiVersion "v1" kind "ConfigMap", want apiVersion apiserver.config.k8s.io/v1 kind EncryptionConfiguration`},
		{"old apiVersion", "apiVersion: apiserver.k8s.io/v1\nkind: EncryptionConfiguration\n", `apiVersion "apiserver.k8s.io/v1"`},
		{"no resources", head, "no resources"},
		{"nothing named", head + "resources:\n- providers: [{identity: {}}]\n", "resources[0]: no resources named"},
		{"no providers", head + "resources:\n- resources: [secrets]\n", "resources[0] (secrets): no providers"},
		{"typo", head + "resources:\n- resources: [secrets]\n  provider: [{identity: {}}]\n", `unknown field "provider"`},
		{"empty provider", head + "resources:\n- resources: [secrets]\n  providers: [{}]\n", "providers[0]: no provider (want aesgcm or identity)"},
		{"two in one", head + "resources:\n- resources: [secrets]\n  providers: [{identity: {}, aesgcm: {keys: [{name: a, secret: " + secret + "}]}}]\n", "more than one provider in one item"},
		{"aescbc", head + "resources:\n- resources: [secrets]\n  providers:\n  - aescbc: {keys: [{name: a, secret: " + secret + "}]}\n", "providers[0]: aescbc is not supported: boltinformer seals records with AES-GCM; use an aesgcm provider"},
		{"aescbc later", head + "resources:\n- resources: [secrets]\n  providers:\n  - identity: {}\n  - aescbc: {keys: [{name: a, secret: " + secret + "}]}\n", "providers[1]: aescbc is not supported"},
		{"secretbox", head + "resources:\n- resources: [secrets]\n  providers:\n  - secretbox: {keys: [{name: a, secret: " + secret + "}]}\n", "secretbox is not supported"},
		{"kms", head + "resources:\n- resources: [secrets]\n  providers:\n  - kms: {apiVersion: v2, name: vault, endpoint: unix:///kms.sock}\n", "kms is not supported"},
		{"no keys", head + "resources:\n- resources: [secrets]\n  providers: [{aesgcm: {keys: []}}]\n", "aesgcm has no keys"},
		{"no name", gcm("      - secret: " + secret + "\n"), "providers[0].aesgcm.keys[0]: want a name"},
		{"not base64", gcm("      - name: a\n        secret: '!!!'\n"), `keys[0] ("a"): secret is not standard base64`},
		{"short", gcm("      - name: a\n        secret: " + b64(1, 8) + "\n"), `keys[0] ("a"): secret is 8 bytes, want 16, 24 or 32 (AES-GCM)`},
		{"name twice", gcm("      - name: a\n        secret: " + secret + "\n      - name: a\n        secret: " + b64(6, 32) + "\n"), `keys[1]: key name "a" is given twice with different secrets`},
		{"wildcard", head + "resources:\n- resources: ['*.*']\n  providers: [{identity: {}}]\n", `resource "*.*": wildcards are not supported`},
		{"core wildcard", head + "resources:\n- resources: ['*.']\n  providers: [{identity: {}}]\n", "wildcards are not supported"},
		{"upper case", head + "resources:\n- resources: [Secrets]\n  providers: [{identity: {}}]\n", `resource "Secrets": resource names are lower case`},
		{"bad group", head + "resources:\n- resources: [widgets.-x]\n  providers: [{identity: {}}]\n", `resource "widgets.-x": group "-x"`},
		{"twice", head + "resources:\n- resources: [secrets]\n  providers: [{identity: {}}]\n- resources: [configmaps, secrets]\n  providers: [{identity: {}}]\n", `resources[1]: resource "secrets" is also in resources[0]`},
		{"key lines", "# keyid:base64key\nk1:" + secret + "\n", `this looks like the "keyid:base64key" lines of earlier versions`},
		{"not yaml", "resources: [", "error converting YAML to JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := encryptionconfig.Parse([]byte(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, encryptionconfig.ErrInvalid) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if strings.Contains(err.Error(), secret) {
				t.Fatalf("the error shows a secret: %v", err)
			}
		})
	}
}

func TestRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.yaml")
	if err := os.WriteFile(path, []byte(valid), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := encryptionconfig.Read(path); err != nil {
		t.Fatal(err)
	}
	if _, err := encryptionconfig.Read(path + ".missing"); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
	if err := os.WriteFile(path, []byte("kind: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := encryptionconfig.Read(path); err == nil || !strings.HasPrefix(err.Error(), path+": encryptionconfig: invalid") {
		t.Fatalf("bad file: %v", err)
	}
}

// Parse never panics, and what it accepts is usable: every keyring
// builds, each resource is named once, and its name is its GroupResource.
func FuzzParse(f *testing.F) {
	f.Add([]byte(valid))
	f.Add([]byte("k1:" + b64(1, 32) + "\n"))
	f.Add([]byte("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [a.b]\n  providers: [{identity: {}}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := encryptionconfig.Parse(data)
		if err != nil {
			if !errors.Is(err, encryptionconfig.ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		seen := map[schema.GroupResource]bool{}
		for _, r := range c.Resources {
			if seen[r.GroupResource] {
				t.Fatalf("%s twice", r.GroupResource)
			}
			seen[r.GroupResource] = true
			name := r.GroupResource.Resource
			if r.GroupResource.Group != "" {
				name += "." + r.GroupResource.Group
			}
			if name != r.Name {
				t.Fatalf("name %q parsed as %+v", r.Name, r.GroupResource)
			}
			if r.Keyring != nil {
				if err := r.Keyring.Validate(); err != nil {
					t.Fatalf("%s: %v", r.Name, err)
				}
			}
			if c.For(r.GroupResource) != r.Keyring {
				t.Fatalf("%s: For returns another keyring", r.Name)
			}
		}
	})
}

// TestRegressionKeyFileTrusted (issue 23, finding 8): the key file is
// refused, as the local API's token is, when group or others may read or
// write it, when another user owns it, when it is a symbolic link, or when
// its directory is writable by others; the error names the path and the
// reason. It was read whatever its mode, and through symbolic links.
func TestRegressionKeyFileTrusted(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "keys.yaml")
	if err := os.WriteFile(path, []byte(valid), 0o600); err != nil {
		t.Fatal(err)
	}
	refused := func(t *testing.T, p string, want ...string) {
		t.Helper()
		_, err := encryptionconfig.Read(p)
		if err == nil || !errors.Is(err, encryptionconfig.ErrUntrusted) {
			t.Fatalf("%s: %v, want ErrUntrusted", p, err)
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Fatalf("%v, want it to say %q", err, w)
			}
		}
	}
	for _, mode := range []os.FileMode{0o644, 0o640, 0o604, 0o620} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		refused(t, path, path, fmt.Sprintf("mode %04o", mode))
	}
	if err := os.Chmod(path, 0o400); err != nil {
		t.Fatal(err)
	}
	if _, err := encryptionconfig.Read(path); err != nil {
		t.Fatalf("mode 0400: %v", err)
	}
	link := filepath.Join(dir, "link.yaml")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	refused(t, link, link, "symbolic link")
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	refused(t, path, dir, "directory mode 0777")
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(path, 12345, 12345); err != nil {
		t.Skipf("SKIPPED LOUDLY: cannot give %s to another user (run as root): %v", path, err)
	}
	refused(t, path, path, "owned by uid 12345")
}
