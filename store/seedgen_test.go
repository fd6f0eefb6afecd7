//go:build seedgen

// This file regenerates testdata: go test -tags seedgen -run TestGenerateSeeds ./store/
// It is behind a build tag so that the store's tests and fuzzers do not
// link internal/codec and the Kubernetes types.

package store_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/boltinformer/boltinformer/internal/codec"
	"github.com/boltinformer/boltinformer/internal/testobj"
	"github.com/boltinformer/boltinformer/store"
)

// writeRecords writes testdata/records: real records as the codec encodes
// them, each with index values as the indexer sets them.
func writeRecords(t *testing.T) {
	dir := filepath.Join("testdata", "records")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	put := func(name string, r *store.Record, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		b, err := store.EncodeRecord(recordKeys[name], r)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name+".rec"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pod := testobj.Pod(1, 3, 2, "123")
	pb, _ := codec.New(&corev1.Pod{}, nil)
	r, err := pb.Encode("ns-1/pod-000001", pod)
	if err == nil {
		r.SetIndexed(map[string][]string{"namespace": {"ns-1"}, "node": {"node-1"}})
	}
	put("pod-protobuf", r, err)

	js, _ := codec.New(&corev1.Pod{}, &codec.Options{ForceJSON: true})
	withTM := testobj.Pod(2, 3, 2, "5")
	withTM.APIVersion, withTM.Kind = "v1", "Pod"
	r, err = js.Encode("ns-2/pod-000002", withTM)
	if err == nil {
		r.SetIndexed(map[string][]string{"namespace": {"ns-2"}, "label": {"app=app-2", "tier=db"}})
	}
	put("pod-json", r, err)

	sealed, _ := codec.New(&corev1.Secret{}, &codec.Options{Keyring: &codec.Keyring{Current: "k1", Keys: map[string][]byte{"k1": bytes.Repeat([]byte{7}, 32)}}})
	s := &corev1.Secret{Data: map[string][]byte{"password": []byte("hunter2")}}
	s.Name, s.Namespace, s.UID, s.ResourceVersion = "db", "prod", "6f1c0b1e-0000-4000-8000-000000000001", "9"
	r, err = sealed.Encode("prod/db", s)
	put("secret-sealed", r, err)

	pom := &metav1.PartialObjectMetadata{ObjectMeta: testobj.Pod(3, 3, 2, "8").ObjectMeta}
	r, err = pb.Encode("ns-0/pod-000003", pom)
	if err == nil {
		r.SetIndexed(map[string][]string{"namespace": {"ns-0"}})
	}
	put("pod-metadata", r, err)

	long := testobj.Pod(4, 3, 2, "9")
	long.Name = strings.Repeat("n", 17<<10)
	r, err = pb.Encode(recordKeys["pod-long-name"], long)
	if err == nil {
		r.SetIndexed(map[string][]string{"namespace": {"ns-1"}, "label": {strings.Repeat("v", 17<<10)}})
	}
	put("pod-long-name", r, err)

	un, _ := codec.New(&unstructured.Unstructured{}, nil)
	r, err = un.Encode("default/widget-3", testobj.Unstructured(3, "default", "77"))
	if err == nil {
		r.SetIndexed(map[string][]string{"namespace": {"default"}, "color": {"red"}})
	}
	put("widget-unstructured", r, err)
}

// writeCodecSeeds writes internal/codec's FuzzDecodePayload seeds: the
// payloads of real objects.
func writeCodecSeeds(t *testing.T) {
	dir := filepath.Join("..", "internal", "codec", "testdata")
	pb, _ := codec.New(&corev1.Pod{}, nil)
	r, err := pb.Encode("k", testobj.Pod(3, 3, 2, "44"))
	if err != nil {
		t.Fatal(err)
	}
	_, _, raw, err := store.SplitKubeProtobuf(r.Payload)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "seed.bin"), r.Payload, 0o644); err != nil {
		t.Fatal(err)
	}
	fdir := filepath.Join(dir, "fuzz", "FuzzDecodePayload")
	j, _ := utiljson.Marshal(testobj.Pod(4, 3, 2, "45"))
	u, _ := testobj.Unstructured(5, "default", "46").MarshalJSON()
	for _, s := range []struct {
		name  string
		codec store.Codec
		b     []byte
	}{
		{"pod-protobuf", store.CodecKubeProtobuf, r.Payload},
		{"pod-protobuf-cut", store.CodecKubeProtobuf, r.Payload[:len(r.Payload)/2]},
		{"pod-raw-protobuf", store.CodecProtobuf, raw},
		{"pod-json", store.CodecJSON, j},
		{"widget-json", store.CodecJSON, u},
		{"pod-protobuf-as-json", store.CodecJSON, r.Payload},
		{"unknown-codec", 9, j},
	} {
		writeSeedTo(t, fdir, s.name, uint8(s.codec), s.b)
	}
}

