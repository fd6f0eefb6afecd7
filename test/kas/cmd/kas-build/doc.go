// Command kas-build builds (or finds in the cache) the kas binary and prints
// its path. build.sh runs it; the harness calls the same code directly.
package main
