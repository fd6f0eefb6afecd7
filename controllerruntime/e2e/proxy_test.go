package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// proxy is a recording reverse proxy in front of the apiserver, on
// 127.0.0.1: clients (in this process or children) talk to it over plain
// HTTP without credentials, it adds the admin's and forwards. It records
// every request and counts the decoded bytes of every response body (it
// asks the apiserver for gzip itself and decompresses).
type proxy struct {
	srv *httptest.Server
	// mu guards reqs.
	mu   sync.Mutex
	reqs []*request
	// blocked, when set, is a resource whose lists and watches the proxy
	// answers with 503 Service Unavailable (the server unreachable for
	// them), without forwarding.
	blocked atomic.Pointer[string]
}

// block makes the proxy answer resource's lists and watches with 503
// until unblock.
func (p *proxy) block(resource string) { p.blocked.Store(&resource) }

// unblock forwards every request again.
func (p *proxy) unblock() { p.blocked.Store(nil) }

// request is one request the proxy forwarded.
type request struct {
	Method   string
	Path     string
	Query    url.Values
	Accept   string
	Resource string // the path's last segment for lists and watches
	Start    time.Time
	bytes    atomic.Int64
	headers  atomic.Int64 // ns after Start when the response's headers came
	end      atomic.Int64 // ns after Start when its body ended
}

// Timing returns how long after its start r's response headers came and
// its body ended (0: not yet).
func (r *request) Timing() (headers, end time.Duration) {
	return time.Duration(r.headers.Load()), time.Duration(r.end.Load())
}

// Bytes is the decoded size of the response body read so far.
func (r *request) Bytes() int64 { return r.bytes.Load() }

// Watch reports whether r is a watch.
func (r *request) Watch() bool { return r.Query.Get("watch") == "true" || r.Query.Get("watch") == "1" }

// List reports whether r lists a collection (a GET that is not a watch of
// a path ending in a resource).
func (r *request) List() bool { return r.Method == http.MethodGet && !r.Watch() && r.Resource != "" }

// Metadata reports whether r asks for metadata only.
func (r *request) Metadata() bool { return strings.Contains(r.Accept, "as=PartialObjectMetadata") }

// Exact reports whether r is a partial relist's exact read of one object.
func (r *request) Exact() bool {
	return r.Query.Get("resourceVersionMatch") == "Exact" && strings.Contains(r.Query.Get("fieldSelector"), "metadata.name=")
}

// FullList reports whether r transfers every object of its scope: a list
// of whole objects, or a watch that starts with them (WatchList).
func (r *request) FullList() bool {
	if r.Watch() {
		return r.Query.Get("sendInitialEvents") == "true"
	}
	return r.List() && !r.Metadata() && !r.Exact()
}

func (r *request) String() string {
	kind := r.Method
	switch {
	case r.Watch():
		kind = "WATCH"
	case r.List() && r.Metadata():
		kind = "LIST(metadata)"
	case r.List() && r.Exact():
		kind = "LIST(exact)"
	case r.List():
		kind = "LIST"
	}
	h, e := r.Timing()
	return fmt.Sprintf("%s %s?%s (headers %s, end %s, %d bytes)", kind, r.Path, r.Query.Encode(), h.Round(time.Millisecond), e.Round(time.Millisecond), r.Bytes())
}

// collectionResource returns the resource of a list or watch path
// (/api/v1/configmaps, /api/v1/namespaces/ns/configmaps,
// /apis/g/v/namespaces/ns/r), or "" for a path that names an object.
func collectionResource(path string) string {
	seg := strings.Split(strings.Trim(path, "/"), "/")
	var rest []string
	switch {
	case len(seg) >= 2 && seg[0] == "api":
		rest = seg[2:]
	case len(seg) >= 3 && seg[0] == "apis":
		rest = seg[3:]
	default:
		return ""
	}
	if len(rest) >= 2 && rest[0] == "namespaces" {
		if len(rest) == 2 {
			return "" // a namespace object
		}
		rest = rest[2:]
	}
	if len(rest) != 1 {
		return ""
	}
	return rest[0]
}

type countingBody struct {
	io.ReadCloser
	r *request
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.r.bytes.Add(int64(n))
	if err != nil {
		b.r.end.CompareAndSwap(0, int64(time.Since(b.r.Start)))
	}
	return n, err
}

// newProxy starts a proxy to the cluster's apiserver, stopped by the
// test's cleanup.
func newProxy(t testing.TB) *proxy {
	t.Helper()
	cfg := cluster.RESTConfig()
	target, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Header.Del("Accept-Encoding") // the transport asks for gzip and decodes it
			r := &request{Method: pr.In.Method, Path: pr.In.URL.Path, Query: pr.In.URL.Query(), Accept: pr.In.Header.Get("Accept"),
				Resource: collectionResource(pr.In.URL.Path), Start: time.Now()}
			p.mu.Lock()
			p.reqs = append(p.reqs, r)
			p.mu.Unlock()
			*pr.Out = *pr.Out.WithContext(withRequest(pr.Out.Context(), r))
		},
		Transport:     rt,
		FlushInterval: -1,
		ModifyResponse: func(resp *http.Response) error {
			if r := requestOf(resp.Request.Context()); r != nil {
				r.headers.Store(int64(time.Since(r.Start)))
				resp.Body = &countingBody{ReadCloser: resp.Body, r: r}
			}
			return nil
		},
		ErrorLog: nil,
	}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if b := p.blocked.Load(); b != nil && collectionResource(req.URL.Path) == *b {
			http.Error(w, "blocked by the test's proxy", http.StatusServiceUnavailable)
			return
		}
		rp.ServeHTTP(w, req)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

// config is a client configuration through the proxy, without client-side
// rate limiting.
func (p *proxy) config() *rest.Config {
	return &rest.Config{Host: p.srv.URL, QPS: -1}
}

// kubeconfig writes a kubeconfig for the proxy into dir and returns its
// path.
func (p *proxy) kubeconfig(t testing.TB, dir string) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["proxy"] = &clientcmdapi.Cluster{Server: p.srv.URL}
	kc.AuthInfos["proxy"] = &clientcmdapi.AuthInfo{}
	kc.Contexts["proxy"] = &clientcmdapi.Context{Cluster: "proxy", AuthInfo: "proxy"}
	kc.CurrentContext = "proxy"
	path := filepath.Join(dir, "kubeconfig")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// mark returns the number of requests so far: since(mark) returns the
// ones after.
func (p *proxy) mark() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.reqs)
}

// since returns the requests after mark.
func (p *proxy) since(mark int) []*request {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*request(nil), p.reqs[mark:]...)
}

// traffic sums what a set of requests cost.
type traffic struct {
	// MetadataLists counts metadata lists of every object of a scope;
	// MetadataReads those of one object (limit=1: the read of the
	// server's resourceVersion that fresh by a bookmark makes).
	Requests, FullLists, MetadataLists, MetadataReads, ExactReads, Watches int
	Bytes                                                                  int64
}

func summarize(reqs []*request, resource string) traffic {
	var t traffic
	for _, r := range reqs {
		if resource != "" && r.Resource != resource {
			continue
		}
		t.Requests++
		t.Bytes += r.Bytes()
		switch {
		case r.FullList():
			t.FullLists++
		case r.List() && r.Metadata() && r.Query.Get("limit") == "1":
			t.MetadataReads++
		case r.List() && r.Metadata():
			t.MetadataLists++
		case r.List() && r.Exact():
			t.ExactReads++
		}
		if r.Watch() {
			t.Watches++
		}
	}
	return t
}
