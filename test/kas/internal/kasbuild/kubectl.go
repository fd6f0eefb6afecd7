package kasbuild

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
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
	start := time.Now()
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if bin := os.Getenv("KUBECTL_BINARY"); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return Result{}, fmt.Errorf("kasbuild: $KUBECTL_BINARY: %w", err)
		}
		return Result{Binary: bin, Duration: time.Since(start)}, nil
	}
	mod := opts.ModuleDir
	if mod == "" {
		var err error
		if mod, err = findModuleDir(); err != nil {
			return Result{}, err
		}
	}
	cache := opts.CacheDir
	if cache == "" {
		var err error
		if cache, err = DefaultCacheDir(); err != nil {
			return Result{}, err
		}
	}
	h := sha256.New()
	fmt.Fprintf(h, "go %s\nldflags %s\npackage %s\n", goVersion(), LDFlags, KubectlPackage)
	for _, name := range []string{"go.mod", "go.sum"} {
		b, err := os.ReadFile(filepath.Join(mod, name))
		if err != nil {
			return Result{}, fmt.Errorf("kasbuild: %w", err)
		}
		fmt.Fprintf(h, "file %s\n", name)
		h.Write(b)
	}
	dir := filepath.Join(cache, "kubectl-"+hex.EncodeToString(h.Sum(nil))[:16])
	bin := filepath.Join(dir, "kubectl")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Result{}, fmt.Errorf("kasbuild: %w", err)
	}
	if fileExists(bin) {
		touch(dir)
		return Result{Binary: bin, Duration: time.Since(start)}, nil
	}
	unlock, err := lock(ctx, dir+".lock", logf)
	if err != nil {
		return Result{}, err
	}
	defer unlock()
	if fileExists(bin) {
		return Result{Binary: bin, Duration: time.Since(start)}, nil
	}
	logf("kasbuild: building kubectl (cold: minutes) into %s", dir)
	tmp := filepath.Join(dir, fmt.Sprintf(".kubectl.tmp%d", os.Getpid()))
	defer os.Remove(tmp)
	args := []string{"-n", "10", "go", "build", "-buildvcs=false", "-o", tmp, "-ldflags", LDFlags, KubectlPackage}
	cmd := exec.CommandContext(ctx, "nice", args...)
	if _, err := exec.LookPath("nice"); err != nil {
		cmd = exec.CommandContext(ctx, "go", args[2:]...)
	}
	cmd.Dir = mod
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return Result{}, fmt.Errorf("kasbuild: go build %s in %s: %w\n%s", KubectlPackage, mod, err, out.String())
	}
	if err := os.Rename(tmp, bin); err != nil {
		return Result{}, fmt.Errorf("kasbuild: %w", err)
	}
	d := time.Since(start)
	logf("kasbuild: built %s in %s", bin, d.Round(time.Second))
	return Result{Binary: bin, Built: true, Duration: d}, nil
}
