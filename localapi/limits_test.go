package localapi_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestSelectorBoundAsKubeAPIServer: a selector is bounded as
// kube-apiserver bounds it, by the 1 MiB limit on a request's line and
// headers (its secure serving's MaxHeaderBytes): 900 KiB of terms are
// answered, 1.1 MiB get 431 from the HTTP server.
func TestSelectorBoundAsKubeAPIServer(t *testing.T) {
	a := startAgent(t, "", newPodSource(3))
	_, cfg, _ := serveAgent(t, a, nil)
	c := httpClient(t, cfg)
	terms := func(size int) string {
		var b strings.Builder
		for i := 0; b.Len() < size; i++ {
			fmt.Fprintf(&b, "!k%d,", i)
		}
		return b.String() + "zz!=1"
	}
	for _, tc := range []struct {
		size int
		want int
	}{{900 << 10, http.StatusOK}, {1100 << 10, http.StatusRequestHeaderFieldsTooLarge}} {
		u, err := url.Parse(cfg.Host + "/api/v1/pods")
		if err != nil {
			t.Fatal(err)
		}
		u.RawQuery = "labelSelector=" + terms(tc.size)
		if code, body := rawGet(t, c, u.String(), ""); code != tc.want {
			t.Errorf("a selector of %d bytes: %d %.200s, want %d", tc.size, code, body, tc.want)
		}
	}
}
