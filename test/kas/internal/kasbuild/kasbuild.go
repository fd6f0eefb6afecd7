package kasbuild

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"
)

// ModulePath is the module that holds the kas sources.
const ModulePath = "github.com/boltinformer/boltinformer/test/kas"

// KubernetesVersion is the version the binary reports on /version.
const KubernetesVersion = "v1.37.2"

// LDFlags stamp the Kubernetes version into component-base; without them
// /version reports a placeholder.
var LDFlags = "-X k8s.io/component-base/version.gitVersion=" + KubernetesVersion +
	" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37"

// Options control Build. The zero value builds from the module this package
// was compiled from, with the default cache.
type Options struct {
	// ModuleDir is the kas module root (the directory of its go.mod).
	ModuleDir string
	// CacheDir replaces <cache>/boltinformer.
	CacheDir string
	// Logf reports progress (a cold build takes minutes); nil is silent.
	Logf func(format string, args ...any)
}

// Result says what Build did.
type Result struct {
	// Binary is the path of the kas binary.
	Binary string
	// Built is true when this call compiled it (false: cache hit or $KAS_BINARY).
	Built bool
	// Duration is the time the call took.
	Duration time.Duration
}

// Build returns the path of an up-to-date kas binary, compiling it first if
// the cache has none for the current sources.
func Build(ctx context.Context, opts Options) (Result, error) {
	res, cache, err := buildCached(ctx, opts, target{
		env: "KAS_BINARY", name: "kas", pkg: "./cmd/kas", cost: "cold: minutes, ~3 GB RAM", hash: SourceHash,
	})
	if err != nil || !res.Built {
		return res, err
	}
	dir := filepath.Dir(res.Binary)
	info := fmt.Sprintf("built %s in %s with %s\n", time.Now().UTC().Format(time.RFC3339), res.Duration.Round(time.Second), runtime.Version())
	_ = os.WriteFile(filepath.Join(dir, "build-info"), []byte(info), 0o644)
	prune(cache, "kas-", filepath.Base(dir), PruneAge, logger(opts))
	return res, nil
}

// target is one binary buildCached builds from the kas module.
type target struct {
	env  string // a path that replaces the build, e.g. $KAS_BINARY
	name string // the binary's name, and its cache entry's prefix
	pkg  string // what go build builds, in the module's directory
	tags string // go build -tags, if any
	cost string // what a cold build costs, for the log
	// hash names the sources' version, given the module's directory.
	hash func(mod string) (string, error)
}

// logger is opts.Logf, or a silent one.
func logger(opts Options) func(string, ...any) {
	if opts.Logf == nil {
		return func(string, ...any) {}
	}
	return opts.Logf
}

// buildCached returns the path of t's binary, built into
// <cache>/<name>-<hash>/<name> unless it is there already or $env names
// one; other processes building the same entry wait on its lock. It also
// returns the cache directory ("" when $env was used).
func buildCached(ctx context.Context, opts Options, t target) (Result, string, error) {
	start := time.Now()
	logf := logger(opts)
	if bin := os.Getenv(t.env); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return Result{}, "", fmt.Errorf("kasbuild: $%s: %w", t.env, err)
		}
		return Result{Binary: bin, Duration: time.Since(start)}, "", nil
	}
	mod := opts.ModuleDir
	if mod == "" {
		var err error
		if mod, err = findModuleDir(); err != nil {
			return Result{}, "", err
		}
	}
	cache := opts.CacheDir
	if cache == "" {
		var err error
		if cache, err = DefaultCacheDir(); err != nil {
			return Result{}, "", err
		}
	}
	hash, err := t.hash(mod)
	if err != nil {
		return Result{}, "", err
	}
	dir := filepath.Join(cache, t.name+"-"+hash)
	bin := filepath.Join(dir, t.name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Result{}, "", fmt.Errorf("kasbuild: %w", err)
	}
	if fileExists(bin) {
		touch(dir)
		return Result{Binary: bin, Duration: time.Since(start)}, cache, nil
	}

	unlock, err := lock(ctx, dir+".lock", logf)
	if err != nil {
		return Result{}, "", err
	}
	defer unlock()
	if fileExists(bin) { // built by another process while we waited
		return Result{Binary: bin, Duration: time.Since(start)}, cache, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil { // in case prune took it meanwhile
		return Result{}, "", fmt.Errorf("kasbuild: %w", err)
	}
	logf("kasbuild: building %s (%s) into %s", t.name, t.cost, dir)
	tmp := filepath.Join(dir, fmt.Sprintf(".%s.tmp%d", t.name, os.Getpid()))
	defer os.Remove(tmp)
	args := []string{"-n", "10", "go", "build", "-buildvcs=false", "-o", tmp, "-ldflags", LDFlags}
	if t.tags != "" {
		args = append(args, "-tags", t.tags)
	}
	args = append(args, t.pkg)
	cmd := exec.CommandContext(ctx, "nice", args...)
	if _, err := exec.LookPath("nice"); err != nil {
		cmd = exec.CommandContext(ctx, "go", args[2:]...)
	}
	cmd.Dir = mod
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		return Result{}, "", fmt.Errorf("kasbuild: go build %s in %s: %w\n%s", t.pkg, mod, err, out.String())
	}
	if err := os.Rename(tmp, bin); err != nil {
		return Result{}, "", fmt.Errorf("kasbuild: %w", err)
	}
	d := time.Since(start)
	logf("kasbuild: built %s in %s", bin, d.Round(time.Second))
	return Result{Binary: bin, Built: true, Duration: d}, cache, nil
}

