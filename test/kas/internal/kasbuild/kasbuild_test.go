package kasbuild

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestSourceHash(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "go.mod"), "module "+ModulePath+"\n")
	writeFile(t, filepath.Join(dir, "go.sum"), "")
	writeFile(t, filepath.Join(dir, "cmd/kas/main.go"), "package main\n")
	writeFile(t, filepath.Join(dir, "internal/x/x.go"), "package x\n")
	h0, err := SourceHash(dir)
	if err != nil {
		t.Fatal(err)
	}
	if h1, _ := SourceHash(dir); h1 != h0 || len(h0) != 16 {
		t.Fatalf("hash %q then %q, want the same 16 hex digits", h0, h1)
	}

	// Tests and files outside cmd/kas and internal/ do not change the binary.
	writeFile(t, filepath.Join(dir, "internal/x/x_test.go"), "package x\n")
	writeFile(t, filepath.Join(dir, "harness/h.go"), "package harness\n")
	writeFile(t, filepath.Join(dir, "README.md"), "hi\n")
	writeFile(t, filepath.Join(dir, "internal/kasbuild/b.go"), "package kasbuild\n")
	writeFile(t, filepath.Join(dir, "cmd/kas-build/main.go"), "package main\n")
	if h, _ := SourceHash(dir); h != h0 {
		t.Fatal("hash changed for a file that is not part of the binary")
	}

	for _, f := range []string{"go.sum", "cmd/kas/main.go", "internal/x/x.go"} {
		writeFile(t, filepath.Join(dir, f), "// changed\n")
		h, _ := SourceHash(dir)
		if h == h0 {
			t.Fatalf("hash did not change with %s", f)
		}
		h0 = h
	}
	writeFile(t, filepath.Join(dir, "internal/y/y.go"), "package y\n")
	if h, _ := SourceHash(dir); h == h0 {
		t.Fatal("hash did not change with a new file")
	}
}

func TestFindModuleDir(t *testing.T) {
	dir, err := findModuleDir()
	if err != nil {
		t.Fatal(err)
	}
	if !isKasModule(dir) {
		t.Fatalf("%s is not the kas module", dir)
	}
}

func TestBuildUsesKASBinary(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "kas")
	writeFile(t, bin, "")
	t.Setenv("KAS_BINARY", bin)
	res, err := Build(t.Context(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Binary != bin || res.Built {
		t.Fatalf("Build = %+v, want %s from $KAS_BINARY", res, bin)
	}
}

func TestPrune(t *testing.T) {
	cache := t.TempDir()
	old := time.Now().Add(-2 * PruneAge)
	for _, name := range []string{"kas-old", "kas-keep", "kas-recent", "other"} {
		writeFile(t, filepath.Join(cache, name, "kas"), "")
		if name != "kas-recent" {
			if err := os.Chtimes(filepath.Join(cache, name), old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	prune(cache, "kas-", "kas-keep", PruneAge, t.Logf)
	for name, want := range map[string]bool{"kas-old": false, "kas-keep": true, "kas-recent": true, "other": true} {
		_, err := os.Stat(filepath.Join(cache, name))
		if got := err == nil; got != want {
			t.Errorf("%s exists = %v, want %v", name, got, want)
		}
	}
}

// TestBuildCached builds a tiny module's binary into its cache entry once;
// the next call finds it there.
func TestBuildCached(t *testing.T) {
	mod, cache := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(mod, "go.mod"), "module example.com/tiny\n\ngo 1.21\n")
	writeFile(t, filepath.Join(mod, "cmd", "tiny", "main.go"), "package main\n\nfunc main() {}\n")
	tg := target{env: "KASBUILD_TEST_BINARY", name: "tiny", pkg: "./cmd/tiny", cost: "seconds",
		hash: func(string) (string, error) { return "h1", nil }}
	opts := Options{ModuleDir: mod, CacheDir: cache}
	first, gotCache, err := buildCached(t.Context(), opts, tg)
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(cache, "tiny-h1", "tiny")
	if first.Binary != want || !first.Built || gotCache != cache {
		t.Fatalf("first build = %+v, cache %q; want %s built in %s", first, gotCache, want, cache)
	}
	second, _, err := buildCached(t.Context(), opts, tg)
	if err != nil {
		t.Fatal(err)
	}
	if second.Binary != want || second.Built {
		t.Fatalf("second call = %+v, want the cached %s", second, want)
	}
}

// TestKCMSourceHash: kcm's hash follows cmd/kcm and the library module
// it links (../..), but not the library's tests, its other modules, or
// the rest of the kas module.
func TestKCMSourceHash(t *testing.T) {
	lib := t.TempDir()
	dir := filepath.Join(lib, "test", "kas")
	writeFile(t, filepath.Join(lib, "go.mod"), "module example.com/lib\n")
	writeFile(t, filepath.Join(lib, "go.sum"), "")
	writeFile(t, filepath.Join(lib, "lib.go"), "package lib\n")
	writeFile(t, filepath.Join(lib, "store", "store.go"), "package store\n")
	writeFile(t, filepath.Join(dir, "go.mod"), "module "+ModulePath+"\n")
	writeFile(t, filepath.Join(dir, "go.sum"), "")
	writeFile(t, filepath.Join(dir, "cmd/kcm/main.go"), "package main\n")
	h0, err := KCMSourceHash(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"lib_test.go", "store/store_test.go", "other/go.mod", "other/other.go", "test/kas/harness/h.go", "test/kas/cmd/kas/main.go", "README.md"} {
		writeFile(t, filepath.Join(lib, f), "// not in kcm\n")
		if h, err := KCMSourceHash(dir); err != nil || h != h0 {
			t.Fatalf("hash changed with %s (%v)", f, err)
		}
	}
	for _, f := range []string{"lib.go", "store/store.go", "go.sum", "test/kas/cmd/kcm/main.go", "test/kas/go.mod"} {
		writeFile(t, filepath.Join(lib, f), "// changed\n")
		h, err := KCMSourceHash(dir)
		if err != nil || h == h0 {
			t.Fatalf("hash did not change with %s (%v)", f, err)
		}
		h0 = h
	}
}
