//go:build kcm

package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/boltinformer/boltinformer"
)

// stats counts the requests of the controller manager's clients (every
// client the client builders make: the shared informers', the metadata
// informers', the controllers') and the bytes of their responses' bodies,
// by kind of request and resource. kube-controller-manager's clients ask
// for no compression, so body bytes are the bytes on the wire.
type stats struct {
	path  string
	mode  string
	start time.Time

	mu          sync.Mutex // guards the fields below
	health      func() map[string]boltinformer.Health
	lastHealth  map[string]boltinformer.Health // health's last answer
	requests    map[string]*count
	controllers int
	startedAt   time.Time
}

// count is one line of the stats file.
type count struct {
	Requests int64 `json:"requests"`
	Bytes    int64 `json:"bytes"`
}

// statsFile is what the stats file holds.
type statsFile struct {
	Mode  string `json:"mode"`
	PID   int    `json:"pid"`
	Start string `json:"start"`
	// ControllersStarted is when the informers were started and the
	// controllers handed to RunControllers ("" before), Controllers how
	// many.
	ControllersStarted string `json:"controllersStarted,omitempty"`
	Controllers        int    `json:"controllers"`
	// Requests by kind ("LIST", "LIST meta", "LIST limit=1", "LIST
	// byname", "WATCH", "WATCHLIST", "GET", "POST", ...), resource
	// ("pods", "deployments.apps") and client (the name a client builder
	// gave it: "shared-informers", "metadata-informers",
	// "replicaset-controller"...; "factory" for the persistent factory's
	// metadata client, which has no name), e.g. "LIST pods
	// @shared-informers".
	Requests map[string]*count `json:"requests"`
	// Informers are the persistent informers' health, by name
	// (persistent mode).
	Informers map[string]boltinformer.Health `json:"informers,omitempty"`
}

func newStats(path, mode string) *stats {
	return &stats{path: path, mode: mode, start: time.Now(), requests: map[string]*count{}}
}

// wrap is a rest.Config WrapTransport.
func (s *stats) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		key := requestKey(req)
		resp, err := rt.RoundTrip(req)
		s.mu.Lock()
		c := s.requests[key]
		if c == nil {
			c = &count{}
			s.requests[key] = c
		}
		c.Requests++
		s.mu.Unlock()
		if err == nil && resp.Body != nil {
			resp.Body = &countingBody{ReadCloser: resp.Body, s: s, c: c}
		}
		return resp, err
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

type countingBody struct {
	io.ReadCloser
	s *stats
	c *count
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.s.mu.Lock()
		b.c.Bytes += int64(n)
		b.s.mu.Unlock()
	}
	return n, err
}

// requestKey names a request as the stats file counts it: its kind and
// resource.
func requestKey(req *http.Request) string {
	resource, named, api := resourceOf(req.URL.Path)
	if !api {
		return req.Method + " " + req.URL.Path + " @" + clientName(req.Header.Get("User-Agent"))
	}
	q := req.URL.Query()
	kind := req.Method
	switch {
	case req.Method != http.MethodGet:
	case q.Get("watch") == "true" || q.Get("watch") == "1":
		kind = "WATCH"
		if q.Get("sendInitialEvents") == "true" {
			kind = "WATCHLIST"
		}
	case !named:
		kind = "LIST"
		switch {
		case strings.Contains(req.Header.Get("Accept"), "as=PartialObjectMetadata"):
			kind += " meta"
			if q.Get("limit") == "1" {
				kind += " limit=1"
			}
		case q.Get("limit") == "1":
			kind += " limit=1"
		case strings.Contains(q.Get("fieldSelector"), "metadata.name="):
			kind += " byname"
		}
	}
	return kind + " " + resource + " @" + clientName(req.Header.Get("User-Agent"))
}

// clientName is the name a client builder appended to the user agent
// ("kcm/v1.37.2 (linux/amd64) kubernetes/abcdef/replicaset-controller"),
// or "factory" without one.
func clientName(ua string) string {
	const marker = " kubernetes/"
	i := strings.Index(ua, marker)
	if i < 0 {
		return "factory"
	}
	_, name, ok := strings.Cut(ua[i+len(marker):], "/")
	if !ok || name == "" {
		return "factory"
	}
	return name
}

// resourceOf returns the resource of an API path ("pods",
// "deployments.apps", "pods/status"), whether it names one object, and
// whether it is a path of a resource at all (not /healthz, discovery).
func resourceOf(path string) (resource string, named, api bool) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	var group string
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		group, parts = parts[1], parts[3:]
	default:
		return "", false, false
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	r := parts[0]
	if group != "" {
		r += "." + group
	}
	if len(parts) >= 3 {
		r += "/" + parts[2]
	}
	return r, len(parts) >= 2, true
}

// controllersStarted records that n controllers were handed to RunControllers.
func (s *stats) controllersStarted(n int) {
	s.mu.Lock()
	s.controllers, s.startedAt = n, time.Now()
	s.mu.Unlock()
	s.write()
}

// setHealth makes the file report the persistent informers' health; nil
// stops asking (the file keeps the last answer).
func (s *stats) setHealth(f func() map[string]boltinformer.Health) {
	s.mu.Lock()
	s.health = f
	s.mu.Unlock()
}

// run rewrites the file every second until ctx is done.
func (s *stats) run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.write()
		}
	}
}

func (s *stats) close() { s.write() }

// write replaces the file (a rename: readers never see half of it).
func (s *stats) write() {
	if s.path == "" {
		return
	}
	s.mu.Lock()
	f := statsFile{Mode: s.mode, PID: os.Getpid(), Start: s.start.Format(time.RFC3339Nano), Controllers: s.controllers, Requests: map[string]*count{}}
	if !s.startedAt.IsZero() {
		f.ControllersStarted = s.startedAt.Format(time.RFC3339Nano)
	}
	for k, c := range s.requests {
		cc := *c
		f.Requests[k] = &cc
	}
	health, last := s.health, s.lastHealth
	s.mu.Unlock()
	f.Informers = last
	if health != nil {
		f.Informers = health()
		s.mu.Lock()
		s.lastHealth = f.Informers
		s.mu.Unlock()
	}
	b, err := json.MarshalIndent(&f, "", " ")
	if err != nil {
		return
	}
	tmp := filepath.Join(filepath.Dir(s.path), "."+filepath.Base(s.path)+".tmp")
	if os.WriteFile(tmp, b, 0o644) == nil {
		_ = os.Rename(tmp, s.path)
	}
}
