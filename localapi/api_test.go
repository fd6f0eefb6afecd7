package localapi_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/pager"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/internal/testobj"
	"github.com/boltinformer/boltinformer/localapi"
	"github.com/boltinformer/boltinformer/recovery/crashtest"
)

// listPods lists pods with opts in namespace ns ("" all).
func listPods(t testing.TB, rc *rest.RESTClient, ns string, opts metav1.ListOptions) (*corev1.PodList, error) {
	t.Helper()
	var l corev1.PodList
	err := rc.Get().Namespace(ns).Resource("pods").VersionedParams(&opts, scheme.ParameterCodec).Do(context.Background()).Into(&l)
	return &l, err
}

func podNames(l *corev1.PodList) []string {
	var out []string
	for _, p := range l.Items {
		out = append(out, p.Namespace+"/"+p.Name)
	}
	return out
}

// truthKeys are the source's keys whose objects pass keep, sorted.
func truthKeys(src *crashtest.Source, keep func(*corev1.Pod) bool) []string {
	var out []string
	for k, o := range src.Objects() {
		if keep == nil || keep(o.(*corev1.Pod)) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// TestList: lists answer the source's objects in key order, at the
// cache's resourceVersion, filtered by namespace, label and field
// selectors; unknown field labels and bad selectors are 400s.
func TestList(t *testing.T) {
	a := startAgent(t, "", newPodSource(60))
	_, _, rc := serveAgent(t, a, nil)
	for _, tc := range []struct {
		name string
		ns   string
		opts metav1.ListOptions
		keep func(*corev1.Pod) bool
	}{
		{"all", "", metav1.ListOptions{}, nil},
		{"namespace", "ns-1", metav1.ListOptions{}, func(p *corev1.Pod) bool { return p.Namespace == "ns-1" }},
		{"label", "", metav1.ListOptions{LabelSelector: "tier=db"}, func(p *corev1.Pod) bool { return p.Labels["tier"] == "db" }},
		{"label-set", "ns-2", metav1.ListOptions{LabelSelector: "tier in (web,cache),app!=app-5"}, func(p *corev1.Pod) bool {
			return p.Namespace == "ns-2" && p.Labels["tier"] != "db" && p.Labels["app"] != "app-5"
		}},
		{"nodeName", "", metav1.ListOptions{FieldSelector: "spec.nodeName=node-1"}, func(p *corev1.Pod) bool { return p.Spec.NodeName == "node-1" }},
		{"name", "", metav1.ListOptions{FieldSelector: "metadata.name=pod-000007"}, func(p *corev1.Pod) bool { return p.Name == "pod-000007" }},
		{"name-in-namespace", "ns-1", metav1.ListOptions{FieldSelector: "metadata.name=pod-000007"}, func(p *corev1.Pod) bool { return p.Name == "pod-000007" && p.Namespace == "ns-1" }},
		{"name-elsewhere", "ns-0", metav1.ListOptions{FieldSelector: "metadata.name=pod-000007"}, func(p *corev1.Pod) bool { return false }},
		{"namespace-field", "", metav1.ListOptions{FieldSelector: "metadata.namespace!=ns-0,spec.nodeName=node-0"}, func(p *corev1.Pod) bool {
			return p.Namespace != "ns-0" && p.Spec.NodeName == "node-0"
		}},
		{"phase", "", metav1.ListOptions{FieldSelector: "status.phase=Running"}, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := listPods(t, rc, tc.ns, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if want := truthKeys(a.src, tc.keep); !slices.Equal(podNames(l), want) {
				t.Fatalf("got %v\nwant %v", podNames(l), want)
			}
			if l.ResourceVersion != a.src.ResourceVersion() {
				t.Fatalf("resourceVersion %q, want %q", l.ResourceVersion, a.src.ResourceVersion())
			}
		})
	}
	for _, tc := range []struct {
		opts metav1.ListOptions
		want string
	}{
		{metav1.ListOptions{FieldSelector: "spec.foo=bar"}, "field label not supported: spec.foo"},
		{metav1.ListOptions{LabelSelector: "a in (b"}, "unable to parse requirement: found '', expected: ',' or ')'"},
		{metav1.ListOptions{FieldSelector: "a~b"}, "invalid selector: 'a~b'; can't understand 'a~b'"},
		{metav1.ListOptions{Continue: "not-a-token"}, "continue key is not valid"},
		{metav1.ListOptions{ResourceVersion: "abc"}, `invalid resource version: "abc"`},
	} {
		_, err := listPods(t, rc, "", tc.opts)
		if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want a BadRequest with %q", tc.opts, err, tc.want)
		}
	}
}

// TestListPages: client-go's pager reads every object once, in order, in
// pages of the state at the first page's resourceVersion even while the
// cache changes between pages; a continue token older than the window is
// 410 Expired with a token that continues from the current state.
func TestListPages(t *testing.T) {
	a := startAgent(t, "", newPodSource(50))
	_, _, rc := serveAgent(t, a, &localapi.Options{WindowEvents: 64})
	first, err := listPods(t, rc, "", metav1.ListOptions{Limit: 7})
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Items) != 7 || first.Continue == "" || first.RemainingItemCount == nil || *first.RemainingItemCount != 43 {
		t.Fatalf("first page: %d items, continue %q, remaining %v", len(first.Items), first.Continue, first.RemainingItemCount)
	}
	want := truthKeys(a.src, nil)
	rv := first.ResourceVersion
	// Change the cache: the pages keep showing the first page's state.
	if err := a.src.Delete("ns-2/pod-000038"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.src.Create(testobj.Pod(1000, 3, 2, "")); err != nil {
		t.Fatal(err)
	}
	p := testobj.Pod(44, 3, 2, "")
	p.Labels["changed"] = "1"
	if _, err := a.src.Update(p); err != nil {
		t.Fatal(err)
	}
	a.caughtUp(t)
	got := podNames(first)
	next := first.Continue
	for next != "" {
		page, err := listPods(t, rc, "", metav1.ListOptions{Limit: 7, Continue: next})
		if err != nil {
			t.Fatal(err)
		}
		if page.ResourceVersion != rv {
			t.Fatalf("page at %q, want the first page's %q", page.ResourceVersion, rv)
		}
		for _, it := range page.Items {
			if it.Name == "pod-000044" && it.Labels["changed"] != "" {
				t.Fatalf("a later version of %s in a page of %s", it.Name, rv)
			}
		}
		got = append(got, podNames(page)...)
		next = page.Continue
	}
	if !slices.Equal(got, want) {
		t.Fatalf("pages:\n%v\nwant\n%v", got, want)
	}

	// The pager, as client-go's reflector uses it.
	pg := pager.New(func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		return listPods(t, rc, "ns-1", opts)
	})
	pg.PageSize = 4
	var names []string
	if err := pg.EachListItem(t.Context(), metav1.ListOptions{}, func(obj runtime.Object) error {
		m, _ := meta.Accessor(obj)
		names = append(names, m.GetNamespace()+"/"+m.GetName())
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if want := truthKeys(a.src, func(p *corev1.Pod) bool { return p.Namespace == "ns-1" }); !slices.Equal(names, want) {
		t.Fatalf("pager: %v\nwant %v", names, want)
	}

	// Out of the window: 410, with a token for the rest.
	page, err := listPods(t, rc, "", metav1.ListOptions{Limit: 5})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 70 {
		if _, err := a.src.Upsert(testobj.Pod(i, 3, 2, "")); err != nil {
			t.Fatal(err)
		}
	}
	a.caughtUp(t)
	_, err = listPods(t, rc, "", metav1.ListOptions{Limit: 5, Continue: page.Continue})
	var se *apierrors.StatusError
	if !apierrors.IsResourceExpired(err) || !asStatus(err, &se) || se.ErrStatus.ListMeta.Continue == "" {
		t.Fatalf("continue after 70 events with a window of 64: %v, want 410 Expired with a continue token", err)
	}
	rest, err := listPods(t, rc, "", metav1.ListOptions{Limit: 500, Continue: se.ErrStatus.ListMeta.Continue})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := append(podNames(page), podNames(rest)...), truthKeys(a.src, nil); !slices.Equal(got, want) {
		t.Fatalf("after the inconsistent continue: %v\nwant %v", got, want)
	}
	// An Exact list at a resourceVersion in the window, and one before it.
	if _, err := listPods(t, rc, "", metav1.ListOptions{ResourceVersion: rv, ResourceVersionMatch: metav1.ResourceVersionMatchExact}); !apierrors.IsResourceExpired(err) {
		t.Fatalf("Exact list at %s, out of the window: %v, want 410", rv, err)
	}
	cur := a.src.ResourceVersion()
	if _, err := a.src.Create(testobj.Pod(2000, 3, 2, "")); err != nil {
		t.Fatal(err)
	}
	a.caughtUp(t)
	l, err := listPods(t, rc, "", metav1.ListOptions{ResourceVersion: cur, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
	if err != nil || l.ResourceVersion != cur || len(l.Items) != len(a.src.Objects())-1 {
		t.Fatalf("Exact list at %s: %v, %d items at %q", cur, err, len(l.Items), l.ResourceVersion)
	}
}

func asStatus(err error, se **apierrors.StatusError) bool {
	s, ok := err.(*apierrors.StatusError)
	*se = s
	return ok
}

// TestGetAndErrors: GET of one object, with the apiserver's error shapes
// for what is not there or not allowed.
func TestGetAndErrors(t *testing.T) {
	a := startAgent(t, "", newPodSource(5))
	_, cfg, rc := serveAgent(t, a, nil)
	var p corev1.Pod
	if err := rc.Get().Namespace("ns-1").Resource("pods").Name("pod-000001").Do(t.Context()).Into(&p); err != nil {
		t.Fatal(err)
	}
	if p.Name != "pod-000001" || p.Kind != "" || p.Spec.NodeName != "node-1" {
		t.Fatalf("got %s/%s kind %q node %q", p.Namespace, p.Name, p.Kind, p.Spec.NodeName)
	}
	if err := rc.Get().Namespace("ns-1").Resource("pods").Name("pod-000001").SubResource("status").Do(t.Context()).Into(&p); err != nil {
		t.Fatalf("pods/status: %v", err)
	}
	err := rc.Get().Namespace("ns-0").Resource("pods").Name("nope").Do(t.Context()).Into(&p)
	var se *apierrors.StatusError
	if !apierrors.IsNotFound(err) || !asStatus(err, &se) || se.ErrStatus.Message != `pods "nope" not found` || se.ErrStatus.Details.Kind != "pods" {
		t.Fatalf("missing pod: %v (%+v)", err, se)
	}
	for _, path := range []string{"/api/v1/widgets", "/api/v1/namespaces/ns-0/pods/x/log", "/apis/apps/v1/deployments", "/api/v2/pods", "/nope", "/api/v1/pods/x"} {
		if err := rc.Get().AbsPath(path).Do(t.Context()).Error(); !apierrors.IsNotFound(err) {
			t.Errorf("GET %s: %v, want 404", path, err)
		}
	}
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		for _, path := range []string{"/api/v1/namespaces/ns-1/pods/pod-000001", "/api/v1/namespaces/ns-1/pods", "/api/v1"} {
			req, _ := http.NewRequest(m, cfg.Host+path, strings.NewReader("{}"))
			resp, err := httpClient(t, cfg).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var st metav1.Status
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err := json.Unmarshal(b, &st); err != nil || resp.StatusCode != http.StatusMethodNotAllowed || st.Reason != metav1.StatusReasonMethodNotAllowed || st.Kind != "Status" {
				t.Errorf("%s %s: %d %s", m, path, resp.StatusCode, b)
			}
		}
	}
}

// TestFormats: protobuf and YAML lists and gets; a Table with kubectl's
// columns; PartialObjectMetadata through client-go's metadata client.
func TestFormats(t *testing.T) {
	a := startAgent(t, "", newPodSource(12))
	_, cfg, _ := serveAgent(t, a, nil)

	pcfg := rest.CopyConfig(cfg)
	pcfg.ContentType = "application/vnd.kubernetes.protobuf"
	pcfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf"
	prc := restClient(t, pcfg, schema.GroupVersion{Version: "v1"})
	res := prc.Get().Namespace("ns-0").Resource("pods").Do(t.Context())
	var ct string
	res.ContentType(&ct)
	var l corev1.PodList
	if err := res.Into(&l); err != nil || ct != "application/vnd.kubernetes.protobuf" || len(l.Items) != 4 {
		t.Fatalf("protobuf list: %v, content type %q, %d items", err, ct, len(l.Items))
	}
	want := a.src.Objects()["ns-0/pod-000003"].(*corev1.Pod)
	var p corev1.Pod
	if err := prc.Get().Namespace("ns-0").Resource("pods").Name("pod-000003").Do(t.Context()).Into(&p); err != nil || p.Spec.Containers[0].Image != want.Spec.Containers[0].Image || !p.Spec.Containers[0].Resources.Requests.Cpu().Equal(*want.Spec.Containers[0].Resources.Requests.Cpu()) {
		t.Fatalf("protobuf get: %v, %+v", err, p.Spec.Containers)
	}

	get := func(path, accept string) (int, string, []byte) {
		req, _ := http.NewRequest(http.MethodGet, cfg.Host+path, nil)
		req.Header.Set("Accept", accept)
		resp, err := httpClient(t, cfg).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Content-Type"), b
	}
	code, ct, b := get("/api/v1/namespaces/ns-1/pods/pod-000001", "application/yaml")
	if code != 200 || ct != "application/yaml" || !strings.Contains(string(b), "kind: Pod\n") {
		t.Fatalf("yaml get: %d %s\n%s", code, ct, b)
	}
	code, _, b = get("/api/v1/namespaces/ns-1/pods", "application/yaml")
	if code != 200 || !strings.Contains(string(b), "kind: PodList\n") {
		t.Fatalf("yaml list: %d\n%s", code, b)
	}
	// kubectl's Accept header for `kubectl get`.
	code, _, b = get("/api/v1/namespaces/ns-1/pods?limit=500", "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json")
	var table metav1.Table
	if err := json.Unmarshal(b, &table); code != 200 || err != nil {
		t.Fatalf("table: %d %v\n%s", code, err, b)
	}
	var cols []string
	for _, c := range table.ColumnDefinitions {
		cols = append(cols, c.Name)
	}
	if table.Kind != "Table" || strings.Join(cols, ",") != "Name,READY,STATUS,RESTARTS,Age,IP,NODE,NOMINATED NODE,READINESS GATES" || len(table.Rows) != 4 {
		t.Fatalf("table %s %v with %d rows", table.Kind, cols, len(table.Rows))
	}
	if c := table.Rows[0].Cells; c[0] != "pod-000001" || c[2] != "Running" || c[6] != "node-1" {
		t.Fatalf("row cells %v", c)
	}
	var partial metav1.PartialObjectMetadata
	if err := json.Unmarshal(table.Rows[0].Object.Raw, &partial); err != nil || partial.Kind != "PartialObjectMetadata" || partial.Name != "pod-000001" || partial.Labels["tier"] == "" {
		t.Fatalf("row object: %v %s", err, table.Rows[0].Object.Raw)
	}
	if code, _, b = get("/api/v1/namespaces/ns-1/pods", "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io"); code != http.StatusNotAcceptable {
		t.Fatalf("a protobuf Table: %d %s, want 406", code, b)
	}

	mc, err := metadata.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ml, err := mc.Resource(corev1.SchemeGroupVersion.WithResource("pods")).Namespace("ns-2").List(t.Context(), metav1.ListOptions{LabelSelector: "tier=cache"})
	if err != nil {
		t.Fatal(err)
	}
	var mnames []string
	for _, it := range ml.Items {
		mnames = append(mnames, it.Namespace+"/"+it.Name)
	}
	if want := truthKeys(a.src, func(p *corev1.Pod) bool { return p.Namespace == "ns-2" && p.Labels["tier"] == "cache" }); !slices.Equal(mnames, want) || ml.ResourceVersion != a.src.ResourceVersion() {
		t.Fatalf("metadata list %v at %s, want %v", mnames, ml.ResourceVersion, want)
	}
	m, err := mc.Resource(corev1.SchemeGroupVersion.WithResource("pods")).Namespace("ns-2").Get(t.Context(), "pod-000002", metav1.GetOptions{})
	if err != nil || m.Name != "pod-000002" || m.UID != a.src.Objects()["ns-2/pod-000002"].(*corev1.Pod).UID {
		t.Fatalf("metadata get: %v %+v", err, m)
	}
}

// TestDiscovery: /api, /apis, the resource lists and /version, as
// client-go's discovery reads them; Secrets only when configured.
func TestDiscovery(t *testing.T) {
	src := newPodSource(3)
	a := startAgent(t, "", src)
	secrets := crashtest.NewSource(func() runtime.Object { return &corev1.SecretList{} })
	if _, err := secrets.Create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s"}, Data: map[string][]byte{"k": []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	inf, err := a.db.NewInformer("v1/secrets", secrets, &corev1.Secret{}, 0, nil, &boltinformer.InformerOptions{Resource: "/v1, Resource=secrets"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); inf.RunWithContext(ctx) }()
	defer func() { cancel(); <-done }()
	waitFor(t, "secrets to sync", inf.HasSynced)

	for _, withSecrets := range []bool{false, true} {
		_, _, rc := serveAgent(t, a, &localapi.Options{Secrets: withSecrets})
		var rl metav1.APIResourceList
		if err := rc.Get().AbsPath("/api/v1").Do(t.Context()).Into(&rl); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, r := range rl.APIResources {
			if len(r.Verbs) == 0 {
				continue // not served: listed for kubectl to read why
			}
			names = append(names, r.Name)
			if r.Name == "pods" && (!r.Namespaced || r.Kind != "Pod" || strings.Join(r.Verbs, ",") != "get,list,watch" || strings.Join(r.ShortNames, ",") != "po" || strings.Join(r.Categories, ",") != "all") {
				t.Fatalf("pods: %+v", r)
			}
		}
		wantNames := "pods"
		if withSecrets {
			wantNames = "pods,secrets"
		}
		if strings.Join(names, ",") != wantNames {
			t.Fatalf("secrets served %v: resources %v", withSecrets, names)
		}
		var sl corev1.SecretList
		err := rc.Get().Resource("secrets").Do(t.Context()).Into(&sl)
		if withSecrets && (err != nil || len(sl.Items) != 1 || string(sl.Items[0].Data["k"]) != "v") {
			t.Fatalf("secrets served: %v %+v", err, sl.Items)
		}
		if !withSecrets && !apierrors.IsForbidden(err) {
			t.Fatalf("secrets not served: %v, want 403", err)
		}
	}
	_, _, rc := serveAgent(t, a, nil)
	var av metav1.APIVersions
	if err := rc.Get().AbsPath("/api").Do(t.Context()).Into(&av); err != nil || strings.Join(av.Versions, ",") != "v1" {
		t.Fatalf("/api: %v %+v", err, av)
	}
	var gl metav1.APIGroupList
	// The built-in groups are listed, their resources without verbs: no
	// informer serves them (kubectl get reads why).
	if err := rc.Get().AbsPath("/apis").Do(t.Context()).Into(&gl); err != nil || len(gl.Groups) == 0 {
		t.Fatalf("/apis: %v %+v", err, gl)
	}
	var apps metav1.APIResourceList
	if err := rc.Get().AbsPath("/apis/apps/v1").Do(t.Context()).Into(&apps); err != nil || len(apps.APIResources) == 0 {
		t.Fatalf("/apis/apps/v1: %v %+v", err, apps)
	}
	for _, r := range apps.APIResources {
		if len(r.Verbs) > 0 {
			t.Fatalf("apps/v1 %s has verbs %v: nothing serves it", r.Name, r.Verbs)
		}
	}
	b, err := rc.Get().AbsPath("/version").DoRaw(t.Context())
	var info struct{ GitVersion, Major, Minor string }
	if err != nil || json.Unmarshal(b, &info) != nil || info.GitVersion != "v1.37.2" || info.Minor != "37" {
		t.Fatalf("/version: %v %s", err, b)
	}
	if err := rc.Get().AbsPath("/openapi/v2").Do(t.Context()).Error(); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "serves no OpenAPI") {
		t.Fatalf("/openapi/v2: %v, want 403 with the reason", err)
	}
}
