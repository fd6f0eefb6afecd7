package loopback

import (
	"fmt"
	"net"
	"strconv"
)

// Host is the only address the harness binds to or connects to.
const Host = "127.0.0.1"

// FreePort returns a TCP port on Host that was free a moment ago: it listens on
// port 0, reads the port the kernel chose and closes the listener. Another
// process may take the port before the caller binds it; callers that cannot
// retry should keep the window short.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(Host, "0"))
	if err != nil {
		return 0, fmt.Errorf("loopback: pick a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// PortFree reports whether port can be bound on Host right now.
func PortFree(port int) bool {
	l, err := net.Listen("tcp", HostPort(port))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// HostPort returns "127.0.0.1:port".
func HostPort(port int) string {
	return net.JoinHostPort(Host, strconv.Itoa(port))
}
