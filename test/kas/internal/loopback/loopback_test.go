package loopback_test

import (
	"net"
	"testing"

	"github.com/boltinformer/boltinformer/test/kas/internal/loopback"
)

func TestFreePort(t *testing.T) {
	p, err := loopback.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	if !loopback.PortFree(p) {
		t.Fatalf("port %d not free right after FreePort", p)
	}
	l, err := net.Listen("tcp", loopback.HostPort(p))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if loopback.PortFree(p) {
		t.Fatalf("port %d reported free while listened on", p)
	}
}
