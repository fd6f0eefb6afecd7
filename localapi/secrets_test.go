package localapi_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/localapi"
	"github.com/boltinformer/boltinformer/recovery/crashtest"
)

// secretValue is the Secrets' data in these tests: no response may carry
// it (nor its base64) unless Options.Secrets.
const secretValue = "hunter2-do-not-serve"

func testSecret(name string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Data: map[string][]byte{"password": []byte(secretValue)}}
}

func unstructuredSecret(name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("v1")
	u.SetKind("Secret")
	u.SetNamespace("ns")
	u.SetName(name)
	u.Object["data"] = map[string]any{"password": base64.StdEncoding.EncodeToString([]byte(secretValue))}
	return u
}

// runInformer runs a DB informer of src until the test ends and waits for
// its sync.
func runInformer(t *testing.T, db *boltinformer.DB, name string, src *crashtest.Source, example runtime.Object, resource string) {
	t.Helper()
	inf, err := db.NewInformer(name, src, example, 0, nil, &boltinformer.InformerOptions{Resource: resource})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); inf.RunWithContext(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, name+" to sync", inf.HasSynced)
}

// secretForms are the requests of every form a resource is served in:
// list, get, watch, Table, metadata, protobuf.
func secretForms(resource string) map[string][2]string {
	return map[string][2]string{
		"list":     {"/api/v1/" + resource, ""},
		"get":      {"/api/v1/namespaces/ns/" + resource + "/s", ""},
		"watch":    {"/api/v1/" + resource + "?watch=1&timeoutSeconds=1", ""},
		"table":    {"/api/v1/namespaces/ns/" + resource, "application/json;as=Table;v=v1;g=meta.k8s.io"},
		"metadata": {"/api/v1/" + resource, "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"},
		"protobuf": {"/api/v1/" + resource, "application/vnd.kubernetes.protobuf"},
	}
}

