package localapi_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/boltinformer/boltinformer/localapi"
)

// otherUID owns what "another user" plants in these tests (root can
// chown to it).
const otherUID = 12345

// asOther makes path another user's; tests that need it are skipped,
// loudly, when the process may not chown.
func asOther(t *testing.T, path string) {
	t.Helper()
	if err := os.Lchown(path, otherUID, otherUID); err != nil {
		t.Skipf("SKIPPED LOUDLY: cannot give %s to another user (run as root): %v", path, err)
	}
}

// TestRegressionUntrustedTokenAndCert (issue 23, finding 7): the token,
// the TLS key and certificate, and the directories that hold them (and
// the socket) are refused when another user owns them or may write them,
// as ssh refuses them (StrictModes); the error names the path and why.
// Before, a token another user planted in a directory of mode 777 was
// used: that user could then read the cache through the local API.
func TestRegressionUntrustedTokenAndCert(t *testing.T) {
	// A token of its own, mode 0600, in a private directory: fine.
	ok := t.TempDir()
	if _, err := localapi.LoadOrCreateToken(filepath.Join(ok, "token")); err != nil {
		t.Fatal(err)
	}
	if _, err := localapi.LoadOrCreateCert(filepath.Join(ok, "tls.crt"), filepath.Join(ok, "tls.key")); err != nil {
		t.Fatal(err)
	}
	// Under a sticky directory writable by all (/tmp's mode): fine too.
	sticky := t.TempDir()
	if err := os.Chmod(sticky, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	private := filepath.Join(sticky, "state")
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := localapi.LoadOrCreateToken(filepath.Join(private, "token")); err != nil {
		t.Fatalf("a private directory under a sticky one: %v", err)
	}

	refused := func(t *testing.T, err error, want ...string) {
		t.Helper()
		if err == nil || !errors.Is(err, localapi.ErrToken) {
			t.Fatalf("%v, want ErrToken", err)
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Fatalf("%v, want it to say %q", err, w)
			}
		}
	}
	t.Run("directory writable by all", func(t *testing.T) {
		dir := t.TempDir()
		tok := filepath.Join(dir, "token")
		if _, err := localapi.LoadOrCreateToken(tok); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, 0o777); err != nil {
			t.Fatal(err)
		}
		_, err := localapi.LoadOrCreateToken(tok)
		refused(t, err, dir, "mode 0777", "may write")
		_, err = localapi.LoadOrCreateToken(filepath.Join(dir, "new-token"))
		refused(t, err, dir, "mode 0777")
		_, err = localapi.LoadOrCreateCert(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
		refused(t, err, dir, "mode 0777")
		if _, err := localapi.ListenUnix(filepath.Join(dir, "api.sock")); err == nil || !strings.Contains(err.Error(), "mode 0777") {
			t.Fatalf("a socket in a directory writable by all: %v", err)
		}
	})
	t.Run("parent writable by all", func(t *testing.T) {
		parent := t.TempDir()
		dir := filepath.Join(parent, "state")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(parent, 0o777); err != nil {
			t.Fatal(err)
		}
		_, err := localapi.LoadOrCreateToken(filepath.Join(dir, "token"))
		refused(t, err, parent, "mode 0777")
	})
	t.Run("token planted by another user", func(t *testing.T) {
		dir := t.TempDir()
		tok := filepath.Join(dir, "token")
		if err := os.WriteFile(tok, []byte("planted\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		asOther(t, tok)
		_, err := localapi.LoadOrCreateToken(tok)
		refused(t, err, tok, "owned by uid 12345")
	})
	t.Run("directory of another user", func(t *testing.T) {
		dir := t.TempDir()
		tok := filepath.Join(dir, "token")
		if _, err := localapi.LoadOrCreateToken(tok); err != nil {
			t.Fatal(err)
		}
		asOther(t, dir)
		_, err := localapi.LoadOrCreateToken(tok)
		refused(t, err, dir, "owned by uid 12345")
	})
	t.Run("key and certificate of another user", func(t *testing.T) {
		for _, name := range []string{"tls.key", "tls.crt"} {
			dir := t.TempDir()
			crt, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
			if _, err := localapi.LoadOrCreateCert(crt, key); err != nil {
				t.Fatal(err)
			}
			asOther(t, filepath.Join(dir, name))
			_, err := localapi.LoadOrCreateCert(crt, key)
			refused(t, err, filepath.Join(dir, name), "owned by uid 12345")
		}
	})
	t.Run("certificate writable by others", func(t *testing.T) {
		dir := t.TempDir()
		crt, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
		if _, err := localapi.LoadOrCreateCert(crt, key); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(crt, 0o666); err != nil {
			t.Fatal(err)
		}
		_, err := localapi.LoadOrCreateCert(crt, key)
		refused(t, err, crt, "mode 0666", "may write")
	})
}