// PruneAge is how long an unused cache entry (~170 MB) is kept: each build
// removes the other entries that no one has used for that long.
const PruneAge = 7 * 24 * time.Hour

// prune removes the <prefix><hash> entries of cache other than keep whose
// directory was last touched more than maxAge ago and whose lock is free.
func prune(cache, prefix, keep string, maxAge time.Duration, logf func(string, ...any)) {
	ents, err := os.ReadDir(cache)
	if err != nil {
		return
	}
	for _, e := range ents {
		name := e.Name()
		if !e.IsDir() || name == keep || !strings.HasPrefix(name, prefix) {
			continue
		}
		info, err := e.Info()
		if err != nil || time.Since(info.ModTime()) < maxAge {
			continue
		}
		lockPath := filepath.Join(cache, name+".lock")
		f, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			continue
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			if os.RemoveAll(filepath.Join(cache, name)) == nil {
				logf("kasbuild: pruned %s (unused since %s)", name, info.ModTime().Format(time.DateOnly))
			}
		}
		f.Close() // releases the lock; the lock file stays (it is empty)
	}
}

// DefaultCacheDir is $KAS_CACHE_DIR, else
// ${XDG_CACHE_HOME:-$HOME/.cache}/boltinformer, else (no $HOME either)
// $TMPDIR/boltinformer-cache.
func DefaultCacheDir() (string, error) {
	if d := os.Getenv("KAS_CACHE_DIR"); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil { // neither $XDG_CACHE_HOME nor $HOME
		return filepath.Join(os.TempDir(), "boltinformer-cache"), nil
	}
	return filepath.Join(d, "boltinformer"), nil
}

// SourceHash is the cache key of the module in dir: a SHA-256 over go.mod,
// go.sum, the non-test .go files of cmd/kas and internal/ but this builder
// (names and contents), the Go version and LDFlags; the first 16 hex digits.
func SourceHash(dir string) (string, error) {
	files := []string{"go.mod", "go.sum"}
	for _, root := range []string{"cmd/kas", "internal"} {
		err := filepath.WalkDir(filepath.Join(dir, root), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == "kasbuild" && filepath.Dir(p) == filepath.Join(dir, "internal") {
				return fs.SkipDir // the builder is not part of the binary
			}
			if !d.IsDir() && strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
				rel, err := filepath.Rel(dir, p)
				if err != nil {
					return err
				}
				files = append(files, filepath.ToSlash(rel))
			}
			return nil
		})
		if err != nil {
			return "", fmt.Errorf("kasbuild: %w", err)
		}
	}
	sort.Strings(files[2:])
	h := sha256.New()
	fmt.Fprintf(h, "go %s\nldflags %s\n", goVersion(), LDFlags)
	for _, name := range files {
		f, err := os.Open(filepath.Join(dir, filepath.FromSlash(name)))
		if err != nil {
			return "", fmt.Errorf("kasbuild: %w", err)
		}
		fmt.Fprintf(h, "file %s\n", name)
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return "", fmt.Errorf("kasbuild: %w", err)
		}
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// goVersion is the version of the go command that will build, which can
// differ from the one that built this program (GOTOOLCHAIN).
func goVersion() string {
	out, err := exec.Command("go", "env", "GOVERSION").Output()
	if v := strings.TrimSpace(string(out)); err == nil && v != "" {
		return v
	}
	return runtime.Version()
}

// findModuleDir locates the kas module: from this source file's path when the
// binary was built from a checkout, else from the working directory upwards.
func findModuleDir() (string, error) {
	var starts []string
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		starts = append(starts, filepath.Dir(file))
	}
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	for _, d := range starts {
		for ; ; d = filepath.Dir(d) {
			if isKasModule(d) {
				return d, nil
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	return "", errors.New("kasbuild: cannot find the module " + ModulePath + " (set Options.ModuleDir or $KAS_BINARY)")
}

func isKasModule(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	first, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimSpace(first) == "module "+ModulePath
}

// lock takes an exclusive flock on path, polling so that ctx can cancel it.
func lock(ctx context.Context, path string, logf func(string, ...any)) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("kasbuild: %w", err)
	}
	warned := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("kasbuild: lock %s: %w", path, err)
		}
		if !warned {
			logf("kasbuild: waiting for another build (%s)", path)
			warned = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("kasbuild: waiting for %s: %w", path, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// touch marks a cache entry as used, for whoever prunes old entries by mtime.
func touch(p string) {
	now := time.Now()
	_ = os.Chtimes(p, now, now)
}
