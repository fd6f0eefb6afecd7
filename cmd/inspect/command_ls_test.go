package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
	"sigs.k8s.io/yaml"

	"github.com/boltinformer/boltinformer/store"
)

func TestLs(t *testing.T) {
	pageSized(t)
	path := fixture(t)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"ls", nil},
		{"ls-wide", []string{"-o", "wide"}},
		{"ls-no-headers", []string{"--no-headers"}},
		{"ls-name", []string{"-o", "name"}},
		{"ls-json", []string{"-o", "json"}},
		{"ls-yaml", []string{"-o", "yaml"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr := mustRun(t, 0, append([]string{"ls", path}, tc.args...)...)
			if stderr != "" {
				t.Errorf("stderr: %s", stderr)
			}
			golden(t, tc.name, stdout)
		})
	}
	// The structured outputs parse and agree.
	js, _ := mustRun(t, 0, "ls", path, "-o", "json")
	ys, _ := mustRun(t, 0, "ls", path, "-o", "yaml")
	var fromJSON, fromYAML fileInfo
	if err := json.Unmarshal([]byte(js), &fromJSON); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal([]byte(ys), &fromYAML); err != nil {
		t.Fatal(err)
	}
	if len(fromJSON.Informers) != 4 || fromJSON.Informers[2].Name != "v1/pods" || fromJSON.Informers[2].Objects != 6 ||
		fromJSON.Informers[2].ResourceVersion != "120" || fromJSON.Informers[2].Kind != "/v1, Kind=Pod" {
		t.Fatalf("ls -o json: %+v", fromJSON.Informers)
	}
	if b1, _ := json.Marshal(fromJSON); true {
		if b2, _ := json.Marshal(fromYAML); string(b1) != string(b2) {
			t.Fatalf("json and yaml differ:\n%s\n%s", b1, b2)
		}
	}
}

func TestLsDamagedState(t *testing.T) {
	path := damage(t, func(tx *bolt.Tx) error {
		return informerBolt(tx, "v1/secrets").Put([]byte("state"), []byte{0xc1})
	})
	stdout, stderr := mustRun(t, exitCorrupt, "ls", path, "-o", "name")
	if stdout != "dynamic/example.com/v1/widgets\nexample.com/v1/gadgets\nv1/pods\nv1/secrets\n" {
		t.Errorf("stdout: %q", stdout)
	}
	if !strings.Contains(stderr, `warning: informer "v1/secrets": store: cache file is corrupt: state record`) ||
		!strings.Contains(stderr, "inspect: 1 informer(s) have a damaged state record; run inspect check") {
		t.Errorf("stderr: %s", stderr)
	}
}

func TestLsEmptyFile(t *testing.T) {
	stdout, _ := mustRun(t, 0, "ls", emptyFile(t), "-o", "json")
	var fi fileInfo
	if err := json.Unmarshal([]byte(stdout), &fi); err != nil || fi.Informers == nil || len(fi.Informers) != 0 {
		t.Fatalf("%v: %s", err, stdout)
	}
	if stdout, _ := mustRun(t, 0, "ls", emptyFile(t)); stdout != "NAME   OBJECTS   RESOURCEVERSION   LAST-SYNC   CLUSTER   INDEXES   SIZE\n" {
		t.Fatalf("%q", stdout)
	}
}

// An informer bucket without a state record (and a name that makes "pods"
// ambiguous) is listed with what there is.
func TestLsNoState(t *testing.T) {
	path := damage(t, func(tx *bolt.Tx) error {
		_, err := tx.Bucket([]byte("informers")).CreateBucket([]byte("other/pods"))
		return err
	})
	stdout, _ := mustRun(t, 0, "ls", path, "--no-headers")
	if !strings.Contains(stdout, "\nother/pods                       0     <none>   <never>   <none>      <none>           16 B\n") {
		t.Errorf("stdout:\n%s", stdout)
	}
	if _, stderr := mustRun(t, exitFailure, "list", path, "pods"); stderr != "inspect: informer \"pods\" is ambiguous: other/pods, v1/pods\n" {
		t.Errorf("stderr %q", stderr)
	}
	if stdout, _ := mustRun(t, 0, "list", path, "v1/pods", "-o", "name"); strings.Count(stdout, "\n") != 6 {
		t.Errorf("exact name: %q", stdout)
	}
}

// A file of a newer format version is refused, and left alone.
func TestLsNewerFormat(t *testing.T) {
	path := damage(t, func(tx *bolt.Tx) error {
		m := tx.Bucket([]byte("meta"))
		h := append([]byte(nil), m.Get([]byte("header"))...)
		h[7] = 9 // version 9, big-endian at bytes 4..8
		return m.Put([]byte("header"), h)
	})
	before := fileState(t, path)
	_, stderr := mustRun(t, exitFailure, "ls", path)
	if want := fmt.Sprintf("inspect: %s: format version 9, this inspect reads version %d\n", path, store.FormatVersion); stderr != want {
		t.Errorf("stderr %q", stderr)
	}
	if fileState(t, path) != before {
		t.Error("the file changed")
	}
}

// A file of an older format version is refused too (inspect never
// migrates), with a message that says what will.
func TestLsOlderFormat(t *testing.T) {
	path := damage(t, func(tx *bolt.Tx) error {
		m := tx.Bucket([]byte("meta"))
		h := append([]byte(nil), m.Get([]byte("header"))...)
		h[7] = 1
		sum := fnv.New64a()
		_, _ = sum.Write(h[:16])
		binary.BigEndian.PutUint64(h[16:24], sum.Sum64())
		return m.Put([]byte("header"), h)
	})
	before := fileState(t, path)
	_, stderr := mustRun(t, exitFailure, "ls", path)
	if !strings.Contains(stderr, fmt.Sprintf("format version 1, older than the version %d", store.FormatVersion)) || !strings.Contains(stderr, "migrates") {
		t.Errorf("stderr %q", stderr)
	}
	if fileState(t, path) != before {
		t.Error("the file changed")
	}
}
