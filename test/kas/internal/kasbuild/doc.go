// Package kasbuild builds the kas binary once per machine and source state.
//
// The binary is cached under <cache>/boltinformer/kas-<hash>/kas, where
// <cache> is $KAS_CACHE_DIR, else ${XDG_CACHE_HOME:-$HOME/.cache}, and <hash>
// covers go.mod, go.sum, every non-test .go file of cmd/kas and internal/
// (but internal/kasbuild), the Go version and the link flags. A build holds a file lock, so concurrent test
// binaries and build.sh wait for one build instead of racing. $KAS_BINARY, if
// set, names a prebuilt binary and skips all of this.
package kasbuild
