package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/boltinformer/boltinformer/localapi"
)

// diff compares two files object by object, with diff(1)'s exit status.
func TestDiff(t *testing.T) {
	path, lat := fixture(t), later(t)
	keys := keyFile(t, testKey)
	for _, tc := range []struct {
		name string
		args []string
		code int
	}{
		{"diff", []string{path, lat}, exitDiffer},
		{"diff-key", []string{path, lat, "--informer", "secrets", "--key-file", keys}, exitDiffer},
		{"diff-brief", []string{path, lat, "--brief"}, exitDiffer},
		{"diff-brief-namespace", []string{path, lat, "-q", "-n", "ns-2", "--informer", "po"}, exitDiffer},
		{"diff-brief-selector", []string{path, lat, "-q", "-l", "tier=db"}, exitDiffer},
		{"diff-json", []string{path, lat, "-o", "json", "--informer", "pods"}, exitDiffer},
		{"diff-context", []string{path, lat, "--informer", "pods", "-n", "ns-1", "-U", "1"}, exitDiffer},
		{"diff-managed-fields", []string{path, lat, "--informer", "pods", "--field-selector", "metadata.name=pod-000000", "--show-managed-fields", "-U", "1"}, exitDiffer},
		{"diff-managed-fields-hidden", []string{path, lat, "--informer", "pods", "--field-selector", "metadata.name=pod-000000"}, exitDiffer},
		{"diff-same", []string{path, path}, exitSame},
		{"diff-same-informer", []string{path, lat, "--informer", "widgets"}, exitSame},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr := mustRun(t, tc.code, append([]string{"diff"}, tc.args...)...)
			if stderr != "" {
				t.Errorf("stderr %q", stderr)
			}
			golden(t, tc.name, strings.ReplaceAll(stdout, lat, "$DIR/later.db"))
		})
	}
	// The report as data.
	stdout, _ := mustRun(t, exitDiffer, "diff", path, lat, "-o", "json")
	var rep diffReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	changes := map[string]string{}
	for _, inf := range rep.Informers {
		for _, o := range inf.Objects {
			changes[inf.Name+" "+o.Key] = o.Change
		}
		if inf.Only != "" {
			changes[inf.Name] = "only in " + inf.Only
		}
	}
	for k, want := range map[string]string{
		"v1/pods ns-0/pod-000003": "deleted", "v1/pods ns-0/pod-000006": "added", "v1/pods ns-1/pod-000001": "changed",
		"v1/pods ns-2/pod-000002": "replaced", "v1/secrets prod/db": "changed", "v1/configmaps": "only in to", "v1/pods ns-0/pod-000000": "changed",
	} {
		if changes[k] != want {
			t.Errorf("%s: %q, want %q", k, changes[k], want)
		}
	}
	if rep.Same || len(changes) != 7 {
		t.Errorf("same %t, changes %v", rep.Same, changes)
	}
}

func TestDiffErrors(t *testing.T) {
	path := fixture(t)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{path}, exitTrouble, "inspect: give FILE2, --socket SOCKET or --kubeconfig KUBECONFIG to compare FILE with\n"},
		{[]string{path, path, "--socket", "s"}, exitTrouble, "inspect: give FILE2, --socket or --kubeconfig, not several\n"},
		{[]string{path, path + ".missing"}, exitTrouble, "inspect: " + path + ".missing: no such file\n"},
		{[]string{path, truncated(t, 40000)}, exitTrouble, "is damaged and cannot be read"},
		{[]string{path, withGarbagePayload(t)}, exitTrouble, `inspect: informer "v1/pods": `},
		{[]string{path, path, "--informer", "nope"}, exitTrouble, `inspect: no informer "nope"`},
		{[]string{path, path, "-o", "wide"}, exitTrouble, `inspect: unknown output format "wide"`},
		{[]string{path, path, "--key-file", keyFile(t, wrongKey)}, exitTrouble, `does not decrypt with key "k1" of --key-file: wrong key`},
		{[]string{path, "--socket", filepath.Join(t.TempDir(), "nope.sock"), "--informer", "pods"}, exitTrouble, `inspect: informer "v1/pods": list /v1, Resource=pods from unix:`},
	} {
		_, stderr := mustRun(t, tc.code, append([]string{"diff"}, tc.args...)...)
		if !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: stderr %q, want %q", tc.args, stderr, tc.want)
		}
	}
	// A file locked by a running agent: 3, as for every command.
	locked := copyFixture(t)
	lockFile(t, locked)
	mustRun(t, exitLocked, "diff", path, locked)
}

