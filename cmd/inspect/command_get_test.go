package main

import (
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/boltinformer/boltinformer/internal/testobj"
)

func TestGet(t *testing.T) {
	path := fixture(t)
	keys := keyFile(t, testKey)
	for _, tc := range []struct {
		name   string
		args   []string
		stderr string
	}{
		{"get-pod", []string{"v1/pods", "ns-0/pod-000000"}, ""},
		{"get-pod-wide", []string{"pods", "ns-0/pod-000000", "-o", "wide"}, ""},
		{"get-pod-no-headers", []string{"pods", "ns-0/pod-000000", "--no-headers"}, ""},
		{"get-pod-name", []string{"pods", "ns-0/pod-000000", "-o", "name"}, ""},
		{"get-pod-json", []string{"pods", "ns-0/pod-000000", "-o", "json"}, ""},
		{"get-pod-yaml", []string{"pods", "ns-0/pod-000000", "-o", "yaml"}, ""},
		{"get-widget", []string{"widgets", "ns-1/widget-1"}, ""},
		{"get-widget-json", []string{"widgets", "ns-1/widget-1", "-o", "json"}, ""},
		{"get-widget-name", []string{"widgets", "ns-1/widget-1", "-o", "name"}, ""},
		{"get-secret-yaml", []string{"secrets", "prod/db", "-o", "yaml", "--key-file", keys}, ""},
		{"get-gadget", []string{"gadgets", "edge/gadget-0"}, gadgetWarning},
		{"get-gadget-yaml", []string{"gadgets", "edge/gadget-0", "-o", "yaml"}, gadgetWarning},
		{"get-gadget-name", []string{"gadgets", "edge/gadget-0", "-o", "name"}, gadgetWarning},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr := mustRun(t, 0, append([]string{"get", path}, tc.args...)...)
			if stderr != tc.stderr {
				t.Errorf("stderr %q, want %q", stderr, tc.stderr)
			}
			golden(t, tc.name, stdout)
		})
	}
}

const gadgetWarning = "warning: object \"edge/gadget-0\" printed as its envelope: kube-protobuf payload of type example.com/v1, Kind=Gadget, which is not in client-go's scheme\n"

// The decoded object is the one the library stored, exactly.
func TestGetRoundTrip(t *testing.T) {
	path := fixture(t)
	want := testobj.Pod(4, 3, 2, "104")
	for _, format := range []string{"json", "yaml"} {
		stdout, _ := mustRun(t, 0, "get", path, "v1/pods", "ns-1/pod-000004", "-o", format)
		var got corev1.Pod
		if err := yaml.UnmarshalStrict([]byte(stdout), &got); err != nil {
			t.Fatal(err)
		}
		if got.Kind != "Pod" || got.APIVersion != "v1" {
			t.Errorf("%s: TypeMeta %+v", format, got.TypeMeta)
		}
		got.TypeMeta = want.TypeMeta
		if !apiequality.Semantic.DeepEqual(&got, want) {
			t.Errorf("%s: got %+v\nwant %+v", format, &got, want)
		}
	}
	stdout, _ := mustRun(t, 0, "get", path, "widgets", "ns-0/widget-2", "-o", "json")
	var u unstructured.Unstructured
	if err := json.Unmarshal([]byte(stdout), &u.Object); err != nil {
		t.Fatal(err)
	}
	if u.GetKind() != "Widget" || u.GetResourceVersion() != "202" || u.Object["spec"].(map[string]any)["size"] != float64(2) {
		t.Errorf("widget: %v", u.Object)
	}
	stdout, _ = mustRun(t, 0, "get", path, "secrets", "prod/api-token", "-o", "json", "--key-file", keyFile(t, testKey))
	var s corev1.Secret
	if err := json.Unmarshal([]byte(stdout), &s); err != nil || string(s.Data["password"]) != "hunter1" {
		t.Errorf("secret: %v %+v", err, s)
	}
}

func TestGetErrors(t *testing.T) {
	path := fixture(t)
	for _, tc := range []struct {
		name string
		path string
		args []string
		code int
		want string
	}{
		{"no key", path, []string{"secrets", "prod/db"}, exitFailure,
			`inspect: informer "v1/secrets": object "prod/db" is encrypted (key id "k1"): pass --key-file FILE (an EncryptionConfiguration with the keys of secrets)`},
		{"wrong key", path, []string{"secrets", "prod/db", "--key-file", keyFile(t, wrongKey)}, exitFailure,
			`inspect: informer "v1/secrets": object "prod/db" does not decrypt with key "k1" of --key-file: wrong key`},
		{"other key id", path, []string{"secrets", "prod/db", "--key-file", otherKeyFile(t)}, exitFailure,
			`inspect: informer "v1/secrets": object "prod/db" is encrypted with key id "k1", which --key-file does not have for secrets (it has k2)`},
		{"bad key file", path, []string{"secrets", "prod/db", "--key-file", path}, exitFailure,
			"inspect: --key-file: $FILE: encryptionconfig: invalid EncryptionConfiguration: "},
		{"no object", path, []string{"pods", "ns-0/nope"}, exitFailure, `inspect: informer "v1/pods" has no object "ns-0/nope"`},
		{"no informer", path, []string{"nodes", "n1"}, exitFailure,
			`inspect: no informer "nodes" (informers: dynamic/example.com/v1/widgets, example.com/v1/gadgets, v1/pods, v1/secrets)`},
		{"garbage record", withGarbageRecord(t), []string{"pods", "ns-0/garbage"}, exitCorrupt,
			`inspect: informer "v1/pods" key "ns-0/garbage": store: cache file is corrupt: record: malformed envelope`},
		{"truncated", truncated(t, 40000), []string{"pods", "ns-0/pod-000000"}, exitCorrupt,
			"inspect: $FILE is damaged and cannot be read: store: cache file is corrupt: $FILE: high-water mark"},
		{"short", truncated(t, 1000), []string{"pods", "ns-0/pod-000000"}, exitCorrupt,
			"inspect: $FILE is damaged and cannot be read: store: cache file is corrupt: $FILE: file is 1000 bytes"},
		{"bad output", path, []string{"pods", "ns-0/pod-000000", "-o", "jsonl"}, exitFailure,
			`inspect: unknown output format "jsonl" (want one of wide, name, json, yaml)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr := mustRun(t, tc.code, append([]string{"get", tc.path}, tc.args...)...)
			stderr = normalize(strings.ReplaceAll(stderr, tc.path, "$FILE"))
			if stdout != "" || !strings.HasPrefix(stderr, tc.want) {
				t.Errorf("stdout %q\nstderr %q\nwant   %q", stdout, stderr, tc.want)
			}
		})
	}
}

// A sound record whose payload does not decode prints its envelope and
// exits 2.
func TestGetBadPayload(t *testing.T) {
	stdout, stderr := mustRun(t, exitCorrupt, "get", withGarbagePayload(t), "pods", "ns-0/bad-payload", "-o", "json")
	var e envelope
	if err := json.Unmarshal([]byte(stdout), &e); err != nil {
		t.Fatal(err)
	}
	if e.Kind != envelopeKind || e.Key != "ns-0/bad-payload" || e.Bytes != 3 || !strings.Contains(e.Reason, "decode protobuf payload") {
		t.Errorf("envelope %+v", e)
	}
	if !strings.HasPrefix(stderr, `inspect: object "ns-0/bad-payload": payload does not decode: `) {
		t.Errorf("stderr %q", stderr)
	}
}
