package kasbuild

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
)

// KubectlPackage is the kubectl that go.mod's tool directive names: the
// one of the same Kubernetes version as the apiserver.
const KubectlPackage = "k8s.io/kubernetes/cmd/kubectl"

// BuildKubectl returns the path of a kubectl built from the module's
// Kubernetes sources (go.mod's `tool` directive keeps them there), cached
// like kas under <cache>/kubectl-<hash>/kubectl, where the hash covers
// go.mod, go.sum, the Go version and the ldflags. $KUBECTL_BINARY skips the
// build. A cold build takes minutes.
func BuildKubectl(ctx context.Context, opts Options) (Result, error) {
	res, _, err := buildCached(ctx, opts, target{
		env: "KUBECTL_BINARY", name: "kubectl", pkg: KubectlPackage, cost: "cold: minutes", hash: kubectlHash,
	})
	return res, err
}

// kubectlHash names the kubectl of the module in mod: go.mod, go.sum, the
// Go version and the ldflags.
func kubectlHash(mod string) (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "go %s\nldflags %s\npackage %s\n", goVersion(), LDFlags, KubectlPackage)
	for _, name := range []string{"go.mod", "go.sum"} {
		b, err := os.ReadFile(filepath.Join(mod, name))
		if err != nil {
			return "", fmt.Errorf("kasbuild: %w", err)
		}
		fmt.Fprintf(h, "file %s\n", name)
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}
