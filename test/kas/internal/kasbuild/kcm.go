package kasbuild

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// KCMTags are the build tags of cmd/kcm: without them the default builds,
// vets and tests of the module never compile kube-controller-manager's
// controllers.
const KCMTags = "kcm"

// BuildKCM returns the path of the kcm binary (cmd/kcm:
// kube-controller-manager v1.37.2 on client-go's or boltinformer's
// informers), built like kas into <cache>/kcm-<hash>/kcm unless it is
// there already. The hash covers go.mod, go.sum, the non-test .go files of
// cmd/kcm, the library's module (the replace target ../..: its go.mod,
// go.sum and non-test .go files, but its other modules), the Go version,
// the ldflags and the tags. $KCM_BINARY skips the build. A cold build
// takes minutes; it is only made for the tests and benchmarks that run
// kcm (BOLTINFORMER_KCM=1, BOLTINFORMER_BENCH_KCM=1).
func BuildKCM(ctx context.Context, opts Options) (Result, error) {
	res, cache, err := buildCached(ctx, opts, target{
		env: "KCM_BINARY", name: "kcm", pkg: "./cmd/kcm", tags: KCMTags, cost: "cold: minutes, ~3 GB RAM", hash: KCMSourceHash,
	})
	if err != nil || !res.Built {
		return res, err
	}
	prune(cache, "kcm-", filepath.Base(filepath.Dir(res.Binary)), PruneAge, logger(opts))
	return res, nil
}

// KCMSourceHash is the cache key of kcm in the kas module dir (see
// BuildKCM); the first 16 hex digits of a SHA-256.
func KCMSourceHash(dir string) (string, error) {
	files := []string{"go.mod", "go.sum"}
	kcm, err := goFiles(dir, "cmd/kcm")
	if err != nil {
		return "", err
	}
	files = append(files, kcm...)
	lib := filepath.Join(dir, "..", "..")
	libFiles, err := goFiles(lib, ".")
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "go %s\nldflags %s\ntags %s\n", goVersion(), LDFlags, KCMTags)
	for _, set := range []struct {
		root  string
		label string
		files []string
	}{{dir, "kas", files}, {lib, "library", append([]string{"go.mod", "go.sum"}, libFiles...)}} {
		for _, name := range set.files {
			f, err := os.Open(filepath.Join(set.root, filepath.FromSlash(name)))
			if err != nil {
				return "", fmt.Errorf("kasbuild: %w", err)
			}
			fmt.Fprintf(h, "file %s %s\n", set.label, name)
			_, err = io.Copy(h, f)
			f.Close()
			if err != nil {
				return "", fmt.Errorf("kasbuild: %w", err)
			}
			h.Write([]byte{0})
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// goFiles lists the non-test .go files under root/sub (slash-separated,
// relative to root, sorted), leaving out directories that hold a module of
// their own, testdata and hidden directories.
func goFiles(root, sub string) ([]string, error) {
	var out []string
	start := filepath.Join(root, sub)
	err := filepath.WalkDir(start, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p == start {
				return nil
			}
			name := d.Name()
			if name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || fileExists(filepath.Join(p, "go.mod")) {
				return fs.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("kasbuild: %w", err)
	}
	sort.Strings(out)
	return out, nil
}
