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
		{"list-empty-json", []string{"pods", "-n", "nope", "-o", "json"}, "No resources found in nope namespace.\n"},
		{"list-empty-yaml", []string{"pods", "--index", "node=nope", "-o", "yaml"}, "No resources found.\n"},
		{"list-pods-all-namespaces", []string{"po", "-A", "-n", "ns-0"}, ""},
		{"list-pods-field-selector", []string{"pods", "--field-selector", "spec.nodeName=node-1,metadata.namespace!=ns-1"}, ""},
		{"list-pods-field-selector-status", []string{"pods", "--field-selector", "status.phase=Running,status.podIP=10.244.0.4", "-o", "name"}, ""},
		{"list-pods-sort-by", []string{"pods", "--sort-by", ".status.containerStatuses[0].restartCount"}, ""},
		{"list-pods-sort-by-node", []string{"pods", "--sort-by", "{.spec.nodeName}", "-o", "wide"}, ""},
		{"list-pods-sort-by-creation", []string{"pods", "--sort-by", ".metadata.creationTimestamp", "-o", "name"}, ""},
		{"list-pods-show-labels", []string{"pods", "-n", "ns-1", "--show-labels"}, ""},
		{"list-pods-label-columns", []string{"pods", "-L", "tier,app", "--sort-by", ".metadata.labels.tier"}, ""},
		{"list-pods-jsonpath", []string{"pods", "-o", `jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name}{"\t"}{.spec.nodeName}{"\n"}{end}`}, ""},
		{"list-pods-custom-columns", []string{"pods", "-o", "custom-columns=NAMESPACE:.metadata.namespace,NAME:.metadata.name,NODE:.spec.nodeName,RESTARTS:.status.containerStatuses[*].restartCount"}, ""},
		{"list-pods-go-template", []string{"pods", "-n", "ns-2", "-o", `go-template={{range .items}}{{.metadata.name}} {{.status.podIP}}{{"\n"}}{{end}}`}, ""},
		{"list-widgets-field-selector", []string{"widgets", "--field-selector", "spec.enabled=true,spec.size!=2"}, ""},
		{"list-secrets-no-key", []string{"secrets"}, secretsWarning},
		{"list-secrets-no-key-field-selector", []string{"secrets", "--field-selector", "metadata.name=db", "-o", "name"}, secretWarning},
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
		want := "No resources found.\n"
		if args[0] == "-n" {
			want = "No resources found in ns-9 namespace.\n"
		}
		if stdout != "" || stderr != want {
			t.Errorf("%v: stdout %q stderr %q", args, stdout, stderr)
		}
	}
	// -l needs labels: envelopes are left out, and said so; so does a
	// field selector of fields that envelopes do not have.
	for _, sel := range [][]string{{"-l", "a=b"}, {"--field-selector", "spec.x=y"}} {
		stdout, stderr := mustRun(t, 0, append([]string{"list", path, "gadgets", "-o", "name"}, sel...)...)
		if stdout != "" || stderr != "warning: 2 object(s) left out: the selector needs fields they do not have, as they do not decode\nNo resources found.\n" {
			t.Errorf("%v: stdout %q stderr %q", sel, stdout, stderr)
		}
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
	// A wrong key: the envelopes, then the error.
	stdout, stderr := mustRun(t, exitFailure, "list", path, "secrets", "-o", "name", "--key-file", keyFile(t, wrongKey))
	if stdout != "secret/api-token\nsecret/db\n" ||
		!strings.HasPrefix(stderr, `inspect: informer "v1/secrets": object "prod/api-token" does not decrypt with key "k1" of --key-file: wrong key`+"\n"+
			`inspect: informer "v1/secrets": object "prod/db" does not decrypt`) {
		t.Errorf("wrong key: stdout %q\nstderr %q", stdout, stderr)
	}
	// An index entry without its object: listed without it, and said so.
	dangling := damage(t, func(tx *bolt.Tx) error {
		return informerBolt(tx, "v1/pods", "indexes", "node").Put([]byte("node-1\x00ns-0/gone"), nil)
	})
	stdout, stderr = mustRun(t, 0, "list", dangling, "pods", "--index", "node=node-1", "-o", "name")
	if stdout != "pod/pod-000003\npod/pod-000001\npod/pod-000005\n" ||
		stderr != "warning: 1 index entries point to missing objects; run inspect check "+dangling+"\n" {
		t.Errorf("stdout %q\nstderr %q", stdout, stderr)
	}
	// A payload that does not decode: listed as its envelope, exit 2.
	bad := withGarbagePayload(t)
	stdout, stderr = mustRun(t, exitCorrupt, "list", bad, "pods", "-n", "ns-0", "-o", "name")
	if stdout != "pod/bad-payload\npod/pod-000000\npod/pod-000003\n" ||
		!strings.Contains(stderr, `warning: object "ns-0/bad-payload": payload does not decode: `) ||
		!strings.HasSuffix(stderr, "inspect: 1 object(s) have payloads that do not decode; run inspect check "+bad+"\n") {
		t.Errorf("stdout %q\nstderr %q", stdout, stderr)
	}
}

// -o name printed an envelope as what inspect printed, the envelope
// (record.inspect.boltinformer.io/db), not as the object it holds: the
// names of Secrets listed without their key were of no use to kubectl.
// They are the objects' now, as kubectl names them.
func TestRegressionEnvelopeNamesAreTheObjects(t *testing.T) {
	path := fixture(t)
	for _, tc := range []struct {
		args         []string
		stdout, warn string
	}{
		{[]string{"secrets"}, "secret/api-token\nsecret/db\n", secretsWarning},
		{[]string{"gadgets", "edge/gadget-0"}, "gadget.example.com/gadget-0\n", "warning: object \"edge/gadget-0\" printed as its envelope: "},
	} {
		stdout, stderr := mustRun(t, 0, append(append([]string{"get", path}, tc.args...), "-o", "name")...)
		if stdout != tc.stdout || !strings.HasPrefix(stderr, tc.warn) {
			t.Errorf("get %v -o name: stdout %q, stderr %q; want %q, a warning", tc.args, stdout, stderr, tc.stdout)
		}
	}
}
