package etcdrun_test

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/boltinformer/boltinformer/test/kas/internal/etcdrun"
)

func put(t *testing.T, url, k, v string) (int64, string) {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{url}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	old := ""
	if g, err := cli.Get(ctx, k); err == nil && len(g.Kvs) == 1 {
		old = string(g.Kvs[0].Value)
	} else if err != nil {
		t.Fatal(err)
	}
	r, err := cli.Put(ctx, k, v)
	if err != nil {
		t.Fatal(err)
	}
	return r.Header.Revision, old
}

// TestRestartKeepsData: a second etcd on the same directory has the keys and
// a revision that kept growing.
func TestRestartKeepsData(t *testing.T) {
	dir := t.TempDir()
	cfg := etcdrun.Config{DataDir: dir, LogLevel: "error", UnsafeNoFsync: true}
	s1, err := etcdrun.Start(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(s1.ClientURL, "http://127.0.0.1:") {
		s1.Close()
		t.Fatalf("client URL %s, want 127.0.0.1", s1.ClientURL)
	}
	rev1, _ := put(t, s1.ClientURL, "k", "v1")
	s1.Close()

	s2, err := etcdrun.Start(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if s2.ClientURL != s1.ClientURL {
		t.Logf("client URL changed from %s to %s", s1.ClientURL, s2.ClientURL)
	}
	rev2, old := put(t, s2.ClientURL, "k", "v2")
	if old != "v1" || rev2 <= rev1 {
		t.Fatalf("after restart: old value %q rev %d, want v1 and > %d", old, rev2, rev1)
	}
}
