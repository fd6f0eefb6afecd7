//go:build linux

package main

import (
	"bytes"
	"errors"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/boltinformer/boltinformer/internal/codec"
	"github.com/boltinformer/boltinformer/recovery/crashtest"
	"github.com/boltinformer/boltinformer/store"
)

// runMain runs the agent's main in a child process with args and returns
// its exit status, stdout and stderr. A bound of two minutes guards
// against a hang (never a timing threshold).
func runMain(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), mainArgsEnv+"="+strings.Join(args, "\n"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	guard := time.NewTimer(2 * time.Minute)
	defer guard.Stop()
	var err error
	select {
	case err = <-exited:
	case <-guard.C:
		_ = cmd.Process.Kill()
		<-exited
		t.Fatalf("edge-agent %s did not exit\n%s", strings.Join(args, " "), stderr.String())
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, stdout.String(), stderr.String()
}

// TestRegressionFlagsCheckedBeforeTheFile: a bad flag or key file is an
// error before the cache file is created or opened (the agent opened the
// file first, and then failed on -listen or the key).
func TestRegressionFlagsCheckedBeforeTheFile(t *testing.T) {
	dir := t.TempDir()
	kubeconfig, err := writeKubeconfig(dir, "https://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	keyFile, err := writeKeyFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	oldKeys := filepath.Join(dir, "old-keys")
	if err := os.WriteFile(oldKeys, []byte("Ym9sdGluZm9ybWVyLXRlc3Qta2V5LTMyLWJ5dGVzISE=\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	identity := filepath.Join(dir, "identity.yaml")
	if err := os.WriteFile(identity, []byte("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n  providers: [{identity: {}}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	identityFirst := filepath.Join(dir, "identity-first.yaml")
	if err := os.WriteFile(identityFirst, []byte("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n- resources: [secrets]\n"+
		"  providers: [{identity: {}}, {aesgcm: {keys: [{name: k1, secret: Ym9sdGluZm9ybWVyLXRlc3Qta2V5LTMyLWJ5dGVzISE=}]}}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Issue 23, finding 8: a key file others may read was read.
	readable := filepath.Join(dir, "readable.yaml")
	if err := copyFileMode(keyFile, readable, 0o644); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(dir, "agent.db")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"listen", []string{"-listen=nonsense", "-key-file=" + keyFile}, `-listen "nonsense": want host:port`},
		{"listen port", []string{"-listen=127.0.0.1:http2", "-key-file=" + keyFile}, `-listen "127.0.0.1:http2": port "http2" is not a port number`},
		{"namespace", []string{"-namespace=Edge_1", "-key-file=" + keyFile}, `-namespace "Edge_1": `},
		{"once", []string{"-once", "-key-file=" + keyFile}, "-once: only with -report"},
		{"missing key file", []string{"-key-file=" + filepath.Join(dir, "nope")}, "-key-file: boltinformer: encryption configuration: open "},
		{"key file of another format", []string{"-key-file=" + oldKeys}, "-key-file: " + oldKeys + ": boltinformer: encryptionconfig: invalid EncryptionConfiguration"},
		{"identity for secrets", []string{"-key-file=" + identity}, "no aesgcm key for secrets: Secrets would be cached in plaintext"},
		{"identity first", []string{"-key-file=" + identityFirst}, "the first provider for secrets is identity: Secrets would be cached in plaintext"},
		{"kubeconfig", []string{"-key-file=" + keyFile, "-kubeconfig=" + filepath.Join(dir, "nope")}, "kubeconfig: "},
		{"key file readable by others", []string{"-key-file=" + readable}, "-key-file: boltinformer: encryption configuration: " + readable + ": mode 0644: group or others may read it"},
		{"api-listen not loopback", []string{"-key-file=" + keyFile, "-api-listen=0.0.0.0:6443"}, `-api-listen "0.0.0.0:6443": want a loopback address and port`},
		{"api-listen without the API", []string{"-key-file=" + keyFile, "-api=false", "-api-listen=127.0.0.1:0"}, "-api-listen: the local API is off (-api=false)"},
		{"api-socket not a socket", []string{"-key-file=" + keyFile, "-api-socket=" + keyFile}, "-api-socket: localapi: unsafe socket path: " + keyFile + " is a regular file, not a socket"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"-kubeconfig=" + kubeconfig, "-cache=" + cache}, tc.args...)
			code, _, stderr := runMain(t, args...)
			if code == 0 || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want an error containing %q", code, stderr, tc.want)
			}
			if _, err := os.Stat(cache); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the cache file was touched: %v", err)
			}
		})
	}
}

// TestRegressionNoDefaultKey: caching Secrets needs a key file; there is
// no default key (the agent sealed Secrets with a fixed key printed in its
// source).
func TestRegressionNoDefaultKey(t *testing.T) {
	dir := t.TempDir()
	kubeconfig, err := writeKubeconfig(dir, "https://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(dir, "agent.db")
	// -duration bounds an agent that starts anyway.
	code, _, stderr := runMain(t, "-kubeconfig="+kubeconfig, "-cache="+cache, "-duration=5s")
	if code != 2 || !strings.Contains(stderr, "-key-file: required to cache Secrets, which are encrypted at rest") {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	if _, err := os.Stat(cache); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the cache file was touched: %v", err)
	}
}

// podWithManagedFields is a Pod on node-0 written by server-side apply.
func podWithManagedFields() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "web", UID: types.UID("pod-uid"),
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply,
				APIVersion: "v1", FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(`{"f:spec":{"f:nodeName":{}}}`)}}},
		Spec: corev1.PodSpec{NodeName: "node-0", Containers: []corev1.Container{{Name: "c", Image: "nginx"}}},
	}
}

