package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/boltinformer/boltinformer/internal/codec"
	"github.com/boltinformer/boltinformer/store"
)

func TestCheck(t *testing.T) {
	path := fixture(t)
	keys := keyFile(t, testKey)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"check", nil},
		{"check-key", []string{"--key-file", keys}},
		{"check-no-headers", []string{"--no-headers"}},
		{"check-json", []string{"-o", "json", "--key-file", keys}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr := mustRun(t, 0, append([]string{"check", path}, tc.args...)...)
			if stderr != "" {
				t.Errorf("stderr: %s", stderr)
			}
			golden(t, tc.name, stdout)
		})
	}
	stdout, _ := mustRun(t, 0, "check", path, "-o", "yaml")
	var rep checkReport
	if err := yaml.Unmarshal([]byte(stdout), &rep); err != nil || !rep.OK || len(rep.Informers) != 4 || rep.Informers[3].Encrypted != 2 {
		t.Fatalf("%v: %+v", err, rep)
	}
}

func TestCheckProblems(t *testing.T) {
	pageSized(t)
	// A record whose envelope is fine but whose payload is another
	// object's (uid and resourceVersion disagree).
	swapped := damage(t, func(tx *bolt.Tx) error {
		objs := informerBolt(tx, "v1/pods", "objects")
		r, err := store.DecodeRecord("ns-0/pod-000000", objs.Get([]byte("ns-0/pod-000000")))
		if err != nil {
			return err
		}
		r.UID, r.ResourceVersion = "other-uid", "99"
		raw, err := store.EncodeRecord("ns-0/pod-000000", r)
		if err != nil {
			return err
		}
		return objs.Put([]byte("ns-0/pod-000000"), raw)
	})
	// A payload of another kind (an empty ConfigMap's) under a Pod's key,
	// with a valid checksum; and a record naming a type the informer's
	// state does not list.
	otherKind := damage(t, func(tx *bolt.Tx) error {
		objs := informerBolt(tx, "v1/pods", "objects")
		r, err := store.DecodeRecord("ns-0/pod-000000", objs.Get([]byte("ns-0/pod-000000")))
		if err != nil {
			return err
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "pod-000000", Namespace: "ns-0", UID: types.UID(r.UID), ResourceVersion: r.ResourceVersion}}
		c, err := codec.New(&corev1.ConfigMap{}, nil)
		if err != nil {
			return err
		}
		cr, err := c.Encode("ns-0/pod-000000", cm)
		if err != nil {
			return err
		}
		r.Payload = cr.Payload
		raw, err := store.EncodeRecord("ns-0/pod-000000", r)
		if err != nil {
			return err
		}
		if err := objs.Put([]byte("ns-0/pod-000000"), raw); err != nil {
			return err
		}
		r, err = store.DecodeRecord("ns-1/pod-000001", objs.Get([]byte("ns-1/pod-000001")))
		if err != nil {
			return err
		}
		r.Type = "/v1, Kind=Pod"
		if raw, err = store.EncodeRecord("ns-1/pod-000001", r); err != nil {
			return err
		}
		return objs.Put([]byte("ns-1/pod-000001"), raw)
	})
	for _, tc := range []struct {
		name string
		path string
		args []string
	}{
		{"check-other-kind", otherKind, nil},
		{"check-garbage-record", withGarbageRecord(t), nil},
		{"check-garbage-payload", withGarbagePayload(t), nil},
		{"check-swapped-payload", swapped, nil},
		{"check-missing-index-entry", damage(t, func(tx *bolt.Tx) error {
			return informerBolt(tx, "v1/pods", "indexes", "node").Delete([]byte("node-1\x00ns-1/pod-000001"))
		}), nil},
		{"check-dangling-index-entry", damage(t, func(tx *bolt.Tx) error {
			return informerBolt(tx, "dynamic/example.com/v1/widgets", "indexes", "namespace").Put([]byte("ns-0\x00ns-0/gone"), nil)
		}), nil},
		{"check-max-problems", withGarbageRecord(t), []string{"--max-problems", "1"}},
		{"check-truncated", truncated(t, 40000), nil},
		{"check-truncated-json", truncated(t, 40000), []string{"-o", "json"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr := mustRun(t, exitCorrupt, append([]string{"check", tc.path}, tc.args...)...)
			stdout = strings.ReplaceAll(stdout, tc.path, "$FILE")
			if want := "inspect: check found "; !strings.HasPrefix(stderr, want) || !strings.HasSuffix(stderr, " in "+tc.path+"\n") {
				t.Errorf("stderr %q", stderr)
			}
			golden(t, tc.name, stdout)
			if strings.HasSuffix(tc.name, "-json") {
				var rep checkReport
				if err := json.Unmarshal([]byte(stdout), &rep); err != nil || rep.OK || len(rep.Problems) == 0 {
					t.Errorf("%v: %+v", err, rep)
				}
			}
		})
	}
}

func TestCheckNotACacheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "other.db")
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("keys")); return err }); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	_, stderr := mustRun(t, exitFailure, "check", path)
	if !strings.HasPrefix(stderr, "inspect: "+path+" is not a boltinformer cache file: ") {
		t.Errorf("stderr %q", stderr)
	}
}

// A key that does not decrypt is the caller's error, not damage: check
// exits 1, as README.md's exit status table says and as get, list and
// export do for the same key, and still reports what it found. With damage
// as well, damage wins (2).
func TestRegressionCheckWrongKeyExitsOne(t *testing.T) {
	for _, tc := range []struct {
		name, keys string
	}{
		{"check-wrong-key", keyFile(t, wrongKey)},
		{"check-missing-key-id", otherKeyFile(t)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := fixture(t)
			stdout, stderr := mustRun(t, exitFailure, "check", path, "--key-file", tc.keys)
			golden(t, tc.name, stdout)
			want := "inspect: check: 2 object(s) in " + path + " do not decrypt with --key-file (a wrong or missing key); no problems found in the file\n"
			if stderr != want {
				t.Errorf("stderr %q, want %q", stderr, want)
			}
			// The other commands agree.
			for _, args := range [][]string{
				{"get", path, "secrets", "prod/db"},
				{"list", path, "secrets"},
				{"export", path, "secrets"},
			} {
				mustRun(t, exitFailure, append(args, "--key-file", tc.keys)...)
			}
			js, _ := mustRun(t, exitFailure, "check", path, "--key-file", tc.keys, "-o", "json")
			var rep struct {
				OK        bool  `json:"ok"`
				Problems  []any `json:"problems"`
				KeyErrors []any `json:"keyErrors"`
				Informers []struct {
					KeyErrors int `json:"keyErrors"`
				} `json:"informers"`
			}
			if err := json.Unmarshal([]byte(js), &rep); err != nil || rep.OK || len(rep.Problems) != 0 || len(rep.KeyErrors) != 2 || len(rep.Informers) != 4 || rep.Informers[3].KeyErrors != 2 {
				t.Errorf("%v: %+v", err, rep)
			}
		})
	}
	// Damage and a wrong key: damage decides the status.
	path := withGarbageRecord(t)
	_, stderr := mustRun(t, exitCorrupt, "check", path, "--key-file", keyFile(t, wrongKey))
	if want := "inspect: check found 2 problem(s) in " + path + ", and 2 object(s) that do not decrypt with --key-file\n"; stderr != want {
		t.Errorf("stderr %q, want %q", stderr, want)
	}
}