// diff against a live agent through its local API (here serving the later
// file, as inspect serve does): the same object changes as between the
// files.
func TestDiffLive(t *testing.T) {
	path, lat := fixture(t), later(t)
	a := &app{now: func() time.Time { return testNow }, timeout: time.Second}
	snaps, err := a.snapshots(&cobra.Command{}, lat, nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := localapi.NewStatic(snaps, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	sock := filepath.Join(t.TempDir(), "api.sock")
	l, err := localapi.ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- h.Serve(ctx, l) }()
	defer func() {
		cancel()
		<-served
	}()
	live, _ := mustRun(t, exitDiffer, "diff", path, "--socket", sock, "--informer", "pods", "--informer", "widgets", "-q")
	golden(t, "diff-live", strings.ReplaceAll(live, sock, "$SOCKET"))
	files, _ := mustRun(t, exitDiffer, "diff", path, lat, "--informer", "pods", "--informer", "widgets", "-q")
	// The object rows are the same; the files' states differ in more
	// than the resourceVersion a list has.
	rows := func(s string) []string {
		var out []string
		for _, l := range strings.Split(s, "\n") {
			if f := strings.Fields(l); len(f) > 2 && f[1] != "-" && f[0] != "INFORMER" {
				out = append(out, strings.Join(f, " "))
			}
		}
		return out
	}
	if a, b := strings.Join(rows(live), "\n"), strings.Join(rows(files), "\n"); a != b || a == "" {
		t.Errorf("live:\n%s\nfiles:\n%s", a, b)
	}
	same, _ := mustRun(t, exitSame, "diff", lat, "--socket", sock, "--informer", "pods")
	if same != "" {
		t.Errorf("a file and its own snapshot differ:\n%s", same)
	}
	// A resource the live API does not serve (Secrets, without --secrets)
	// is trouble for that informer.
	_, stderr := mustRun(t, exitTrouble, "diff", path, "--socket", sock, "--informer", "secrets", "--key-file", keyFile(t, testKey))
	if !strings.Contains(stderr, `inspect: informer "v1/secrets": list /v1, Resource=secrets from unix:`) {
		t.Errorf("stderr %q", stderr)
	}
	_ = os.Remove(sock)
}

// diff --kubeconfig: the local API over TLS with its bearer token, as
// inspect serve and an agent serve it (the kubeconfig the local API
// writes), with the selectors applied to both sides.
func TestDiffLiveKubeconfig(t *testing.T) {
	path, lat := fixture(t), later(t)
	a := &app{now: func() time.Time { return testNow }, timeout: time.Second}
	snaps, err := a.snapshots(&cobra.Command{}, lat, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	token, err := localapi.LoadOrCreateToken(filepath.Join(dir, "token"))
	if err != nil {
		t.Fatal(err)
	}
	cert, err := localapi.LoadOrCreateCert(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	h, err := localapi.NewStatic(snaps, &localapi.Options{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	l, err := localapi.ListenLocal("127.0.0.1:0", cert)
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := localapi.WriteKubeconfig(kubeconfig, l.Addr().String(), token, cert); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- h.Serve(ctx, l) }()
	defer func() {
		cancel()
		<-served
	}()
	out, _ := mustRun(t, exitDiffer, "diff", path, "--kubeconfig", kubeconfig, "--informer", "pods", "-l", "tier!=web", "--field-selector", "spec.nodeName=node-1", "-q")
	golden(t, "diff-kubeconfig", out)
	// The same object rows as between the files.
	files, _ := mustRun(t, exitDiffer, "diff", path, lat, "--informer", "pods", "-l", "tier!=web", "--field-selector", "spec.nodeName=node-1", "-q")
	if !strings.Contains(files, strings.SplitN(out, "\n", 3)[2]) {
		t.Errorf("live:\n%s\nfiles:\n%s", out, files)
	}
	// A token the local API does not know: trouble, said.
	bad := filepath.Join(dir, "bad-kubeconfig")
	if err := localapi.WriteKubeconfig(bad, l.Addr().String(), "not-the-token", cert); err != nil {
		t.Fatal(err)
	}
	_, stderr := mustRun(t, exitTrouble, "diff", path, "--kubeconfig", bad, "--informer", "pods")
	if !strings.Contains(stderr, `inspect: informer "v1/pods": list /v1, Resource=pods from https://`) {
		t.Errorf("stderr %q", stderr)
	}
}
