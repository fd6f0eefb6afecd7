package store

import (
	"bytes"
	"fmt"
	"math"
	"unsafe"

	"github.com/vmihailenco/msgpack/v5"
)

// The envelope's encoding, with vmihailenco/msgpack's Encoder writing
// straight into the record's buffer (appendWriter): no intermediate
// bytes.Buffer and no copy of the head.

// checksumLen is the encoded length of field 7 (EncodeUint32 always
// writes 0xce and four bytes).
const checksumLen = 5

// maxBinHead is the longest header EncodeBytesLen writes (bin32).
const maxBinHead = 5

// appendWriter is an io.Writer (and io.ByteWriter, so the Encoder needs
// no bufio) that appends to b.
type appendWriter struct{ b []byte }

func (w *appendWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

func (w *appendWriter) WriteByte(c byte) error {
	w.b = append(w.b, c)
	return nil
}

// encoderTo returns a pooled Encoder writing to w; give it back with
// msgpack.PutEncoder.
func encoderTo(w *appendWriter) *msgpack.Encoder {
	enc := msgpack.GetEncoder()
	enc.Reset(w)
	return enc
}

// appendHead appends the array header and fields 0 to 8 of the record of
// key (field 7, Key, is key when its bucket key is escaped).
func appendHead(b []byte, key string, r *Record) ([]byte, error) {
	w := &appendWriter{b: b}
	enc := encoderTo(w)
	defer msgpack.PutEncoder(enc)
	err := enc.EncodeArrayLen(recordFields)
	for _, s := range []string{r.UID, r.ResourceVersion} {
		if err == nil {
			err = enc.EncodeString(s)
		}
	}
	if err == nil {
		err = enc.EncodeUint8(uint8(r.Codec))
	}
	for _, s := range []string{r.KeyID, r.APIVersion, r.Kind} {
		if err == nil {
			err = enc.EncodeString(s)
		}
	}
	if err == nil {
		err = enc.EncodeArrayLen(len(r.Indexed))
	}
	for _, iv := range r.Indexed {
		if err == nil {
			err = enc.EncodeArrayLen(2)
		}
		if err == nil {
			err = enc.EncodeString(iv.Index)
		}
		if err == nil {
			err = enc.EncodeArrayLen(len(iv.Values))
		}
		for _, v := range iv.Values {
			if err == nil {
				err = enc.EncodeString(v)
			}
		}
	}
	if err == nil {
		if keyEscaped(key) {
			err = enc.EncodeString(key)
		} else {
			err = enc.EncodeString("")
		}
	}
	if err == nil {
		err = enc.EncodeString(r.Type)
	}
	return w.b, err
}

// appendTail appends field 7 (the checksum) and the payload's bin header.
func appendTail(b []byte, sum uint32, payloadLen int) ([]byte, error) {
	w := &appendWriter{b: b}
	enc := encoderTo(w)
	defer msgpack.PutEncoder(enc)
	err := enc.EncodeUint32(sum)
	if err == nil {
		err = enc.EncodeBytesLen(payloadLen)
	}
	return w.b, err
}

// appendEnvelope appends the record of key: the head, the checksum and
// the payload. It sets r.Checksum.
func appendEnvelope(dst []byte, key string, r *Record) ([]byte, error) {
	if uint64(len(r.Payload)) > math.MaxUint32 {
		return nil, fmt.Errorf("store: encode record %q: payload of %d bytes", key, len(r.Payload))
	}
	start := len(dst)
	b, err := appendHead(dst, key, r)
	if err == nil {
		r.Checksum = recordChecksum(key, b[start:], r.Payload)
		b, err = appendTail(b, r.Checksum, len(r.Payload))
	}
	if err != nil {
		return nil, fmt.Errorf("store: encode record %q: %w", key, err)
	}
	return append(b, r.Payload...), nil
}

// keyBytes is key as bytes, without a copy, for callers that only read
// it (the checksum; bbolt's Put, which clones the keys it keeps).
func keyBytes(key string) []byte { return unsafe.Slice(unsafe.StringData(key), len(key)) }

// sameIndexed reports whether the record old, stored under key, is sound
// (its checksum verifies) and holds the same index values, byte for byte,
// as the record nw that replaces it: then the index entries stay as they
// are, and old need not be decoded. false means "decode and compare".
func sameIndexed(key string, old, nw []byte) bool {
	ho, err := ScanRecord(key, old, nil)
	if err != nil {
		return false
	}
	hn, err := scanLayout(nw, nil)
	return err == nil && bytes.Equal(ho.Indexed, hn.Indexed)
}
