package main

import (
	"encoding/json"
	"os"
	"path/filepath"
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
	dir := t.TempDir()
	for name, content := range map[string]string{
		"columns.txt":  "NAME          NODE           IP\nmetadata.name spec.nodeName  {.status.podIP}\n",
		"pod.tmpl":     "{{.metadata.name}} runs {{len .spec.containers}} container(s) on {{.spec.nodeName}}\n",
		"ips.jsonpath": `{range .items[*]}{.metadata.name}{"\t"}{.status.podIP}{"\n"}{end}`,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name   string
		args   []string
		stderr string
	}{
		{"get-pod", []string{"v1/pods", "ns-0/pod-000000"}, ""},
		{"get-pod-namespace", []string{"po", "-n", "ns-0", "pod-000000"}, ""},
		{"get-pods-named", []string{"pod", "-n", "ns-0", "pod-000000", "pod-000003", "-o", "wide"}, ""},
		{"get-pods-named-namespaces", []string{"Pod", "ns-0/pod-000000", "ns-1/pod-000001"}, ""},
		{"get-pods-named-json", []string{"pods", "-n", "ns-0", "pod-000000", "pod-000003", "-o", "json"}, ""},
		{"get-pod-wide", []string{"pods", "ns-0/pod-000000", "-o", "wide"}, ""},
		{"get-pod-no-headers", []string{"pods", "ns-0/pod-000000", "--no-headers"}, ""},
		{"get-pod-name", []string{"pods", "ns-0/pod-000000", "-o", "name"}, ""},
		{"get-pod-json", []string{"pods", "ns-0/pod-000000", "-o", "json"}, ""},
		{"get-pod-yaml", []string{"pods", "ns-0/pod-000000", "-o", "yaml"}, ""},
		{"get-pod-yaml-managed-fields", []string{"pods", "ns-0/pod-000000", "-o", "yaml", "--show-managed-fields"}, ""},
		{"get-pod-show-labels", []string{"pods", "-n", "ns-0", "pod-000000", "--show-labels"}, ""},
		{"get-pod-label-columns", []string{"pods", "-n", "ns-0", "pod-000000", "-L", "app,app.kubernetes.io/component", "-L", "tier"}, ""},
		{"get-pod-jsonpath", []string{"pods", "-n", "ns-0", "pod-000000", "-o", "jsonpath={.status.podIP}"}, ""},
		{"get-pod-jsonpath-as-json", []string{"pods", "-n", "ns-0", "pod-000000", "-o", "jsonpath-as-json={.spec.containers[*].ports}"}, ""},
		{"get-pod-go-template", []string{"pods", "-n", "ns-0", "pod-000000", "-o", "go-template={{.metadata.name}}: {{.status.phase}}{{\"\\n\"}}"}, ""},
		{"get-pod-go-template-file", []string{"pods", "-n", "ns-0", "pod-000000", "-o", "go-template-file=" + filepath.Join(dir, "pod.tmpl")}, ""},
		{"get-pod-custom-columns", []string{"pods", "-n", "ns-0", "pod-000000", "-o", "custom-columns=NAME:.metadata.name,UID:metadata.uid,PORTS:{.spec.containers[*].ports[*].containerPort}"}, ""},
		{"get-pod-custom-columns-file", []string{"pods", "-n", "ns-0", "pod-000000", "-o", "custom-columns-file=" + filepath.Join(dir, "columns.txt")}, ""},
		{"get-pods-jsonpath-file", []string{"pods", "-o", "jsonpath-file=" + filepath.Join(dir, "ips.jsonpath")}, ""},
		{"get-widget", []string{"widgets", "ns-1/widget-1"}, ""},
		{"get-widget-json", []string{"widgets.example.com", "ns-1/widget-1", "-o", "json"}, ""},
		{"get-widget-name", []string{"widget", "-n", "ns-1", "widget-1", "-o", "name"}, ""},
		{"get-secret-yaml", []string{"secrets", "prod/db", "-o", "yaml", "--key-file", keys}, ""},
		{"get-secret-no-key", []string{"secret", "-n", "prod", "db"}, secretWarning},
		{"get-secret-no-key-columns", []string{"secret", "-n", "prod", "db", "-o", "custom-columns=NAME:.metadata.name,KIND:.objectKind,KEY-ID:.keyID,BYTES:.payloadBytes"}, secretWarning},
		{"get-secrets-no-key", []string{"secrets"}, secretsWarning},
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

const (
	secretWarning  = "warning: object \"prod/db\" printed as its envelope: informer \"v1/secrets\": object \"prod/db\" is encrypted (key id \"k1\"): pass --key-file FILE (an EncryptionConfiguration with the keys of secrets)\n"
	secretsWarning = "warning: 2 object(s) printed as envelopes: they are encrypted; pass --key-file FILE (an EncryptionConfiguration) to decode them\n"
)

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
		name   string
		path   string
		args   []string
		code   int
		stdout bool // the objects found are printed before the error
		want   string
	}{
		{"wrong key", path, []string{"secrets", "prod/db", "--key-file", keyFile(t, wrongKey)}, exitFailure, true,
			`inspect: informer "v1/secrets": object "prod/db" does not decrypt with key "k1" of --key-file: wrong key`},
		{"other key id", path, []string{"secrets", "prod/db", "--key-file", otherKeyFile(t)}, exitFailure, true,
			`inspect: informer "v1/secrets": object "prod/db" is encrypted with key id "k1", which --key-file does not have for secrets (it has k2)`},
		{"no keys for the resource", path, []string{"secrets", "prod/db", "--key-file", podKeyFile(t)}, exitFailure, true,
			`inspect: informer "v1/secrets": object "prod/db" is encrypted (key id "k1"), and --key-file has no keys for secrets (it has keys for pods)`},
		{"bad key file", path, []string{"secrets", "prod/db", "--key-file", path}, exitFailure, false,
			"inspect: --key-file: $FILE: encryptionconfig: invalid EncryptionConfiguration: "},
		{"no object", path, []string{"pods", "ns-0/nope"}, exitFailure, false, `inspect: informer "v1/pods" has no object "ns-0/nope"`},
		{"no object in namespace", path, []string{"pods", "-n", "ns-1", "pod-000000"}, exitFailure, false, `inspect: informer "v1/pods" has no object "ns-1/pod-000000"` + "\n"},
		{"namespaced name", path, []string{"pods", "pod-000000"}, exitFailure, false,
			`inspect: informer "v1/pods" has no object "pod-000000" (its objects are namespaced: give -n NAMESPACE or NAMESPACE/NAME; "pod-000000" is in namespace ns-0)`},
		{"some missing", path, []string{"pods", "-n", "ns-0", "pod-000000", "nope", "pod-000003", "gone"}, exitFailure, true,
			"inspect: informer \"v1/pods\" has no object \"ns-0/nope\"\ninspect: informer \"v1/pods\" has no object \"ns-0/gone\"\n"},
		{"name and selector", path, []string{"pods", "-n", "ns-0", "pod-000000", "-l", "app=x"}, exitFailure, false,
			"inspect: a NAME cannot be given with a selector (-l, --field-selector, --index)"},
		{"no informer", path, []string{"nodes", "n1"}, exitFailure, false,
			`inspect: no informer "nodes" (informers: dynamic/example.com/v1/widgets, example.com/v1/gadgets, v1/pods, v1/secrets)`},
		{"garbage record", withGarbageRecord(t), []string{"pods", "ns-0/garbage"}, exitCorrupt, false,
			`inspect: informer "v1/pods" key "ns-0/garbage": store: cache file is corrupt: record: malformed envelope`},
		{"truncated", truncated(t, 40000), []string{"pods", "ns-0/pod-000000"}, exitCorrupt, false,
			"inspect: $FILE is damaged and cannot be read: store: cache file is corrupt: $FILE: high-water mark"},
		{"short", truncated(t, 1000), []string{"pods", "ns-0/pod-000000"}, exitCorrupt, false,
			"inspect: $FILE is damaged and cannot be read: store: cache file is corrupt: $FILE: file is 1000 bytes"},
		{"bad output", path, []string{"pods", "ns-0/pod-000000", "-o", "jsonl"}, exitFailure, false,
			`inspect: unknown output format "jsonl" (want one of wide, name, json, yaml, jsonpath=..., `},
		{"no template", path, []string{"pods", "-o", "jsonpath"}, exitFailure, false,
			"inspect: -o jsonpath: template format specified but no template given (-o jsonpath=TEMPLATE)"},
		{"bad jsonpath", path, []string{"pods", "-o", "jsonpath={.metadata.name"}, exitFailure, false,
			"inspect: -o jsonpath: error parsing jsonpath {.metadata.name: unclosed action"},
		{"bad template", path, []string{"pods", "-o", "go-template={{.metadata.name"}, exitFailure, false,
			"inspect: -o go-template: error parsing template {{.metadata.name: template: output:1: unclosed action"},
		{"bad columns", path, []string{"pods", "-o", "custom-columns=NAME"}, exitFailure, false,
			`inspect: -o custom-columns=NAME: want HEADER:JSONPATH[,HEADER:JSONPATH...], got "NAME"`},
		{"missing template file", path, []string{"pods", "-o", "go-template-file=/nonexistent"}, exitFailure, false,
			"inspect: -o go-template-file: open /nonexistent: no such file or directory"},
		{"missing key in template", path, []string{"pods", "-n", "ns-0", "pod-000000", "-o", "jsonpath={.nope}", "--allow-missing-template-keys=false"}, exitFailure, false,
			"inspect: error executing jsonpath \"{.nope}\": Error executing template: nope is not found.\n"},
		{"bad field selector", path, []string{"pods", "--field-selector", "a"}, exitFailure, false, `inspect: --field-selector "a": `},
		{"bad sort-by", path, []string{"pods", "--sort-by", "{.metadata"}, exitFailure, false, `inspect: --sort-by "{.metadata": `},
		{"several values to sort by", path, []string{"pods", "--sort-by", ".spec.containers[*].ports[*].name"}, exitFailure, false, "inspect: --sort-by \".spec.containers[*].ports[*].name\": object \"ns-0/pod-000000\" has several values there"},
		{"ambiguous informer", withTwoPodInformers(t), []string{"po"}, exitFailure, false, `inspect: informer "po" is ambiguous: v1/pods, v1/pods-of-node-1`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr := mustRun(t, tc.code, append([]string{"get", tc.path}, tc.args...)...)
			stderr = normalize(strings.ReplaceAll(stderr, tc.path, "$FILE"))
			if (stdout != "") != tc.stdout || !strings.HasPrefix(stderr, tc.want) {
				t.Errorf("stdout %q\nstderr %q\nwant   %q", stdout, stderr, tc.want)
			}
		})
	}
}

// A sound record whose payload does not decode prints its envelope and
// exits 2.
func TestGetBadPayload(t *testing.T) {
	path := withGarbagePayload(t)
	stdout, stderr := mustRun(t, exitCorrupt, "get", path, "pods", "ns-0/bad-payload", "-o", "json")
	var e envelope
	if err := json.Unmarshal([]byte(stdout), &e); err != nil {
		t.Fatal(err)
	}
	if e.Kind != envelopeKind || e.Key != "ns-0/bad-payload" || e.Bytes != 3 || !strings.Contains(e.Reason, "decode protobuf payload") {
		t.Errorf("envelope %+v", e)
	}
	if !strings.HasPrefix(stderr, `warning: object "ns-0/bad-payload": payload does not decode: `) ||
		!strings.HasSuffix(stderr, "inspect: 1 object(s) have payloads that do not decode; run inspect check "+path+"\n") {
		t.Errorf("stderr %q", stderr)
	}
}
