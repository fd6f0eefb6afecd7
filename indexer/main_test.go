package indexer_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks for leaked goroutines (committer loops not stopped by
// Close) after every test and benchmark, once the benchmarks' shared
// fixtures are closed.
func TestMain(m *testing.M) {
	code := m.Run()
	closeBenchFixtures()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