// TestGenerateSeeds regenerates the checked-in records, base file and
// seed corpora, from real objects encoded by internal/codec.
func TestGenerateSeeds(t *testing.T) {
	writeRecords(t)
	writeCodecSeeds(t)
	// The base: written by the store, cut to its used pages.
	b, _, used := cacheBytes(t, 4)
	b = b[:used]
	if err := os.WriteFile(fuzzBase, b, 0o644); err != nil {
		t.Fatal(err)
	}
	for i, kr := range realRecords(t) {
		writeSeed(t, "FuzzDecodeRecord", fmt.Sprintf("record-%d", i), kr.key, kr.b)
	}
	// Records cut short, with a length made huge, under another key.
	kr := realRecords(t)[0]
	writeSeed(t, "FuzzDecodeRecord", "record-cut", kr.key, kr.b[:len(kr.b)/2])
	huge := append([]byte(nil), kr.b...)
	if i := bytes.IndexByte(huge, 0xc5); i > 0 { // bin16 payload header
		huge[i] = 0xc6
	}
	writeSeed(t, "FuzzDecodeRecord", "record-bin32", kr.key, huge)
	writeSeed(t, "FuzzDecodeRecord", "record-other-key", kr.key+"x", kr.b)
	for i, st := range realStates(t) {
		writeSeed(t, "FuzzDecodeState", fmt.Sprintf("state-%d", i), st)
	}
	writeSeed(t, "FuzzDecodeState", "state-unknown-key", []byte("\x82\xa2rv\xa11\xa7future?\x93\x01\x02\x03"))

	// FuzzOpen: damage aimed at each structure of the base file.
	const ps = 4096
	page := func(id int) []byte { return append([]byte(nil), b[id*ps:(id+1)*ps]...) }
	type seed struct {
		name string
		off  uint32
		data []byte
		cut  uint32
	}
	seeds := []seed{
		{"meta0-magic", 16, []byte{0, 0, 0, 0}, 0},
		{"meta1-pgid", ps + 16 + 40, []byte{0xff, 0xff, 0, 0}, 0},
		{"both-meta-zero", 0, make([]byte, 2*ps), 0},
		{"meta1-over-meta0", 0, page(1), 0},
		{"cut-half", 0, nil, uint32(len(b) / 2)},
		{"cut-two-pages", 0, nil, 2 * ps},
		{"cut-one-page-plus", 0, nil, ps + 100},
		{"freelist-zero", 2 * ps, make([]byte, ps), 0},
		{"root-zero", 3 * ps, make([]byte, 64), 0},
	}
	for id := 2; id < used/ps; id++ {
		seeds = append(seeds,
			seed{fmt.Sprintf("page-%d-id", id), uint32(id * ps), []byte{byte(id + 1)}, 0},
			seed{fmt.Sprintf("page-%d-count", id), uint32(id*ps + 10), []byte{0xff, 0xff}, 0},
			seed{fmt.Sprintf("page-%d-overflow", id), uint32(id*ps + 12), []byte{0xff, 0xff, 0xff, 0x7f}, 0},
			seed{fmt.Sprintf("page-%d-elem0-pos", id), uint32(id*ps + 16 + 4), []byte{0xff, 0xff, 0x00, 0x01}, 0},
			seed{fmt.Sprintf("page-%d-elem0-child", id), uint32(id*ps + 16 + 8), []byte{byte(id)}, 0},
		)
	}
	// A real record written over the first record in the file.
	if i := bytes.Index(b, []byte("ns-0/pod-000000")); i > 0 {
		seeds = append(seeds, seed{"record-over-key", uint32(i), realRecords(t)[1].b[:200], 0})
	}
	for _, s := range seeds {
		writeSeed(t, "FuzzOpen", s.name, s.off, s.data, s.cut)
	}
}

// writeSeed writes one corpus entry of a store fuzz target.
func writeSeed(t *testing.T, fuzz, name string, args ...any) {
	t.Helper()
	writeSeedTo(t, filepath.Join("testdata", "fuzz", fuzz), name, args...)
}

// writeSeedTo writes one corpus entry in go's format ("go test fuzz v1").
func writeSeedTo(t *testing.T, dir, name string, args ...any) {
	t.Helper()
	var sb strings.Builder
	sb.WriteString("go test fuzz v1\n")
	for _, a := range args {
		switch a := a.(type) {
		case []byte:
			sb.WriteString("[]byte(" + strconv.Quote(string(a)) + ")\n")
		case string:
			sb.WriteString("string(" + strconv.Quote(a) + ")\n")
		case uint32:
			fmt.Fprintf(&sb, "uint32(%d)\n", a)
		case uint8:
			fmt.Fprintf(&sb, "uint8(%d)\n", a)
		default:
			t.Fatalf("seed argument %T", a)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "seed-"+name), []byte(sb.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}
