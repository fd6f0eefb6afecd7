package recovery_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks for leaked goroutines. A crashtest child ends its test
// normally after a graceful run, so the check covers the children too.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
