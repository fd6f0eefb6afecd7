package localapi

import (
	"os"
	"regexp"
	"testing"
)

// TestClientGoKubernetesVersion: the fallback version of /version is the
// one of the client-go in go.mod.
func TestClientGoKubernetesVersion(t *testing.T) {
	b, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*k8s.io/client-go v0\.(\d+\.\d+)`).FindSubmatch(b)
	if m == nil {
		t.Fatal("no k8s.io/client-go in go.mod")
	}
	if want := "v1." + string(m[1]); clientGoKubernetesVersion != want {
		t.Fatalf("clientGoKubernetesVersion %s, go.mod's client-go is Kubernetes %s", clientGoKubernetesVersion, want)
	}
}
