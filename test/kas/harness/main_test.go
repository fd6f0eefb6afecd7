package harness_test

import (
	"fmt"
	"os"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/boltinformer/boltinformer/test/kas/harness"
)

// TestMain fails the run if a test leaked a goroutine or left a child
// process (etcd, apiserver, kas up) running.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := harness.CheckLeaks(); err != nil {
			fmt.Fprintf(os.Stderr, "harness_test: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

func metaAccessor(obj any) (metav1.Object, error) { return meta.Accessor(obj) }