// checkSecretsRefused requests resource in every form and in discovery:
// each is refused with 403 and no body holds the Secrets' data.
func checkSecretsRefused(t *testing.T, cfg *rest.Config, resource string) {
	t.Helper()
	c := httpClient(t, cfg)
	for form, req := range secretForms(resource) {
		code, body := rawGet(t, c, cfg.Host+req[0], req[1])
		if code != http.StatusForbidden || leaks(body) {
			t.Errorf("%s of %s without Options.Secrets: %d %.300q, want 403 without the data", form, resource, code, body)
		}
	}
	code, body := rawGet(t, c, cfg.Host+"/api/v1", "")
	var rl metav1.APIResourceList
	if code == http.StatusOK {
		if err := json.Unmarshal(body, &rl); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range rl.APIResources {
		// Listed without verbs (kubectl get then reads why), never as served.
		if (r.Name == resource || r.Kind == "Secret") && len(r.Verbs) > 0 {
			t.Errorf("discovery announces %s (%s) with verbs %v without Options.Secrets", r.Name, r.Kind, r.Verbs)
		}
	}
}

func leaks(body []byte) bool {
	return strings.Contains(string(body), secretValue) || strings.Contains(string(body), base64.StdEncoding.EncodeToString([]byte(secretValue)))
}

func rawGet(t *testing.T, c *http.Client, url, accept string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// TestRegressionSecretsRefusedByKind (issue 23, finding 4): Secrets are
// refused without Options.Secrets by what the objects are (core Secrets),
// not by the informer's Resource being exactly "secrets": an informer of
// Secrets under "Secrets", "secret" or "edge-secrets", an unstructured
// informer named "mysecrets", live or static (inspect serve), and in every
// form and discovery. With Options.Secrets they are served (the paths
// are right).
func TestRegressionSecretsRefusedByKind(t *testing.T) {
	for _, resource := range []string{"Secrets", "secret", "edge-secrets"} {
		t.Run("typed/"+resource, func(t *testing.T) {
			a := startAgent(t, "", newPodSource(1))
			src := crashtest.NewSource(func() runtime.Object { return &corev1.SecretList{} })
			if _, err := src.Create(testSecret("s")); err != nil {
				t.Fatal(err)
			}
			runInformer(t, a.db, resource, src, &corev1.Secret{}, resource)
			_, cfg, _ := serveAgent(t, a, &localapi.Options{Secrets: true})
			if code, body := rawGet(t, httpClient(t, cfg), cfg.Host+"/api/v1/namespaces/ns/"+resource+"/s", ""); code != http.StatusOK || !leaks(body) {
				t.Fatalf("with Options.Secrets: %d %.300s", code, body)
			}
			_, cfg, _ = serveAgent(t, a, nil)
			checkSecretsRefused(t, cfg, resource)
		})
	}
	t.Run("unstructured/mysecrets", func(t *testing.T) {
		a := startAgent(t, "", newPodSource(1))
		src := crashtest.NewSource(func() runtime.Object { return &unstructured.UnstructuredList{} })
		if _, err := src.Create(unstructuredSecret("s")); err != nil {
			t.Fatal(err)
		}
		runInformer(t, a.db, "mysecrets", src, &unstructured.Unstructured{}, "mysecrets")
		_, cfg, _ := serveAgent(t, a, &localapi.Options{Secrets: true})
		if code, body := rawGet(t, httpClient(t, cfg), cfg.Host+"/api/v1/namespaces/ns/mysecrets/s", ""); code != http.StatusOK || !leaks(body) {
			t.Fatalf("with Options.Secrets: %d %.300s", code, body)
		}
		_, cfg, _ = serveAgent(t, a, nil)
		checkSecretsRefused(t, cfg, "mysecrets")
	})
	for _, resource := range []string{"Secrets", "edge-secrets", "mysecrets"} {
		t.Run("static/"+resource, func(t *testing.T) {
			// As inspect serve reads a file: the kind its state records.
			snap := localapi.Snapshot{Informer: resource, Resource: resource, Kind: corev1.SchemeGroupVersion.WithKind("Secret"),
				Objects: []runtime.Object{testSecret("s")}, ResourceVersion: "5"}
			if resource == "mysecrets" {
				snap.Kind, snap.Objects = schema.GroupVersionKind{}, []runtime.Object{unstructuredSecret("s")}
			}
			snaps := []localapi.Snapshot{snap}
			for _, allowed := range []bool{true, false} {
				h, err := localapi.NewStatic(snaps, &localapi.Options{Secrets: allowed, Logger: &quietLogger})
				if err != nil {
					t.Fatal(err)
				}
				cfg := serve(t, h, "")
				if allowed {
					if code, body := rawGet(t, httpClient(t, cfg), cfg.Host+"/api/v1/namespaces/ns/"+resource+"/s", ""); code != http.StatusOK || !leaks(body) {
						t.Fatalf("with Options.Secrets: %d %.300s", code, body)
					}
					continue
				}
				checkSecretsRefused(t, cfg, resource)
			}
		})
	}
}

// TestRegressionSecretArrivesLater (issue 23, finding 4): an informer
// served as another resource (unstructured "things") that gets a core
// Secret later is refused from then on: the open watch ends without the
// Secret, and every later request and discovery refuse the resource.
func TestRegressionSecretArrivesLater(t *testing.T) {
	a := startAgent(t, "", newPodSource(1))
	src := crashtest.NewSource(func() runtime.Object { return &unstructured.UnstructuredList{} })
	thing := &unstructured.Unstructured{}
	thing.SetAPIVersion("example.com/v1")
	thing.SetKind("Thing")
	thing.SetNamespace("ns")
	thing.SetName("t")
	if _, err := src.Create(thing); err != nil {
		t.Fatal(err)
	}
	runInformer(t, a.db, "things", src, &unstructured.Unstructured{}, "example.com/v1, Resource=things")
	_, cfg, _ := serveAgent(t, a, nil)
	c := httpClient(t, cfg)
	if code, body := rawGet(t, c, cfg.Host+"/apis/example.com/v1/things", ""); code != http.StatusOK {
		t.Fatalf("things: %d %s", code, body)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, cfg.Host+"/apis/example.com/v1/things?watch=1&timeoutSeconds=60", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	if !sc.Scan() || !strings.Contains(sc.Text(), `"name":"t"`) {
		t.Fatalf("the watch's initial event: %q %v", sc.Text(), sc.Err())
	}
	if _, err := src.Create(unstructuredSecret("s")); err != nil {
		t.Fatal(err)
	}
	// The next event ends the watch with 403: never the Secret.
	if !sc.Scan() || leaks(sc.Bytes()) || !strings.Contains(sc.Text(), `"type":"ERROR"`) || !strings.Contains(sc.Text(), `"code":403`) {
		t.Fatalf("the open watch after a Secret arrived: %.500q %v", sc.Text(), sc.Err())
	}
	if sc.Scan() {
		t.Fatalf("the watch goes on after its error: %.300q", sc.Text())
	}
	for form, req := range map[string][2]string{
		"list":  {"/apis/example.com/v1/things", ""},
		"get":   {"/apis/example.com/v1/namespaces/ns/things/s", ""},
		"watch": {"/apis/example.com/v1/things?watch=1&timeoutSeconds=1", ""},
		"table": {"/apis/example.com/v1/things", "application/json;as=Table;v=v1;g=meta.k8s.io"},
	} {
		if code, body := rawGet(t, c, cfg.Host+req[0], req[1]); code != http.StatusForbidden || leaks(body) {
			t.Errorf("%s after a Secret arrived: %d %.300q, want 403", form, code, body)
		}
	}
	// Discovery lists the resource without verbs: nothing is served.
	code, body := rawGet(t, c, cfg.Host+"/apis/example.com/v1", "")
	var rl metav1.APIResourceList
	if code == http.StatusOK {
		if err := json.Unmarshal(body, &rl); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range rl.APIResources {
		if len(r.Verbs) > 0 {
			t.Errorf("discovery of example.com/v1 after a Secret arrived: %s with verbs %v", r.Name, r.Verbs)
		}
	}
}
