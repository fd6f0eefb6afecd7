package kcm

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/boltinformer/boltinformer/test/kas/harness"
	"github.com/boltinformer/boltinformer/test/kas/internal/kasbuild"
)

// kcmBinary is the kcm binary, built by TestMain when a tier asks for it.
var kcmBinary string

// The tiers' switches.
var (
	runTests = os.Getenv("BOLTINFORMER_KCM") == "1"
	runBench = os.Getenv("BOLTINFORMER_BENCH_KCM") == "1"
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if !runTests && !runBench {
		// Nothing to build: every test skips.
		return m.Run()
	}
	logf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute) // a cold build on a loaded machine
	defer cancel()
	res, err := kasbuild.BuildKCM(ctx, kasbuild.Options{Logf: logf})
	if err != nil {
		logf("kcm: build: %v", err)
		return 1
	}
	if res.Built {
		logf("kcm: built %s in %s", res.Binary, res.Duration.Round(time.Second))
	}
	kcmBinary = res.Binary
	// The apiserver too, before any test's clock starts.
	if _, err := kasbuild.Build(ctx, kasbuild.Options{Logf: logf}); err != nil {
		logf("kcm: build kas: %v", err)
		return 1
	}
	code := m.Run()
	if code == 0 {
		if err := harness.CheckLeaks(); err != nil {
			logf("kcm: %v", err)
			code = 1
		}
	}
	return code
}

// needTests skips t unless BOLTINFORMER_KCM=1.
func needTests(t *testing.T) {
	t.Helper()
	if !runTests {
		t.Skip("BOLTINFORMER_KCM=1 runs kube-controller-manager's end-to-end tests (make test-kcm)")
	}
}
