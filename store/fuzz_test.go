package store_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/boltinformer/boltinformer/store"
)

// The fuzz targets' seed corpora live in testdata/fuzz/<FuzzName>/, in go's
// corpus format, built from real records (testdata/records, written by the
// codec) and a real cache file by TestGenerateSeeds in seedgen_test.go:
//
//	go test -tags seedgen -run TestGenerateSeeds ./store/
//
// Crashers the fuzzers find land there too and then run with every
// `go test`. To fuzz:
//
//	go test -run XXX -fuzz FuzzDecodeRecord -fuzztime 60s ./store/

// fuzzBase is the cache file FuzzOpen damages: two informers, four Pods
// with two indexes, cut to its used pages. It is checked in so that
// corpus entries keep meaning the same damage.
const fuzzBase = "testdata/fuzz_base.db"

// decodeBudget is the most a single decode of b may allocate.
func decodeBudget(b []byte) uint64 { return 64*uint64(len(b)) + 64<<10 }

// allocated runs fn and returns the bytes it allocated (the process's, so
// the budget has slack for the fuzzing machinery's own).
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// recordKeys are the keys the records in testdata/records are stored
// under (the checksum covers the key).
var recordKeys = map[string]string{
	"pod-json":            "ns-2/pod-000002",
	"pod-protobuf":        "ns-1/pod-000001",
	"pod-metadata":        "ns-0/pod-000003",
	"pod-long-name":       "ns-1/" + strings.Repeat("n", 17<<10),
	"secret-sealed":       "prod/db",
	"widget-unstructured": "default/widget-3",
}

// keyedRecord is an encoded record and the key it is stored under.
type keyedRecord struct {
	key string
	b   []byte
}

// realRecords are the encoded records in testdata/records, as the codec
// writes them (a typed Pod in protobuf and JSON, a sealed Secret, an
// unstructured object), and a few edge cases.
func realRecords(t testing.TB) []keyedRecord {
	t.Helper()
	names, err := filepath.Glob(filepath.Join("testdata", "records", "*.rec"))
	if err != nil || len(names) == 0 {
		t.Fatalf("no records in testdata/records (%v)", err)
	}
	sort.Strings(names)
	var out []keyedRecord
	for _, name := range names {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		key, ok := recordKeys[strings.TrimSuffix(filepath.Base(name), ".rec")]
		if !ok {
			t.Fatalf("%s: no key in recordKeys", name)
		}
		out = append(out, keyedRecord{key, b})
	}
	for _, r := range []*store.Record{
		{Codec: store.CodecJSON},
		{UID: "u", ResourceVersion: "1", Codec: 200, KeyID: "k", APIVersion: "v1", Kind: "Pod",
			Indexed: []store.IndexValues{{Index: "a", Values: []string{""}}, {Index: "", Values: nil}}, Payload: []byte{}},
	} {
		b, err := store.EncodeRecord("k", r)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, keyedRecord{"k", b})
	}
	return out
}

