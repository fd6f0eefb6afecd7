package localapi_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaks a goroutine: servers, watches,
// informers and clients must all stop.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
