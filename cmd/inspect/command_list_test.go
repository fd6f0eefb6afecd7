package main

import (
	"fmt"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/boltinformer/boltinformer/internal/testobj"
)

func TestList(t *testing.T) {
	path := fixture(t)
	keys := keyFile(t, testKey)
	for _, tc := range []struct {
		name   string
		args   []string
		stderr string
	}{
		{"list-pods", []string{"v1/pods"}, ""},
		{"list-pods-wide", []string{"pods", "-o", "wide"}, ""},
		{"list-pods-no-headers", []string{"pods", "--no-headers"}, ""},
		{"list-pods-name", []string{"pods", "-o", "name"}, ""},
		{"list-pods-json", []string{"pods", "-n", "ns-1", "-o", "json"}, ""},
		{"list-pods-yaml", []string{"pods", "-l", "app=app-2", "-o", "yaml"}, ""},
		{"list-pods-namespace", []string{"pods", "-n", "ns-2"}, ""},
		{"list-pods-selector", []string{"pods", "-l", "tier in (web,cache),app!=app-5"}, ""},
		{"list-pods-index", []string{"pods", "--index", "node=node-1", "-o", "name"}, ""},
		{"list-pods-indexes", []string{"pods", "--index", "node=node-1", "--index", "namespace=ns-0", "-o", "name"}, ""},
		{"list-pods-index-selector", []string{"pods", "--index", "node=node-0", "-l", "tier=db", "-n", "ns-1"}, ""},
		{"list-widgets", []string{"widgets"}, ""},
		{"list-widgets-yaml", []string{"widgets", "-l", "color=red", "-o", "yaml"}, ""},
		{"list-secrets", []string{"secrets", "--key-file", keys, "-o", "wide"}, ""},
		{"list-gadgets", []string{"gadgets"}, gadgetsWarning},
		{"list-gadgets-json", []string{"gadgets", "-o", "json"}, gadgetsWarning},
		{"list-gadgets-name", []string{"gadgets", "-o", "name"}, gadgetsWarning},
		{"list-empty-json", []string{"pods", "-n", "nope", "-o", "json"}, ""},
		{"list-empty-yaml", []string{"pods", "--index", "node=nope", "-o", "yaml"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr := mustRun(t, 0, append([]string{"list", path}, tc.args...)...)
			if stderr != tc.stderr {
				t.Errorf("stderr %q, want %q", stderr, tc.stderr)
			}
			golden(t, tc.name, stdout)
		})
	}
}

const gadgetsWarning = "warning: 2 object(s) printed as envelopes: their type is not one this inspect knows\n"

func TestListEmptyTable(t *testing.T) {
	path := fixture(t)
	for _, args := range [][]string{{"-n", "ns-9"}, {"-l", "tier=none"}} {
		stdout, stderr := mustRun(t, 0, append([]string{"list", path, "pods"}, args...)...)
		want := "No objects found.\n"
		if args[0] == "-n" {
			want = "No objects found in namespace ns-9.\n"
		}
		if stdout != "" || stderr != want {
			t.Errorf("%v: stdout %q stderr %q", args, stdout, stderr)
		}
	}
	// -l needs labels: envelopes are left out, and said so.
	stdout, stderr := mustRun(t, 0, "list", path, "gadgets", "-l", "a=b", "-o", "name")
	if stdout != "" || stderr != "warning: 2 object(s) left out: -l needs their labels, and they do not decode\n" {
		t.Errorf("stdout %q stderr %q", stdout, stderr)
	}
}

