package boltinformer

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers/internalinterfaces"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// An informer that client-go's generated code builds (a NewInformerFunc:
// corev1informers' podInformer.defaultInformer, ...) closes over its
// namespace and TweakListOptions, which the file's identity needs and a
// ListerWatcher of our own must reproduce. The probe learns them the only
// way the generated code tells: it builds the informer over a clientset of
// its own whose transport answers nothing, runs it until its first list
// or watch request, and reads the request (the resource, the namespace,
// and the label and field selectors the tweak set). Nothing leaves the
// process.

// probeTimeout bounds the wait for a probed informer's first request. A
// generated informer makes it at once; one that lists through something
// other than the client given (a NewInformerFunc that ignores it) never
// does, and is detected sooner by a failed or successful list (below).
const probeTimeout = 10 * time.Second

// errProbe is the probe transport's answer to every request.
var errProbe = errors.New("boltinformer: probe: no request leaves the process")

// probedScope is what a probed informer lists.
type probedScope struct {
	gvr       schema.GroupVersionResource
	namespace string
	// labelSelector and fieldSelector are as the tweak wrote them.
	labelSelector, fieldSelector string
	// indexers are the probed informer's.
	indexers cache.Indexers
}

// prober builds informers over clientsets of its own and records their
// first request. Probes are serialized by the factory's mu. Each probe has
// its own clientset, bound to its own record: an informer of an earlier
// probe may still make a request after it was stopped (client-go's
// Reflector lists in a goroutine it does not wait for), and that request
// must not be taken for the current probe's.
type prober struct{}

// probeRecord is one probe's first request; it is the transport of the
// probe's clientset.
type probeRecord struct {
	got  chan struct{} // closed at the first request
	once sync.Once
	url  *url.URL
	verb string
}

func newProber() (*prober, error) { return &prober{}, nil }

// client returns a clientset whose requests rec records and fails. No
// request leaves: the transport answers, and the host is reserved (RFC
// 6761).
func (rec *probeRecord) client() (kubernetes.Interface, error) {
	c, err := kubernetes.NewForConfigAndClient(&rest.Config{Host: "http://boltinformer-probe.invalid"}, &http.Client{Transport: rec})
	if err != nil {
		return nil, fmt.Errorf("boltinformer: probe client: %w", err)
	}
	return c, nil
}

// RoundTrip records the probe's first request and fails it.
func (rec *probeRecord) RoundTrip(req *http.Request) (*http.Response, error) {
	rec.once.Do(func() {
		u := *req.URL
		rec.url, rec.verb = &u, req.Method
		close(rec.got)
	})
	return nil, errProbe
}

// probe builds newFunc's informer over the probe client, runs it until
// its first request (or a sign that it will make none), and returns what
// the request lists. example is the object InformerFor was given.
func (p *prober) probe(newFunc internalinterfaces.NewInformerFunc, resync time.Duration) (probedScope, error) {
	rec := &probeRecord{got: make(chan struct{})}
	client, err := rec.client()
	if err != nil {
		return probedScope{}, err
	}
	inf := newFunc(client, resync)
	if inf == nil {
		return probedScope{}, errors.New("the NewInformerFunc returned no informer")
	}
	// Its list and watch fail at once: no retries logged, and the failure
	// of a list that did not go through the client ends the wait.
	failed := make(chan struct{})
	var failOnce sync.Once
	if err := inf.SetWatchErrorHandlerWithContext(func(context.Context, *cache.Reflector, error) {
		failOnce.Do(func() { close(failed) })
	}); err != nil {
		return probedScope{}, fmt.Errorf("the NewInformerFunc returned an informer that has started: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		inf.RunWithContext(ctx)
	}()
	timer := time.NewTimer(probeTimeout)
	why := ""
	select {
	case <-rec.got:
	case <-failed:
		why = "its list or watch failed without a request through the client it was given"
	case <-inf.HasSyncedChecker().Done():
		why = "it listed through something else than the client it was given"
	case <-done:
		why = "it stopped before any request"
	case <-timer.C:
		why = fmt.Sprintf("it made no request through the client it was given within %s", probeTimeout)
	}
	timer.Stop()
	cancel()
	<-done
	select {
	case <-rec.got:
	default:
		return probedScope{}, errors.New(why)
	}
	sc, err := parseScope(rec.verb, rec.url)
	if err != nil {
		return probedScope{}, err
	}
	sc.indexers = inf.GetIndexer().GetIndexers()
	return sc, nil
}

// parseScope reads a list or watch request of a collection:
// /api/v1[/namespaces/NS]/RESOURCE or /apis/GROUP/VERSION[/namespaces/NS]/RESOURCE.
func parseScope(verb string, u *url.URL) (probedScope, error) {
	if verb != http.MethodGet {
		return probedScope{}, fmt.Errorf("the informer's first request is %s %s, not a list or watch", verb, u.Path)
	}
	seg := strings.Split(strings.Trim(u.Path, "/"), "/")
	var sc probedScope
	switch {
	case len(seg) >= 3 && seg[0] == "api":
		sc.gvr.Version, seg = seg[1], seg[2:]
	case len(seg) >= 4 && seg[0] == "apis":
		sc.gvr.Group, sc.gvr.Version, seg = seg[1], seg[2], seg[3:]
	default:
		return probedScope{}, fmt.Errorf("the informer's first request, %s, is not of a Kubernetes API", u.Path)
	}
	switch {
	case len(seg) == 3 && seg[0] == "namespaces" && seg[1] != "":
		sc.namespace, sc.gvr.Resource = seg[1], seg[2]
	case len(seg) == 1:
		sc.gvr.Resource = seg[0]
	default:
		return probedScope{}, fmt.Errorf("the informer's first request, %s, is not a list or watch of a collection", u.Path)
	}
	q := u.Query()
	sc.labelSelector, sc.fieldSelector = q.Get("labelSelector"), q.Get("fieldSelector")
	return sc, nil
}
