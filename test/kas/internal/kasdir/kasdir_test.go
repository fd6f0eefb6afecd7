package kasdir_test

import (
	"os"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/boltinformer/boltinformer/test/kas/internal/kasdir"
)

func TestPrepareIsStable(t *testing.T) {
	l := kasdir.Layout{Dir: t.TempDir()}
	c1, err := l.Prepare()
	if err != nil {
		t.Fatal(err)
	}
	kc1, err := os.ReadFile(l.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	c2, err := l.Prepare()
	if err != nil {
		t.Fatal(err)
	}
	kc2, _ := os.ReadFile(l.Kubeconfig())
	if c1 != c2 || string(kc1) != string(kc2) {
		t.Fatalf("second Prepare changed the credentials: %+v -> %+v", c1, c2)
	}

	cfg, err := clientcmd.BuildConfigFromFlags("", l.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(cfg.Host, "https://127.0.0.1:") || cfg.BearerToken != c1.Token || len(cfg.CAData) == 0 {
		t.Fatalf("kubeconfig: host %s, token set %v, CA %d bytes", cfg.Host, cfg.BearerToken == c1.Token, len(cfg.CAData))
	}
	tok, err := os.ReadFile(l.TokenFile())
	if err != nil {
		t.Fatal(err)
	}
	if want := c1.Token + "," + kasdir.User + "," + kasdir.User + `,"system:masters"` + "\n"; string(tok) != want {
		t.Fatalf("token file %q, want %q", tok, want)
	}
	for _, p := range []string{l.ServiceAccountKey(), l.ServingCert(), l.ServingKey(), l.PortFile()} {
		if _, err := os.Stat(p); err != nil {
			t.Fatal(err)
		}
	}
}

func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	p := dir + "/f"
	for _, s := range []string{"one", "two"} {
		if err := kasdir.WriteFileAtomic(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(p)
		if err != nil || string(b) != s {
			t.Fatalf("read %q, %v; want %q", b, err, s)
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("%d files left, want 1", len(ents))
	}
}