// The List parses back into the objects the library stored.
func TestListRoundTrip(t *testing.T) {
	path := fixture(t)
	for _, format := range []string{"json", "yaml"} {
		stdout, _ := mustRun(t, 0, "list", path, "pods", "-o", format)
		var list corev1.PodList
		if err := yaml.UnmarshalStrict([]byte(stdout), &list); err != nil {
			t.Fatal(err)
		}
		if list.Kind != "List" || list.APIVersion != "v1" || list.ResourceVersion != "120" || len(list.Items) != 6 {
			t.Fatalf("%s: %s %s rv %q, %d items", format, list.APIVersion, list.Kind, list.ResourceVersion, len(list.Items))
		}
		for _, got := range list.Items {
			var i int
			if _, err := fmt.Sscanf(got.Name, "pod-%06d", &i); err != nil {
				t.Fatal(err)
			}
			want := testobj.Pod(i, 3, 2, got.ResourceVersion)
			got.TypeMeta = want.TypeMeta
			if !apiequality.Semantic.DeepEqual(&got, want) {
				t.Errorf("%s: %s differs", format, got.Name)
			}
		}
	}
	stdout, _ := mustRun(t, 0, "list", path, "widgets", "-o", "json")
	var list unstructured.UnstructuredList
	if err := list.UnmarshalJSON([]byte(stdout)); err != nil || len(list.Items) != 3 {
		t.Fatalf("%v: %d items", err, len(list.Items))
	}
}

func TestListErrors(t *testing.T) {
	path := fixture(t)
	for _, tc := range []struct {
		path string
		args []string
		code int
		want string
	}{
		{path, []string{"secrets"}, exitFailure, `inspect: informer "v1/secrets": object "prod/api-token" is encrypted (key id "k1"): pass --key-file`},
		{path, []string{"secrets", "-o", "json", "--key-file", keyFile(t, wrongKey)}, exitFailure, `inspect: informer "v1/secrets": object "prod/api-token" does not decrypt`},
		{path, []string{"pods", "--index", "phase=Running"}, exitFailure, `inspect: informer "v1/pods" has no index "phase" (indexes: namespace, node)`},
		{path, []string{"pods", "--index", "node"}, exitFailure, `inspect: --index "node": want NAME=VALUE`},
		{path, []string{"pods", "-l", "a=(b"}, exitFailure, `inspect: -l "a=(b": `},
		{path, []string{"v1"}, exitFailure, `inspect: no informer "v1"`},
		{withGarbageRecord(t), []string{"pods", "-o", "name"}, exitCorrupt, `inspect: informer "v1/pods" object "ns-0/garbage": store: cache file is corrupt: record: malformed envelope`},
	} {
		stdout, stderr := mustRun(t, tc.code, append([]string{"list", tc.path}, tc.args...)...)
		if stdout != "" || !strings.HasPrefix(stderr, tc.want) {
			t.Errorf("%v: stdout %q\nstderr %q\nwant   %q", tc.args, stdout, stderr, tc.want)
		}
	}
	// An index entry without its object: listed without it, and said so.
	dangling := damage(t, func(tx *bolt.Tx) error {
		return informerBolt(tx, "v1/pods", "indexes", "node").Put([]byte("node-1\x00ns-0/gone"), nil)
	})
	stdout, stderr := mustRun(t, 0, "list", dangling, "pods", "--index", "node=node-1", "-o", "name")
	if stdout != "pod/pod-000003\npod/pod-000001\npod/pod-000005\n" ||
		stderr != "warning: 1 index entries point to missing objects; run inspect check "+dangling+"\n" {
		t.Errorf("stdout %q\nstderr %q", stdout, stderr)
	}
	// A payload that does not decode: listed as its envelope, exit 2.
	bad := withGarbagePayload(t)
	stdout, stderr = mustRun(t, exitCorrupt, "list", bad, "pods", "-n", "ns-0", "-o", "name")
	if stdout != "record/bad-payload\npod/pod-000000\npod/pod-000003\n" ||
		!strings.Contains(stderr, `warning: object "ns-0/bad-payload": payload does not decode: `) ||
		!strings.HasSuffix(stderr, "inspect: 1 object(s) have payloads that do not decode; run inspect check "+bad+"\n") {
		t.Errorf("stdout %q\nstderr %q", stdout, stderr)
	}
}
