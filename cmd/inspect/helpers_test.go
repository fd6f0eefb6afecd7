package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/boltinformer/boltinformer/indexer"
	"github.com/boltinformer/boltinformer/internal/codec"
	"github.com/boltinformer/boltinformer/internal/testobj"
	"github.com/boltinformer/boltinformer/store"
)

var (
	update      = flag.Bool("update", false, "rewrite the golden files in testdata")
	writeSample = flag.String("write-fixture", "", "write the test fixture to this path (for README.md) and exit")
)

var (
	// fileTime is the fixture's clock (created, commit and sync times);
	// testNow is the clock of AGE columns.
	fileTime = time.Date(2026, 1, 4, 0, 0, 0, 0, time.UTC)
	testNow  = time.Date(2026, 1, 5, 3, 4, 5, 0, time.UTC)

	testKeyID = "k1"
	testKey   = bytes.Repeat([]byte{7}, 32)
	wrongKey  = bytes.Repeat([]byte{8}, 32)
)

// fixtureDir is the directory of the shared fixture (TestMain makes it).
var fixtureDir string

var (
	fixtureOnce sync.Once
	fixtureFile string
	fixtureErr  error
)

// fixture returns the path of the shared fixture file, written once by
// the library. Tests must not change it: copyFixture gives a private copy.
func fixture(t *testing.T) string {
	t.Helper()
	fixtureOnce.Do(func() {
		fixtureFile = filepath.Join(fixtureDir, "cache.db")
		fixtureErr = writeFixture(fixtureFile)
	})
	if fixtureErr != nil {
		t.Fatal(fixtureErr)
	}
	return fixtureFile
}

func TestWriteFixture(t *testing.T) {
	if *writeSample == "" {
		t.Skip("no -write-fixture")
	}
	if err := writeFixture(*writeSample); err != nil {
		t.Fatal(err)
	}
}

