package boltinformer_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test or benchmark of the root package leaks a
// goroutine: informers, commit loops and fake watches must all stop.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
