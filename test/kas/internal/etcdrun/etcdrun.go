package etcdrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/etcd/server/v3/embed"

	"github.com/boltinformer/boltinformer/test/kas/internal/kasdir"
	"github.com/boltinformer/boltinformer/test/kas/internal/loopback"
)

// portsFile is kept in the data directory so that a restart listens where the
// member listened before, when those ports are still free.
const portsFile = "kas-ports.json"

// Config says how to run etcd. The zero value of each field but DataDir is a
// usable default.
type Config struct {
	// DataDir holds etcd's data; created if missing. Required.
	DataDir string
	// LogLevel is etcd's zap level: debug, info, warn (default) or error.
	LogLevel string
	// LogFile receives etcd's log; empty means stderr.
	LogFile string
	// UnsafeNoFsync turns off fsync in etcd (faster, loses data on a machine crash).
	UnsafeNoFsync bool
	// ReadyTimeout bounds the wait for etcd to serve; 0 means one minute.
	ReadyTimeout time.Duration
}

// Server is a running etcd.
type Server struct {
	// ClientURL is the URL clients (the apiserver's --etcd-servers) use.
	ClientURL string

	etcd *embed.Etcd
}

type ports struct {
	Client int `json:"client"`
	Peer   int `json:"peer"`
}

// ErrNotReady is returned by Start when etcd did not become ready in time.
var ErrNotReady = errors.New("etcdrun: etcd not ready in time")

// Start starts etcd and returns once it serves clients.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("etcdrun: DataDir is required")
	}
	if cfg.LogLevel == "" {
		cfg.LogLevel = "warn"
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = time.Minute
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("etcdrun: %w", err)
	}
	p, err := choosePorts(cfg.DataDir)
	if err != nil {
		return nil, err
	}

	ec := embed.NewConfig()
	ec.Name = "kas"
	ec.Dir = cfg.DataDir
	clientURL := url.URL{Scheme: "http", Host: loopback.HostPort(p.Client)}
	peerURL := url.URL{Scheme: "http", Host: loopback.HostPort(p.Peer)}
	ec.ListenClientUrls = []url.URL{clientURL}
	ec.AdvertiseClientUrls = []url.URL{clientURL}
	ec.ListenPeerUrls = []url.URL{peerURL}
	ec.AdvertisePeerUrls = []url.URL{peerURL}
	ec.InitialCluster = ec.InitialClusterFromName(ec.Name)
	ec.ListenMetricsUrls = nil
	ec.LogLevel = cfg.LogLevel
	ec.LogOutputs = []string{"stderr"}
	if cfg.LogFile != "" {
		ec.LogOutputs = []string{cfg.LogFile}
	}
	ec.UnsafeNoFsync = cfg.UnsafeNoFsync

	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("etcdrun: start: %w", err)
	}
	timer := time.NewTimer(cfg.ReadyTimeout)
	defer timer.Stop()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("etcdrun: %w", err)
	case <-timer.C:
		e.Close()
		return nil, ErrNotReady
	case <-ctx.Done():
		e.Close()
		return nil, fmt.Errorf("etcdrun: %w", ctx.Err())
	}
	if err := writePorts(cfg.DataDir, p); err != nil {
		e.Close()
		return nil, err
	}
	return &Server{ClientURL: clientURL.String(), etcd: e}, nil
}

// Err reports a fatal error of the running server.
func (s *Server) Err() <-chan error { return s.etcd.Err() }

// Close stops etcd gracefully and waits for it.
func (s *Server) Close() { s.etcd.Close() }

// choosePorts reuses the ports of the previous run when both are free, and
// picks new free ports otherwise.
func choosePorts(dir string) (ports, error) {
	var p ports
	if b, err := os.ReadFile(filepath.Join(dir, portsFile)); err == nil {
		if json.Unmarshal(b, &p) == nil && p.Client > 0 && p.Peer > 0 && p.Client != p.Peer &&
			loopback.PortFree(p.Client) && loopback.PortFree(p.Peer) {
			return p, nil
		}
	}
	var err error
	if p.Client, err = loopback.FreePort(); err != nil {
		return p, err
	}
	for range 10 {
		if p.Peer, err = loopback.FreePort(); err != nil {
			return p, err
		}
		if p.Peer != p.Client {
			return p, nil
		}
	}
	return p, errors.New("etcdrun: could not pick two distinct free ports")
}

func writePorts(dir string, p ports) error {
	b, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("etcdrun: %w", err)
	}
	return kasdir.WriteFileAtomic(filepath.Join(dir, portsFile), append(b, '\n'), 0o600)
}