// TestRegressionAgentStripsManagedFields: the agent's main drops
// managedFields before they reach the file, under its TransformID, and
// keeps them with -keep-managed-fields (they were stored, and a file saved
// with them would be resumed by an agent that strips them). Its Secrets
// are sealed with the key file's key. -listen takes a host name (it took
// loopback IP addresses only).
func TestRegressionAgentStripsManagedFields(t *testing.T) {
	pods := crashtest.NewSource(func() runtime.Object { return &corev1.PodList{} })
	if _, err := pods.Create(podWithManagedFields()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(edgeHandler(pods))
	defer srv.Close()
	dir := t.TempDir()
	kubeconfig, err := writeKubeconfig(dir, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	keyFile, err := writeKeyFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name          string
		args          []string
		managedFields int
		transform     string
	}{
		{"default", nil, 0, stripManagedFieldsID},
		{"keep", []string{"-keep-managed-fields"}, 1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cache := filepath.Join(t.TempDir(), "agent.db")
			args := append([]string{"-kubeconfig=" + kubeconfig, "-cache=" + cache, "-node=node-0", "-key-file=" + keyFile,
				"-listen=localhost:0", "-report", "-once"}, tc.args...)
			if code, _, stderr := runMain(t, args...); code != 0 {
				t.Fatalf("exit %d\n%s", code, stderr)
			}
			db, err := store.Open(cache, &store.Options{ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			err = db.View(func(tx *store.Tx) error {
				st, err := tx.State("v1/pods")
				if err != nil {
					return err
				}
				if st.Transform != tc.transform {
					t.Errorf("transform %q, want %q", st.Transform, tc.transform)
				}
				r, err := tx.Get("v1/pods", "prod/web")
				if err != nil || r == nil {
					t.Fatalf("prod/web: %v %v", r, err)
				}
				c, err := codec.New(&corev1.Pod{}, nil)
				if err != nil {
					return err
				}
				obj, err := c.Decode("prod/web", r)
				if err != nil {
					return err
				}
				pod := obj.(*corev1.Pod)
				if len(pod.ManagedFields) != tc.managedFields || pod.Spec.NodeName != "node-0" {
					t.Errorf("stored pod has %d managedFields entries, want %d: %+v", len(pod.ManagedFields), tc.managedFields, pod.ObjectMeta)
				}
				return tx.ForEach("v1/secrets", func(key string, r *store.Record) error {
					if r.KeyID != testKeyID || bytes.Contains(r.Payload, []byte(secretPlaintext)) {
						t.Errorf("secret %s: key id %q, sealed %t", key, r.KeyID, !bytes.Contains(r.Payload, []byte(secretPlaintext)))
					}
					return nil
				})
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// copyFileMode copies from to to, with mode.
func copyFileMode(from, to string, mode os.FileMode) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	if err := os.WriteFile(to, b, mode); err != nil {
		return err
	}
	return os.Chmod(to, mode)
}