func copyFixture(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(fixture(t))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "cache.db")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// writeFixture writes, through indexer.Open, four informers: Pods with a
// namespace and a node index, a CRD as unstructured, encrypted Secrets,
// and a protobuf type that is not in client-go's scheme.
func writeFixture(path string) (err error) {
	db, err := store.Open(path, &store.Options{Clock: clocktesting.NewFakePassiveClock(fileTime), NoSync: true})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, db.Close()) }()
	committer := store.NewCommitter(db, &store.CommitterOptions{MaxDelay: time.Hour})
	nsIndex := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
	var idxs []*indexer.Indexer
	defer func() {
		for _, x := range idxs {
			err = errors.Join(err, x.Close())
		}
	}()
	add := func(name, resource string, indexers cache.Indexers, opts indexer.Options, objs []any, rv string) error {
		opts.Committer = committer
		opts.Identity = store.State{ClusterID: "cluster-a", Resource: resource, ListOptions: "none"}
		x, err := indexer.Open(db, name, indexers, &opts)
		if err != nil {
			return err
		}
		idxs = append(idxs, x)
		return x.Replace(objs, rv)
	}
	var pods, widgets, secrets, gadgets []any
	for i := range 6 {
		pods = append(pods, testobj.Pod(i, 3, 2, strconv.Itoa(100+i)))
	}
	// Written by server-side apply: -o json|yaml leave its managedFields
	// out unless --show-managed-fields.
	pods[0].(*corev1.Pod).ManagedFields = []metav1.ManagedFieldsEntry{{
		Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply, APIVersion: "v1",
		Time: &metav1.Time{Time: fileTime.Add(-72 * time.Hour)}, FieldsType: "FieldsV1",
		FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{"f:labels":{"f:app":{}}},"f:spec":{"f:nodeName":{}}}`),
	}}
	for i := range 3 {
		widgets = append(widgets, testobj.Unstructured(i, fmt.Sprintf("ns-%d", i%2), strconv.Itoa(200+i)))
	}
	for i, name := range []string{"db", "api-token"} {
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "prod", UID: types.UID(fmt.Sprintf("33333333-0000-4000-8000-%012d", i)),
				ResourceVersion: strconv.Itoa(300 + i), CreationTimestamp: metav1.NewTime(fileTime.Add(-time.Hour))},
			Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{"password": []byte("hunter" + strconv.Itoa(i))},
		}
		secrets = append(secrets, s)
	}
	for i := range 2 {
		gadgets = append(gadgets, newGadget(i))
	}
	podIndexers := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc, "node": func(obj any) ([]string, error) {
		return []string{obj.(*corev1.Pod).Spec.NodeName}, nil
	}}
	keyring := &codec.Keyring{Current: testKeyID, Keys: map[string][]byte{testKeyID: testKey}}
	for _, err := range []error{
		add("v1/pods", "/v1, Resource=pods", podIndexers, indexer.Options{Example: &corev1.Pod{}}, pods, "120"),
		add("dynamic/example.com/v1/widgets", "example.com/v1, Resource=widgets", nsIndex, indexer.Options{Example: &unstructured.Unstructured{}}, widgets, "220"),
		add("v1/secrets", "/v1, Resource=secrets", nsIndex, indexer.Options{Example: &corev1.Secret{}, Keyring: keyring}, secrets, "320"),
		add("example.com/v1/gadgets", "example.com/v1, Resource=gadgets", nil, indexer.Options{Example: newGadget(-1)}, gadgets, "420"),
	} {
		if err != nil {
			return err
		}
	}
	return committer.Flush(context.Background())
}

// gadget is a protobuf-encoded type that client-go's scheme does not know.
type gadget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
}

func newGadget(i int) *gadget {
	g := &gadget{TypeMeta: metav1.TypeMeta{APIVersion: "example.com/v1", Kind: "Gadget"}}
	if i >= 0 {
		g.Name, g.Namespace = fmt.Sprintf("gadget-%d", i), "edge"
		g.UID, g.ResourceVersion = types.UID(fmt.Sprintf("44444444-0000-4000-8000-%012d", i)), strconv.Itoa(400+i)
	}
	return g
}

func (g *gadget) DeepCopyObject() runtime.Object {
	c := *g
	g.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	return &c
}

// Marshal writes field 1 (metadata.name) the protobuf way.
func (g *gadget) Marshal() ([]byte, error) {
	return append([]byte{0x0a, byte(len(g.Name))}, g.Name...), nil
}

func (g *gadget) Unmarshal([]byte) error { return errors.New("gadget: no decoder") }

// run runs inspect in-process, like main.
func run(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	a := &app{now: func() time.Time { return testNow }}
	var o, e bytes.Buffer
	code = a.execute(args, &o, &e)
	return o.String(), e.String(), code
}

// mustRun runs inspect and fails the test unless it exits with code.
func mustRun(t *testing.T, code int, args ...string) (stdout, stderr string) {
	t.Helper()
	stdout, stderr, got := run(t, args...)
	if got != code {
		t.Fatalf("inspect %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), got, code, stdout, stderr)
	}
	return stdout, stderr
}

// normalize replaces the fixture's and the tests' temporary directories.
func normalize(s string) string {
	s = strings.ReplaceAll(s, fixtureDir, "$DIR")
	return s
}

// golden compares got with testdata/name.golden (-update rewrites it).
// Outputs with bbolt page counts only compare on 4 KiB pages.
func golden(t *testing.T, name, got string) {
	t.Helper()
	got = normalize(got)
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from %s (go test -update rewrites it):\n--- got\n%s\n--- want\n%s", name, path, got, want)
	}
}

// pageSized skips tests whose output depends on bbolt's page size.
func pageSized(t *testing.T) {
	if os.Getpagesize() != 4096 {
		t.Skipf("page size %d: golden outputs are for 4096", os.Getpagesize())
	}
}

// keyFile writes a --key-file (an EncryptionConfiguration) with key as
// testKeyID for Secrets.
func keyFile(t *testing.T, key []byte) string {
	t.Helper()
	return writeKeyFile(t, "keys", "secrets", testKeyID, key)
}

// podKeyFile is a --key-file with keys for pods only.
func podKeyFile(t *testing.T) string {
	t.Helper()
	return writeKeyFile(t, "pod-keys", "pods", testKeyID, testKey)
}

// writeKeyFile writes an EncryptionConfiguration with one aesgcm key for
// resource.
func writeKeyFile(t *testing.T, name, resource, id string, key []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	data := fmt.Sprintf(`apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
- resources: [%s]
  providers:
  - aesgcm:
      keys:
      - name: %s
        secret: %s
`, resource, id, base64.StdEncoding.EncodeToString(key))
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// fileState is a file's content hash, size and modification time.
func fileState(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x/%d/%s", sha256.Sum256(data), fi.Size(), fi.ModTime())
}

// damage changes a copy of the fixture with bbolt directly, bypassing the
// store (which would refuse), and returns its path.
func damage(t *testing.T, fn func(tx *bolt.Tx) error) string {
	t.Helper()
	path := copyFixture(t)
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(fn); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// informerBolt is an informer's bucket, or one nested in it.
func informerBolt(tx *bolt.Tx, inf string, nested ...string) *bolt.Bucket {
	b := tx.Bucket([]byte("informers")).Bucket([]byte(inf))
	for _, n := range nested {
		b = b.Bucket([]byte(n))
	}
	return b
}

// withGarbageRecord has a record that is not a record in v1/pods.
func withGarbageRecord(t *testing.T) string {
	return damage(t, func(tx *bolt.Tx) error {
		return informerBolt(tx, "v1/pods", "objects").Put([]byte("ns-0/garbage"), []byte("garbage"))
	})
}

// withGarbagePayload has a sound record in v1/pods whose payload is not a
// Pod (its checksum matches: only decoding finds it).
func withGarbagePayload(t *testing.T) string {
	raw, err := store.EncodeRecord("ns-0/bad-payload", &store.Record{UID: "u", ResourceVersion: "1", Codec: store.CodecProtobuf, Payload: []byte{0x0a, 0xff, 0xff}})
	if err != nil {
		t.Fatal(err)
	}
	return damage(t, func(tx *bolt.Tx) error {
		return informerBolt(tx, "v1/pods", "objects").Put([]byte("ns-0/bad-payload"), raw)
	})
}

// truncated is a copy of the fixture cut to size bytes.
func truncated(t *testing.T, size int64) string {
	t.Helper()
	path := copyFixture(t)
	if err := os.Truncate(path, size); err != nil {
		t.Fatal(err)
	}
	return path
}

// emptyFile is a cache file without informers.
func emptyFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "empty.db")
	db, err := store.Open(path, &store.Options{Clock: clocktesting.NewFakePassiveClock(fileTime), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// otherKeyFile has one key, of another id than the fixture's.
func otherKeyFile(t *testing.T) string {
	t.Helper()
	return writeKeyFile(t, "other-keys", "secrets", "k2", testKey)
}

// withTwoPodInformers is a copy of the fixture with a second informer of
// Pods, "v1/pods-of-node-1".
func withTwoPodInformers(t *testing.T) string {
	t.Helper()
	path := copyFixture(t)
	db, err := store.Open(path, &store.Options{Clock: clocktesting.NewFakePassiveClock(fileTime), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	committer := store.NewCommitter(db, &store.CommitterOptions{MaxDelay: time.Hour})
	x, err := indexer.Open(db, "v1/pods-of-node-1", nil, &indexer.Options{Committer: committer, Example: &corev1.Pod{},
		Identity: store.State{ClusterID: "cluster-a", Resource: "/v1, Resource=pods", ListOptions: "node-1"}})
	if err != nil {
		t.Fatal(err)
	}
	err = errors.Join(x.Replace([]any{testobj.Pod(1, 3, 2, "101")}, "130"), committer.Flush(context.Background()), x.Close(), db.Close())
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// writeLater writes, at path, the fixture as it is later: in v1/pods
// ns-0/pod-000000 has other managedFields (and nothing else),
// ns-0/pod-000003 is deleted, ns-0/pod-000006 added, ns-1/pod-000001
// changed (a restart) and ns-2/pod-000002 deleted and created again
// (another uid); secret prod/db changed; an informer of ConfigMaps added.
// Widgets and gadgets are as they were.
func writeLater(path string) (err error) {
	if err := writeFixture(path); err != nil {
		return err
	}
	db, err := store.Open(path, &store.Options{Clock: clocktesting.NewFakePassiveClock(fileTime.Add(time.Hour)), NoSync: true})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, db.Close()) }()
	committer := store.NewCommitter(db, &store.CommitterOptions{MaxDelay: time.Hour})
	replace := func(name, resource string, indexers cache.Indexers, opts indexer.Options, objs []any, rv string) error {
		opts.Committer = committer
		opts.Identity = store.State{ClusterID: "cluster-a", Resource: resource, ListOptions: "none"}
		x, err := indexer.Open(db, name, indexers, &opts)
		if err != nil {
			return err
		}
		return errors.Join(x.Replace(objs, rv), committer.Flush(context.Background()), x.Close())
	}
	var pods []any
	for _, i := range []int{0, 1, 2, 4, 5, 6} {
		p := testobj.Pod(i, 3, 2, strconv.Itoa(100+i))
		switch i {
		case 0: // its managedFields only
			p.ResourceVersion = "110"
			p.ManagedFields = []metav1.ManagedFieldsEntry{{
				Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply, APIVersion: "v1",
				Time: &metav1.Time{Time: fileTime.Add(-time.Hour)}, FieldsType: "FieldsV1",
				FieldsV1: metav1.NewFieldsV1(`{"f:metadata":{"f:labels":{"f:app":{}}},"f:spec":{"f:nodeName":{}}}`),
			}}
		case 1:
			p.ResourceVersion = "131"
			p.Status.ContainerStatuses[0].RestartCount++
		case 2:
			p.ResourceVersion, p.UID = "132", types.UID("99999999-0000-4000-8000-000000000002")
		case 6:
			p.Namespace, p.ResourceVersion = "ns-0", "136"
		}
		pods = append(pods, p)
	}
	podIndexers := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc, "node": func(obj any) ([]string, error) {
		return []string{obj.(*corev1.Pod).Spec.NodeName}, nil
	}}
	var secrets []any
	for i, name := range []string{"db", "api-token"} {
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "prod", UID: types.UID(fmt.Sprintf("33333333-0000-4000-8000-%012d", i)),
				ResourceVersion: strconv.Itoa(300 + i), CreationTimestamp: metav1.NewTime(fileTime.Add(-time.Hour))},
			Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{"password": []byte("hunter" + strconv.Itoa(i))},
		}
		if name == "db" {
			s.ResourceVersion, s.Data["password"] = "340", []byte("rotated")
		}
		secrets = append(secrets, s)
	}
	keyring := &codec.Keyring{Current: testKeyID, Keys: map[string][]byte{testKeyID: testKey}}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: "ns-0", UID: "55555555-0000-4000-8000-000000000000",
		ResourceVersion: "500", CreationTimestamp: metav1.NewTime(fileTime)}, Data: map[string]string{"mode": "edge"}}
	nsIndex := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
	return errors.Join(
		replace("v1/pods", "/v1, Resource=pods", podIndexers, indexer.Options{Example: &corev1.Pod{}}, pods, "140"),
		replace("v1/secrets", "/v1, Resource=secrets", nsIndex, indexer.Options{Example: &corev1.Secret{}, Keyring: keyring}, secrets, "340"),
		replace("v1/configmaps", "/v1, Resource=configmaps", nsIndex, indexer.Options{Example: &corev1.ConfigMap{}}, []any{cm}, "500"),
	)
}

var (
	laterOnce sync.Once
	laterFile string
	laterErr  error
)

// later returns the path of the shared later fixture (writeLater).
func later(t *testing.T) string {
	t.Helper()
	fixture(t)
	laterOnce.Do(func() {
		laterFile = filepath.Join(fixtureDir, "later.db")
		laterErr = writeLater(laterFile)
	})
	if laterErr != nil {
		t.Fatal(laterErr)
	}
	return laterFile
}
