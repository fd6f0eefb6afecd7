package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"

	"github.com/boltinformer/boltinformer/indexer"
	"github.com/boltinformer/boltinformer/store"
)

const plainSecret = "plaintext-do-not-serve"

// writePlainSecrets writes a file with two informers of plaintext core
// Secrets whose Resource is not "secrets": "edge-secrets" (typed) and
// "mysecrets" (unstructured).
func writePlainSecrets(path string) (err error) {
	db, err := store.Open(path, &store.Options{NoSync: true})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, db.Close()) }()
	committer := store.NewCommitter(db, &store.CommitterOptions{MaxDelay: time.Hour})
	typed := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "db", ResourceVersion: "10"},
		Data: map[string][]byte{"password": []byte(plainSecret)}}
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("v1")
	u.SetKind("Secret")
	u.SetNamespace("prod")
	u.SetName("db")
	u.SetResourceVersion("11")
	u.Object["data"] = map[string]any{"password": base64.StdEncoding.EncodeToString([]byte(plainSecret))}
	for _, inf := range []struct {
		name    string
		example any
		obj     any
	}{{"edge-secrets", &corev1.Secret{}, typed}, {"mysecrets", &unstructured.Unstructured{}, u}} {
		opts := &indexer.Options{Committer: committer, Identity: store.State{ClusterID: "c", Resource: inf.name, ListOptions: "none"}}
		switch ex := inf.example.(type) {
		case *corev1.Secret:
			opts.Example = ex
		case *unstructured.Unstructured:
			opts.Example = ex
		}
		x, err := indexer.Open(db, inf.name, nil, opts)
		if err != nil {
			return err
		}
		err = x.Replace([]any{inf.obj}, "12")
		err = errors.Join(err, committer.Flush(context.Background()), x.Close())
		if err != nil {
			return err
		}
	}
	return nil
}

// TestRegressionServeSecretsByKind (issue 23, finding 4): inspect serve
// refuses, without --secrets, the Secrets of informers whose Resource is
// not "secrets" (edge-secrets, an unstructured mysecrets), in every form,
// and says so on stderr; with --secrets it serves them.
func TestRegressionServeSecretsByKind(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache.db")
	if err := writePlainSecrets(path); err != nil {
		t.Fatal(err)
	}
	get := func(cfg *rest.Config, p, accept string) (int, string) {
		t.Helper()
		c, err := rest.HTTPClientFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, cfg.Host+p, nil)
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
		return resp.StatusCode, string(b)
	}
	leaks := func(body string) bool {
		return strings.Contains(body, plainSecret) || strings.Contains(body, base64.StdEncoding.EncodeToString([]byte(plainSecret)))
	}
	cfg, stop := startServe(t, path, "--secrets")
	for _, res := range []string{"edge-secrets", "mysecrets"} {
		if code, body := get(cfg, "/api/v1/namespaces/prod/"+res+"/db", ""); code != http.StatusOK || !leaks(body) {
			t.Fatalf("%s with --secrets: %d %.300s", res, code, body)
		}
	}
	stop()
	cfg, stop = startServe(t, path)
	for _, res := range []string{"edge-secrets", "mysecrets"} {
		for form, req := range map[string][2]string{
			"list":     {"/api/v1/" + res, ""},
			"get":      {"/api/v1/namespaces/prod/" + res + "/db", ""},
			"watch":    {"/api/v1/" + res + "?watch=1&timeoutSeconds=1", ""},
			"table":    {"/api/v1/" + res, "application/json;as=Table;v=v1;g=meta.k8s.io"},
			"metadata": {"/api/v1/" + res, "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"},
			"protobuf": {"/api/v1/" + res, "application/vnd.kubernetes.protobuf"},
		} {
			if code, body := get(cfg, req[0], req[1]); code != http.StatusForbidden || leaks(body) || !strings.Contains(body, "--secrets") {
				t.Errorf("%s of %s without --secrets: %d %.300q, want 403 naming --secrets", form, res, code, body)
			}
		}
	}
	// Discovery lists them without verbs (kubectl get then reads why),
	// never as served.
	if code, body := get(cfg, "/api/v1", ""); code == http.StatusOK {
		var rl metav1.APIResourceList
		if err := json.Unmarshal([]byte(body), &rl); err != nil {
			t.Fatal(err)
		}
		for _, r := range rl.APIResources {
			if r.Kind == "Secret" && len(r.Verbs) > 0 {
				t.Errorf("discovery announces %s with verbs %v without --secrets", r.Name, r.Verbs)
			}
		}
	}
	_, stderr, code := stop()
	if code != 0 || !strings.Contains(stderr, `informer "edge-secrets" not served`) || !strings.Contains(stderr, `informer "mysecrets" not served`) {
		t.Fatalf("exit %d, stderr:\n%s", code, stderr)
	}
}

// TestRegressionServeStateDirUntrusted (issue 23, finding 7): an existing
// --state-dir that another user made, or that others may write, holding a
// token they planted, is refused with the directory and the reason;
// before, serve used the planted token, and its planter could read the
// cache through the local API.
func TestRegressionServeStateDirUntrusted(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "token"), []byte("planted\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := run(t, "serve", fixture(t), "--state-dir", dir)
	if code != exitFailure || !strings.Contains(stderr, "--state-dir: "+dir+": directory mode 0777: group or others may write it") {
		t.Fatalf("a state dir of mode 0777: exit %d\n%s", code, stderr)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(dir, 12345, 12345); err != nil {
		t.Skipf("SKIPPED LOUDLY: cannot give %s to another user (run as root): %v", dir, err)
	}
	_, stderr, code = run(t, "serve", fixture(t), "--state-dir", dir)
	if code != exitFailure || !strings.Contains(stderr, "--state-dir: "+dir+": owned by uid 12345") {
		t.Fatalf("another user's state dir: exit %d\n%s", code, stderr)
	}
}