// realStates are encoded state records.
func realStates(t testing.TB) [][]byte {
	t.Helper()
	var out [][]byte
	for _, s := range []*store.State{
		{},
		{ResourceVersion: "12345", Synced: true, ClusterID: "c-1", Resource: "/v1, Resource=pods", Kind: "/v1, Kind=Pod",
			ListOptions: "sha256:ab", Transform: "none", Indexes: []string{"namespace", "node"}, Objects: 20000,
			Created: epoch, LastCommit: epoch.Add(time.Hour), LastSync: epoch.Add(time.Minute)},
		{ResourceVersion: "1", Objects: -1, Created: time.Unix(0, 1)},
		{Indexes: []string{"", "a\x00b"}, LastCommit: time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)},
	} {
		b, err := store.EncodeState(s)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

func FuzzDecodeRecord(f *testing.F) {
	for _, kr := range realRecords(f) {
		f.Add(kr.key, kr.b)
	}
	f.Fuzz(func(t *testing.T, key string, b []byte) {
		var r *store.Record
		var err error
		if n := allocated(func() { r, err = store.DecodeRecord(key, b) }); n > decodeBudget(b) {
			t.Fatalf("decoding %d bytes allocated %d", len(b), n)
		}
		// The in-place scanner (a warm load's) agrees with the decoder,
		// without its length guard, and allocates next to nothing.
		var h store.RecordHead
		var scanned []store.IndexValues
		var serr error
		if n := allocated(func() {
			h, serr = store.ScanRecord(key, b, func(name, value []byte) {
				if len(scanned) == 0 || scanned[len(scanned)-1].Index != string(name) {
					scanned = append(scanned, store.IndexValues{Index: string(name)})
				}
				last := &scanned[len(scanned)-1]
				last.Values = append(last.Values, string(value))
			})
		}); n > 64<<10+uint64(len(b))*8 {
			t.Fatalf("scanning %d bytes allocated %d", len(b), n)
		}
		if (serr == nil) != (err == nil) {
			t.Fatalf("DecodeRecord: %v; ScanRecord: %v", err, serr)
		}
		if err == nil {
			if string(h.UID) != r.UID || string(h.ResourceVersion) != r.ResourceVersion || h.Codec != r.Codec ||
				string(h.KeyID) != r.KeyID || string(h.APIVersion) != r.APIVersion || string(h.Kind) != r.Kind ||
				h.Checksum != r.Checksum || string(h.Payload) != string(r.Payload) {
				t.Fatalf("ScanRecord %+v differs from DecodeRecord %+v", h, r)
			}
			var want []store.IndexValues
			for _, iv := range r.Indexed {
				if len(iv.Values) > 0 {
					want = append(want, iv)
				}
			}
			if !reflect.DeepEqual(normIndexed(scanned), normIndexed(want)) {
				t.Fatalf("ScanRecord index values %v, DecodeRecord %v", scanned, want)
			}
		}
		if err != nil {
			if r != nil || !errors.Is(err, store.ErrCorrupt) {
				t.Fatalf("DecodeRecord: %v, %v", r, err)
			}
			return
		}
		// What decodes re-encodes to something that decodes the same.
		b2, err := store.EncodeRecord(key, r)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := store.DecodeRecord(key, b2)
		if err != nil {
			t.Fatalf("re-encoded record does not decode: %v", err)
		}
		if !reflect.DeepEqual(normRecord(r), normRecord(r2)) {
			t.Fatalf("round trip differs:\n%+v\n%+v", r, r2)
		}
	})
}

// normRecord maps empty slices to nil (msgpack keeps the difference only
// in some encodings).
func normRecord(r *store.Record) *store.Record {
	c := *r
	if len(c.Payload) == 0 {
		c.Payload = nil
	}
	if len(c.Indexed) == 0 {
		c.Indexed = nil
	}
	c.Indexed = append([]store.IndexValues(nil), c.Indexed...)
	for i := range c.Indexed {
		if len(c.Indexed[i].Values) == 0 {
			c.Indexed[i].Values = nil
		}
	}
	return &c
}

func FuzzDecodeState(f *testing.F) {
	for _, b := range realStates(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var s *store.State
		var err error
		if n := allocated(func() { s, err = store.DecodeState(b) }); n > decodeBudget(b) {
			t.Fatalf("decoding %d bytes allocated %d", len(b), n)
		}
		if err != nil {
			if s != nil || !errors.Is(err, store.ErrCorrupt) {
				t.Fatalf("DecodeState: %v, %v", s, err)
			}
			return
		}
		// Encoding is a fixed point after one round.
		b2, err := store.EncodeState(s)
		if err != nil {
			t.Fatal(err)
		}
		s2, err := store.DecodeState(b2)
		if err != nil {
			t.Fatalf("re-encoded state does not decode: %v", err)
		}
		b3, err := store.EncodeState(s2)
		if err != nil || !bytes.Equal(b2, b3) {
			t.Fatalf("state encoding is not stable: %x / %x (%v)", b2, b3, err)
		}
	})
}

