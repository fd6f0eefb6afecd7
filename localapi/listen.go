package localapi

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/boltinformer/boltinformer/internal/safefile"
)

// ListenUnix listens on a Unix socket at path with mode 0600 (only the
// agent's user may connect). The socket is made in a private directory
// next to path and renamed into place, so it is never reachable with a
// looser mode. An existing socket nobody serves on (left by a killed
// agent) is replaced; one in use is ErrInUse; anything else at path (a
// symlink, a file, a directory) is ErrUnsafePath, untouched. Closing the
// listener leaves the socket file (see unixListener). The directory must
// be one only the agent's user (or root) may write to, and those above it
// too (but sticky ones, as /tmp): else ErrUnsafePath (see
// LoadOrCreateToken).
func ListenUnix(path string) (net.Listener, error) {
	path = filepath.Clean(path)
	// Whoever may write the directory may replace the socket, and answer
	// the clients.
	if err := safefile.CheckDir(filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnsafePath, err)
	}
	if err := checkSocketPath(path); err != nil {
		return nil, err
	}
	tmpDir, err := os.MkdirTemp(filepath.Dir(path), ".localapi-")
	if err != nil {
		return nil, fmt.Errorf("localapi: listen %s: %w", path, err)
	}
	defer os.RemoveAll(tmpDir)
	if err := os.Chmod(tmpDir, 0o700); err != nil {
		return nil, fmt.Errorf("localapi: listen %s: %w", path, err)
	}
	tmp := filepath.Join(tmpDir, "s")
	l, err := net.Listen("unix", tmp)
	if err != nil {
		return nil, fmt.Errorf("localapi: listen %s: %w", path, err)
	}
	ul := l.(*net.UnixListener)
	ul.SetUnlinkOnClose(false) // the path changes below, and the file stays
	fail := func(err error) (net.Listener, error) {
		_ = ul.Close()
		return nil, fmt.Errorf("localapi: listen %s: %w", path, err)
	}
	if err := os.Chmod(tmp, 0o600); err != nil {
		return fail(err)
	}
	if err := checkSocketPath(path); err != nil { // again, just before
		_ = ul.Close()
		return nil, err
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(err)
	}
	st, err := os.Lstat(path)
	if err != nil {
		return fail(err)
	}
	return &unixListener{UnixListener: ul, path: path, info: st}, nil
}

// checkSocketPath accepts a path that does not exist or is a stale socket
// (removing it).
func checkSocketPath(path string) error {
	st, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("localapi: %s: %w", path, err)
	}
	if st.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("%w: %s is a %s, not a socket", ErrUnsafePath, path, describeMode(st.Mode()))
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("%w: %s", ErrInUse, path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("localapi: %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("localapi: remove stale socket %s: %w", path, err)
	}
	return nil
}

func describeMode(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m.IsDir():
		return "directory"
	case m.IsRegular():
		return "regular file"
	}
	return m.Type().String()
}

// unixListener keeps its socket file after Close: a client that dials it
// while no agent serves gets "connection refused", which client-go's
// reflector retries, resuming its watch from its resourceVersion when the
// agent is back; a missing socket (ENOENT) would make it relist. The next
// ListenUnix replaces the stale socket.
type unixListener struct {
	*net.UnixListener
	path string
	info fs.FileInfo
}

// ListenLocal listens with TLS (cert, see LoadOrCreateCert) on a loopback
// TCP address ("127.0.0.1:0" for any free port; "" means that). Any other
// address is refused: the local API's only authentication there is the
// bearer token (Options.Token). TLS is what lets kubeconfig clients send
// the token at all (client-go sends a kubeconfig's credentials only over
// TLS).
func ListenLocal(addr string, cert *Cert) (net.Listener, error) {
	if cert == nil {
		return nil, errors.New("localapi: ListenLocal needs a certificate (LoadOrCreateCert)")
	}
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("localapi: listen %s: %w", addr, err)
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("%w: %s is not a loopback address (127.0.0.1 or ::1)", ErrUnsafePath, addr)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("localapi: listen %s: %w", addr, err)
	}
	return tls.NewListener(l, &tls.Config{
		Certificates: []tls.Certificate{cert.TLS},
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"http/1.1"},
	}), nil
}

