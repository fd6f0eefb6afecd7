package store_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/boltinformer/boltinformer/store"
)

// bytesTail writes p as a store.TailWriter does, counting the Size calls.
type bytesTail struct {
	p     []byte
	sizes int
}

func (w *bytesTail) Size() int { w.sizes++; return len(w.p) }

func (w *bytesTail) WriteTail(dst []byte) (int, bool, error) {
	if len(dst) < len(w.p) {
		return 0, false, nil
	}
	return copy(dst[len(dst)-len(w.p):], w.p), true, nil
}

func bufRecord(i, size int) (string, *store.Record) {
	payload := bytes.Repeat([]byte{byte(i)}, size)
	return fmt.Sprintf("ns/pod-%d", i), &store.Record{
		UID: fmt.Sprintf("uid-%d", i), ResourceVersion: fmt.Sprint(i), Codec: store.CodecProtobuf,
		Kind: "Pod", APIVersion: "v1", Payload: payload,
		Indexed: []store.IndexValues{{Index: "namespace", Values: []string{"ns"}}},
	}
}

// TestRecordBuffer: both ways into a RecordBuffer write EncodeRecord's
// bytes, for payloads that fit the free space, that need a new chunk and
// that need a chunk of their own; the records stay intact while more are
// added, and after Release the memory is reused for correct records.
func TestRecordBuffer(t *testing.T) {
	sizes := []int{0, 1, 255, 256, 2200, 70000, 300000, 600000, 3 << 20, 2200, 2200}
	var rb store.RecordBuffer
	for round := range 3 {
		var got, want [][]byte
		for i, size := range sizes {
			key, r := bufRecord(round*100+i, size)
			exp, err := store.EncodeRecord(key, r)
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, exp)
			var raw []byte
			if i%2 == 0 {
				raw, err = rb.Append(key, r)
			} else {
				w := &bytesTail{p: r.Payload}
				r.Payload = nil
				raw, err = rb.AppendTail(key, r, w)
				if err == nil && !bytes.Equal(r.Payload, w.p) {
					t.Fatalf("round %d, record %d: Payload not set to the payload", round, i)
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			if cap(raw) != len(raw) {
				t.Fatalf("round %d, record %d: capacity %d beyond the record's %d bytes", round, i, cap(raw), len(raw))
			}
			got = append(got, raw)
		}
		for i := range got { // after all were added: none overwritten
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("round %d, record %d (%d bytes of payload): not EncodeRecord's bytes", round, i, sizes[i])
			}
		}
		rb.Release()
	}
}

// TestRecordBufferSizesOnlyWhenShort: a payload that fits the free space
// is written without asking its size; one larger than a chunk is asked
// once.
func TestRecordBufferSizesOnlyWhenShort(t *testing.T) {
	var rb store.RecordBuffer
	defer rb.Release()
	for _, tc := range []struct{ size, calls int }{{2200, 0}, {2200, 0}, {3 << 20, 1}, {2200, 0}} {
		key, r := bufRecord(tc.size, tc.size)
		want, _ := store.EncodeRecord(key, r)
		w := &bytesTail{p: r.Payload}
		got, err := rb.AppendTail(key, r, w)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("payload of %d bytes: %v", tc.size, err)
		}
		if w.sizes != tc.calls {
			t.Errorf("payload of %d bytes: %d Size calls, want %d", tc.size, w.sizes, tc.calls)
		}
	}
}

// failingTail reports an error.
type failingTail struct{}

func (failingTail) Size() int { return 10 }
func (failingTail) WriteTail([]byte) (int, bool, error) {
	return 0, false, fmt.Errorf("marshal failed")
}

// lyingTail is never satisfied: its Size is wrong.
type lyingTail struct{}

func (lyingTail) Size() int                           { return 10 }
func (lyingTail) WriteTail([]byte) (int, bool, error) { return 0, false, nil }

func TestRecordBufferTailErrors(t *testing.T) {
	var rb store.RecordBuffer
	defer rb.Release()
	_, r := bufRecord(1, 0)
	if _, err := rb.AppendTail("ns/a", r, failingTail{}); err == nil {
		t.Error("AppendTail with a failing writer: no error")
	}
	if _, err := rb.AppendTail("ns/a", r, lyingTail{}); err == nil {
		t.Error("AppendTail with a writer larger than its Size: no error")
	}
	// The buffer is still usable.
	key, r := bufRecord(2, 100)
	want, _ := store.EncodeRecord(key, r)
	got, err := rb.Append(key, r)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("Append after errors: %v", err)
	}
}