// damageBase writes data over a copy of the base file at off (modulo its
// length, growing it if data runs past the end), then cuts it to cut bytes
// (modulo its length plus one) when cut is not zero.
func damageBase(base []byte, off uint32, data []byte, cut uint32) []byte {
	b := append([]byte(nil), base...)
	if len(data) > 0 {
		o := int(off % uint32(len(b)))
		if end := o + len(data); end > len(b) {
			b = append(b, make([]byte, end-len(b))...)
		}
		copy(b[o:], data)
	}
	if cut != 0 {
		b = b[:int(cut%uint32(len(b)+1))]
	}
	return b
}

func FuzzOpen(f *testing.F) {
	base, err := os.ReadFile(fuzzBase)
	if err != nil {
		f.Fatalf("%v (regenerate with go test -tags seedgen -run TestGenerateSeeds)", err)
	}
	f.Add(uint32(0), []byte{}, uint32(0))
	dir := f.TempDir()
	var n atomic.Int64
	f.Fuzz(func(t *testing.T, off uint32, data []byte, cut uint32) {
		b := damageBase(base, off, data, cut)
		// A new file each time: should an input leak a lock or a handle,
		// it must not fail the next input (the minimizer would then shrink
		// that instead).
		path := filepath.Join(dir, fmt.Sprintf("cache-%d.db", n.Add(1)))
		defer os.Remove(path)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		openDamaged(t, path, b)
	})
}

// openDamaged opens a damaged file read-only and read-write, reads it all,
// checks it and writes to it: nothing may panic or hang, every error must
// be typed, and a failed Open must leave the file as it was.
func openDamaged(t *testing.T, path string, b []byte) {
	t.Helper()
	for _, ro := range []bool{true, false} {
		db, err := store.Open(path, &store.Options{ReadOnly: ro, NoSync: true, Timeout: -1})
		if err != nil {
			if !typed(err) || errors.Is(err, store.ErrLocked) {
				t.Fatalf("read-only %v: Open: untyped error %v", ro, err)
			}
			if got, _ := os.ReadFile(path); !bytes.Equal(got, b) {
				t.Fatalf("read-only %v: failed Open changed the file", ro)
			}
			continue
		}
		closed := false
		defer func() {
			if !closed {
				_ = db.Close()
			}
		}()
		if err := db.View(walk); err != nil && !errors.Is(err, store.ErrCorrupt) {
			t.Fatalf("read-only %v: View: %v", ro, err)
		}
		probs, err := db.Check(&store.CheckOptions{MaxProblems: 20})
		if err != nil && !errors.Is(err, store.ErrCorrupt) {
			t.Fatalf("read-only %v: Check: %v", ro, err)
		}
		for _, p := range probs {
			if !errors.Is(p, store.ErrCorrupt) {
				t.Fatalf("read-only %v: Check problem %v", ro, p)
			}
		}
		if !ro {
			// Writes may fail on a damaged file, but not panic or hang.
			_ = db.Commit(podBatch(t, "pods", 2, 4, "9"), &store.Batch{Informer: "new", Ops: []store.Op{{Key: "x"}}, State: &store.State{}})
			_ = db.DeleteInformer("empty")
			_ = db.View(walk)
		}
		closed = true
		if err := db.Close(); err != nil {
			t.Fatalf("read-only %v: Close: %v", ro, err)
		}
	}
}

// TestFuzzBase keeps the checked-in base file a valid, current cache.
func TestFuzzBase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "base.db")
	b, err := os.ReadFile(fuzzBase)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, b)
	db := openT(t, path, &store.Options{ReadOnly: true})
	mustCheck(t, db)
	if got := keys(t, db, "pods"); len(got) != 4 {
		t.Fatalf("base holds %v", got)
	}
}

// normIndexed merges consecutive entries of one index (the scanner sees
// values, not entries) and maps empty to nil.
func normIndexed(in []store.IndexValues) []store.IndexValues {
	var out []store.IndexValues
	for _, iv := range in {
		if len(out) > 0 && out[len(out)-1].Index == iv.Index {
			out[len(out)-1].Values = append(out[len(out)-1].Values, iv.Values...)
			continue
		}
		out = append(out, store.IndexValues{Index: iv.Index, Values: append([]string(nil), iv.Values...)})
	}
	return out
}