// LoadOrCreateToken returns the bearer token in path, creating the file
// (mode 0600, 256 random bits) when it does not exist. The token and its
// directory are checked as ssh checks its key files (StrictModes): a
// token that is a symbolic link or not a regular file, that another user
// owns (not this process's user, nor root), or that group or others may
// read or write; a directory that another user owns or that group or
// others may write (they could replace the token with one they know), or
// such a directory above it (but a sticky one, as /tmp); or an empty
// token is ErrToken, with the path and the reason.
func LoadOrCreateToken(path string) (string, error) {
	if err := safefile.CheckDir(filepath.Dir(path)); err != nil {
		return "", fmt.Errorf("%w: %w", ErrToken, err)
	}
	_, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return "", fmt.Errorf("localapi: token: %w", err)
		}
		tok := base64.RawURLEncoding.EncodeToString(b)
		f, err := safefile.CreateExcl(path, 0o600)
		if err != nil {
			return "", fmt.Errorf("localapi: token: %w", err)
		}
		_, werr := f.WriteString(tok + "\n")
		serr := f.Sync()
		cerr := f.Close()
		if err := errors.Join(werr, serr, cerr); err != nil {
			return "", fmt.Errorf("localapi: token %s: %w", path, err)
		}
		return tok, nil
	}
	if err != nil {
		return "", fmt.Errorf("localapi: token: %w", err)
	}
	b, err := safefile.ReadTrusted(path, true)
	if errors.Is(err, safefile.ErrUntrusted) {
		return "", fmt.Errorf("%w: %w", ErrToken, err)
	}
	if err != nil {
		return "", fmt.Errorf("localapi: token: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("%w: %s is empty", ErrToken, path)
	}
	return tok, nil
}

// socketConn marks the requests that came through a Unix socket: the
// socket's mode authenticated them, they need no token.
type socketConn struct{}

// Serve serves h on l until ctx is done, then closes l (new connections
// are refused, so that clients retry against the next server instead of
// getting a watch that ends at once), ends every watch, and waits up to
// five seconds for the requests in flight. It returns nil after a shutdown
// by ctx, else the listener's error. Requests through a Unix socket need
// no token (the socket's mode 0600 is their authentication); the others
// need Options.Token when it is set.
func (h *Handler) Serve(ctx context.Context, l net.Listener) error {
	reqCtx, cancelRequests := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelRequests()
	srv := &http.Server{
		Handler: h,
		// kube-apiserver's bound on a request's line and headers (its
		// secure serving sets 1 MiB): the only bound it puts on a
		// selector's size. A selection's cost never holds up the informer
		// (see view), and stops when its client goes away.
		MaxHeaderBytes:    1 << 20,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return reqCtx },
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if c.LocalAddr().Network() == "unix" {
				return context.WithValue(ctx, socketConn{}, true)
			}
			return ctx
		},
		ErrorLog: log.New(logWriter{h}, "", 0),
	}
	// Shutdown closes the listeners, then runs this: the watches end and
	// their connections go idle, which Shutdown then closes.
	srv.RegisterOnShutdown(cancelRequests)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	select {
	case err := <-errc:
		return fmt.Errorf("localapi: serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		return fmt.Errorf("localapi: serve: %w", serr)
	}
	return nil
}

// logWriter passes the HTTP server's own messages (TLS handshake errors,
// broken connections) to the handler's logger, at V(2).
type logWriter struct{ h *Handler }

func (w logWriter) Write(p []byte) (int, error) {
	w.h.logger.V(2).Info("HTTP server: " + strings.TrimSpace(string(p)))
	return len(p), nil
}
