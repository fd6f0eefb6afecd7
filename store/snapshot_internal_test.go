package store

import (
	"encoding/binary"
	"hash/crc32"
	"reflect"
	"testing"
)

func seedSnapshots() []*Snapshot {
	return []*Snapshot{
		{},
		{
			Keys: []string{"ns/a", "ns/b", "ns/c"}, ResourceVersions: []string{"1", "2", "3"},
			UIDs: []string{"u1", "u2", "u3"}, KeyIDs: []string{"", "k1", ""},
			Indexes: []SnapshotIndex{
				{Name: "namespace", Values: []SnapshotValue{{Value: "ns", Objects: []int32{0, 1, 2}}}},
				{Name: "node", Values: []SnapshotValue{{Value: "n1", Objects: []int32{0, 2}}, {Value: "n2", Objects: []int32{1, 1}}}},
			},
		},
	}
}

// FuzzDecodeSnapshot: any bytes decode to a snapshot or an error, never a
// panic; what decodes encodes to bytes that decode to the same. The input
// is the body: the fuzzer would rarely get past a checksum, so the test
// appends the right one.
func FuzzDecodeSnapshot(f *testing.F) {
	for _, sn := range seedSnapshots() {
		b := encodeSnapshot(sn, snapshotStamp{rv: "9", lastCommit: 1, objects: int64(len(sn.Keys))})
		f.Add(b[:len(b)-4])
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		b := binary.BigEndian.AppendUint32(append([]byte(nil), body...), crc32.Checksum(body, castagnoli))
		sn, stamp, err := decodeSnapshot(b)
		if err != nil {
			return
		}
		again, stamp2, err := decodeSnapshot(encodeSnapshot(sn, stamp))
		if err != nil {
			t.Fatalf("re-encoded snapshot does not decode: %v", err)
		}
		if stamp != stamp2 || !reflect.DeepEqual(normal(sn), normal(again)) {
			t.Fatalf("round trip differs:\n%+v\n%+v", sn, again)
		}
	})
}

// normal makes empty slices nil, for comparing.
func normal(sn *Snapshot) *Snapshot {
	c := *sn
	for _, p := range []*[]string{&c.Keys, &c.ResourceVersions, &c.UIDs, &c.KeyIDs} {
		if len(*p) == 0 {
			*p = nil
		}
	}
	if len(c.Indexes) == 0 {
		c.Indexes = nil
	}
	return &c
}

func TestSnapshotEncoding(t *testing.T) {
	for _, sn := range seedSnapshots() {
		stamp := snapshotStamp{rv: "9", lastCommit: -5, objects: 3}
		b := encodeSnapshot(sn, stamp)
		got, gotStamp, err := decodeSnapshot(b)
		if err != nil {
			t.Fatal(err)
		}
		if gotStamp != stamp || !reflect.DeepEqual(normal(got), normal(sn)) {
			t.Fatalf("round trip: %+v %+v", got, gotStamp)
		}
		// Every truncation and every flipped byte is an error.
		for n := range len(b) {
			if _, _, err := decodeSnapshot(b[:n]); err == nil {
				t.Fatalf("truncated to %d bytes: no error", n)
			}
		}
		for i := range b {
			c := append([]byte(nil), b...)
			c[i] ^= 0x01
			if _, _, err := decodeSnapshot(c); err == nil {
				t.Fatalf("byte %d flipped: no error", i)
			}
		}
	}
}
