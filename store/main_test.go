package store_test

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/boltinformer/boltinformer/store"
)

// holdEnv, when set in the environment of this test binary, makes it a
// helper process instead: it opens the file named by the variable, prints
// "locked" and keeps the file open until its stdin is closed. holdROEnv
// does the same with a read-only open.
const (
	holdEnv   = "BOLTINFORMER_STORE_TEST_HOLD"
	holdROEnv = "BOLTINFORMER_STORE_TEST_HOLD_RO"
)

func TestMain(m *testing.M) {
	if path := os.Getenv(holdEnv); path != "" {
		os.Exit(holdFile(path, false))
	}
	if path := os.Getenv(holdROEnv); path != "" {
		os.Exit(holdFile(path, true))
	}
	goleak.VerifyTestMain(m)
}

func holdFile(path string, readOnly bool) int {
	db, err := store.Open(path, &store.Options{ReadOnly: readOnly, NoSync: true})
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Println("locked")
	_, _ = io.Copy(io.Discard, os.Stdin)
	if err := db.Close(); err != nil {
		fmt.Println("error:", err)
		return 1
	}
	return 0
}

// epoch is the fake clock's start.
var epoch = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

func fakeClock() *clocktesting.FakeClock { return clocktesting.NewFakeClock(epoch) }

// openT opens path with NoSync and a fake clock unless opts says otherwise,
// and closes it at the end of the test.
func openT(t testing.TB, path string, opts *store.Options) *store.DB {
	t.Helper()
	if opts == nil {
		opts = &store.Options{NoSync: true, Clock: fakeClock()}
	}
	db, err := store.Open(path, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func tempPath(t testing.TB) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "cache.db")
}

// podPayload is a real Pod (testobj.Pod(1, ...)) in the kube-protobuf
// encoding the codec stores, read from the checked-in record. The store
// treats payloads as opaque; these tests do not import the codec or
// Kubernetes types, which keeps the fuzzing binary small (coverage
// instrumentation of k8s.io/api slows fuzzing tenfold).
var podPayload = sync.OnceValue(func() []byte {
	raw, err := os.ReadFile(filepath.Join("testdata", "records", "pod-protobuf.rec"))
	if err != nil {
		panic(fmt.Sprintf("%v (regenerate with go test -tags seedgen -run TestGenerateSeeds ./store/)", err))
	}
	r, err := store.DecodeRecord("ns-1/pod-000001", raw)
	if err != nil {
		panic(err)
	}
	return r.Payload
})

// podRecord is the record of Pod number i (in one of 3 namespaces and on
// one of 2 nodes, like testobj.Pod(i, 3, 2, rv)) as the indexer would store
// it, with "namespace" and "node" index values. Its payload is the real
// Pod's with a marker naming i appended, so that every payload differs.
func podRecord(t testing.TB, i int, rv string) (string, *store.Record) {
	t.Helper()
	ns, name := fmt.Sprintf("ns-%d", i%3), fmt.Sprintf("pod-%06d", i)
	r := &store.Record{
		UID:             fmt.Sprintf("00000000-0000-4000-8000-%012d", i),
		ResourceVersion: rv,
		Codec:           store.CodecKubeProtobuf,
		Payload:         append(append([]byte(nil), podPayload()...), payloadMarker(i)...),
	}
	r.SetIndexed(map[string][]string{
		"namespace": {ns},
		"node":      {fmt.Sprintf("node-%d", i%2)},
	})
	return ns + "/" + name, r
}

// payloadMarker is the part of pod i's payload that no other pod has.
func payloadMarker(i int) string { return fmt.Sprintf("marker-of-pod-%06d", i) }

// podBatch is a batch that puts pods [from, to) with state rv.
func podBatch(t testing.TB, informer string, from, to int, rv string) *store.Batch {
	t.Helper()
	b := &store.Batch{Informer: informer, State: &store.State{
		ResourceVersion: rv, Synced: true, ClusterID: "cluster-1",
		Resource: "/v1, Resource=pods", Indexes: []string{"node", "namespace"},
	}}
	for i := from; i < to; i++ {
		key, r := podRecord(t, i, rv)
		b.Ops = append(b.Ops, store.Op{Key: key, Record: r})
	}
	return b
}

// smallCache writes a small, valid cache file: one informer "pods" with n
// Pods and two indexes, and a second informer "empty" with state only.
func smallCache(t testing.TB, path string, n int) {
	t.Helper()
	db, err := store.Open(path, &store.Options{NoSync: true, Clock: fakeClock()})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Commit(podBatch(t, "pods", 0, n, "100"),
		&store.Batch{Informer: "empty", State: &store.State{ResourceVersion: "7"}}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFile(t testing.TB, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func fileHash(t testing.TB, path string) [32]byte {
	t.Helper()
	return sha256.Sum256(readFile(t, path))
}

// readLine reads one line from r with a deadline.
func readLine(t *testing.T, r io.Reader, timeout time.Duration) string {
	t.Helper()
	ch := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(r).ReadString('\n')
		ch <- string(bytes.TrimSpace([]byte(line)))
	}()
	select {
	case l := <-ch:
		return l
	case <-time.After(timeout):
		t.Fatalf("no line from helper within %s", timeout)
		return ""
	}
}
