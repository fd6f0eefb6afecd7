package store

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// msgpackRecord is the reference encoding of a record: the msgpack
// encoder's, as format version 2 was first written (with version 4's
// fields 7 and 8).
func msgpackRecord(t *testing.T, key string, r *Record) []byte {
	t.Helper()
	var head bytes.Buffer
	enc := msgpack.NewEncoder(&head)
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(enc.EncodeArrayLen(recordFields))
	must(enc.EncodeString(r.UID))
	must(enc.EncodeString(r.ResourceVersion))
	must(enc.EncodeUint8(uint8(r.Codec)))
	must(enc.EncodeString(r.KeyID))
	must(enc.EncodeString(r.APIVersion))
	must(enc.EncodeString(r.Kind))
	must(enc.EncodeArrayLen(len(r.Indexed)))
	for _, iv := range r.Indexed {
		must(enc.EncodeArrayLen(2))
		must(enc.EncodeString(iv.Index))
		must(enc.EncodeArrayLen(len(iv.Values)))
		for _, v := range iv.Values {
			must(enc.EncodeString(v))
		}
	}
	if keyEscaped(key) {
		must(enc.EncodeString(key))
	} else {
		must(enc.EncodeString(""))
	}
	must(enc.EncodeString(r.Type))
	out := bytes.NewBuffer(append([]byte(nil), head.Bytes()...))
	enc.Reset(out)
	must(enc.EncodeUint32(recordChecksum(key, head.Bytes(), r.Payload)))
	must(enc.EncodeBytesLen(len(r.Payload)))
	out.Write(r.Payload)
	return out.Bytes()
}

// recordVariants covers every length class of msgpack's strings, arrays
// and binaries.
func recordVariants() []*Record {
	var out []*Record
	for _, sl := range []int{0, 1, 31, 32, 255, 256, 65535, 65536} {
		s := strings.Repeat("s", sl)
		for _, pl := range []int{0, 255, 256, 65535, 65536} {
			out = append(out, &Record{UID: s, ResourceVersion: "12", Codec: CodecProtobuf, KeyID: "k1",
				APIVersion: s, Kind: "Pod", Type: s, Payload: bytes.Repeat([]byte{7}, pl),
				Indexed: []IndexValues{{Index: "namespace", Values: []string{s}}}})
		}
	}
	many := &Record{Codec: CodecJSON, Payload: []byte("{}")}
	for i := range 20 {
		vals := make([]string, i*i*200) // up to 72,200 values: every array class
		for j := range vals {
			vals[j] = fmt.Sprint(j)
		}
		many.Indexed = append(many.Indexed, IndexValues{Index: fmt.Sprintf("ix%02d", i), Values: vals})
	}
	return append(out, many, &Record{Codec: CodecProtobuf})
}

func TestAppendRecordMatchesMsgpack(t *testing.T) {
	for i, r := range recordVariants() {
		want := msgpackRecord(t, "ns/name", r)
		got, err := AppendRecord([]byte("prefix"), "ns/name", r)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got[len("prefix"):], want) || string(got[:len("prefix")]) != "prefix" {
			t.Fatalf("variant %d: encodings differ", i)
		}
		back, err := ViewRecord("ns/name", want)
		if err != nil {
			t.Fatalf("variant %d: %v", i, err)
		}
		if back.Checksum != r.Checksum {
			t.Fatalf("variant %d: checksum %08x, set %08x", i, back.Checksum, r.Checksum)
		}
	}
}

func TestScanLayout(t *testing.T) {
	for i, r := range recordVariants() {
		raw, err := EncodeRecord("ns/name", r)
		if err != nil {
			t.Fatal(err)
		}
		h, err := scanLayout(raw, nil)
		bare := *r
		bare.Indexed = nil
		head, err2 := appendHead(nil, "ns/name", r)
		bareHead, err3 := appendHead(nil, "ns/name", &bare)
		if err != nil || err2 != nil || err3 != nil {
			t.Fatalf("variant %d: %v %v %v", i, err, err2, err3)
		}
		// The head ends with fields 7 and 8 (Key, Type), after Indexed.
		tail, err := msgpack.Marshal(r.Type)
		if err != nil {
			t.Fatal(err)
		}
		end := len(head) - 1 - len(tail)
		if !bytes.Equal(h.Indexed, raw[len(bareHead)-1-1-len(tail):end]) || h.Checksum != r.Checksum || !bytes.Equal(h.Payload, r.Payload) {
			t.Fatalf("variant %d: layout %d bytes of index values, %08x, %d bytes of payload", i, len(h.Indexed), h.Checksum, len(h.Payload))
		}
	}
}

// TestSameIndexed: true only for a sound old record with the same index
// values; and whenever it says true, decoding agrees (checked on every
// single-byte change and truncation of a record).
func TestSameIndexed(t *testing.T) {
	key := "ns/a"
	rec := func(rv string, vals ...string) []byte {
		r := &Record{UID: "u", ResourceVersion: rv, Codec: CodecProtobuf, Payload: []byte("payload-" + rv),
			Indexed: []IndexValues{{Index: "namespace", Values: []string{"ns"}}, {Index: "node", Values: vals}}}
		b, err := EncodeRecord(key, r)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	old, same, moved := rec("1", "n1"), rec("2", "n1"), rec("2", "n2")
	if !sameIndexed(key, old, same) {
		t.Error("same values: false")
	}
	if sameIndexed(key, old, moved) {
		t.Error("changed values: true")
	}
	if sameIndexed("ns/other", old, same) {
		t.Error("record stored under another key: true")
	}
	for i := range old {
		for _, bad := range [][]byte{flip(old, i), old[:i]} {
			if !sameIndexed(key, bad, same) {
				continue
			}
			r, err := ViewRecord(key, bad)
			if err != nil {
				t.Fatalf("byte %d: sameIndexed true for a record that does not decode: %v", i, err)
			}
			if fmt.Sprint(r.Indexed) != "[{namespace [ns]} {node [n1]}]" {
				t.Fatalf("byte %d: sameIndexed true, decoded Indexed %v", i, r.Indexed)
			}
		}
	}
}

func flip(b []byte, i int) []byte {
	out := bytes.Clone(b)
	out[i] ^= 0x40
	return out
}
