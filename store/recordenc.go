package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"unsafe"
)

// The envelope's msgpack encoding, written by hand: byte for byte what
// vmihailenco/msgpack's Encoder writes for the same calls (EncodeArrayLen,
// EncodeString, EncodeUint8, EncodeUint32, EncodeBytesLen), without its
// io.Writer indirection. docs/FORMAT.md's examples and the tests against
// the msgpack encoder hold the two in step.

const (
	mpFixArray = 0x90
	mpArray16  = 0xdc
	mpArray32  = 0xdd
	mpFixStr   = 0xa0
	mpStr8     = 0xd9
	mpStr16    = 0xda
	mpStr32    = 0xdb
	mpUint8    = 0xcc
	mpUint32   = 0xce
	mpBin8     = 0xc4
	mpBin16    = 0xc5
	mpBin32    = 0xc6
)

// checksumLen is the encoded length of field 7 (always uint32).
const checksumLen = 5

func arrayHeadLen(n int) int {
	switch {
	case n < 16:
		return 1
	case n <= math.MaxUint16:
		return 3
	}
	return 5
}

func appendArrayHead(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, mpFixArray|byte(n))
	case n <= math.MaxUint16:
		return append(b, mpArray16, byte(n>>8), byte(n))
	}
	return binary.BigEndian.AppendUint32(append(b, mpArray32), uint32(n))
}

func strLen(s string) int {
	switch n := len(s); {
	case n < 32:
		return 1 + n
	case n < 256:
		return 2 + n
	case n <= math.MaxUint16:
		return 3 + n
	default:
		return 5 + n
	}
}

func appendStr(b []byte, s string) []byte {
	switch n := len(s); {
	case n < 32:
		b = append(b, mpFixStr|byte(n))
	case n < 256:
		b = append(b, mpStr8, byte(n))
	case n <= math.MaxUint16:
		b = append(b, mpStr16, byte(n>>8), byte(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, mpStr32), uint32(n))
	}
	return append(b, s...)
}

func binHeadLen(n int) int {
	switch {
	case n < 256:
		return 2
	case n <= math.MaxUint16:
		return 3
	}
	return 5
}

func appendBinHead(b []byte, n int) []byte {
	switch {
	case n < 256:
		return append(b, mpBin8, byte(n))
	case n <= math.MaxUint16:
		return append(b, mpBin16, byte(n>>8), byte(n))
	}
	return binary.BigEndian.AppendUint32(append(b, mpBin32), uint32(n))
}

// headLen is the length of the envelope up to field 7 (what appendHead
// writes).
func headLen(r *Record) int {
	n := arrayHeadLen(recordFields) + strLen(r.UID) + strLen(r.ResourceVersion) + 2 +
		strLen(r.KeyID) + strLen(r.APIVersion) + strLen(r.Kind) + arrayHeadLen(len(r.Indexed))
	for _, iv := range r.Indexed {
		n += arrayHeadLen(2) + strLen(iv.Index) + arrayHeadLen(len(iv.Values))
		for _, v := range iv.Values {
			n += strLen(v)
		}
	}
	return n
}

// appendHead appends the array header and fields 0 to 6.
func appendHead(b []byte, r *Record) []byte {
	b = appendArrayHead(b, recordFields)
	b = appendStr(b, r.UID)
	b = appendStr(b, r.ResourceVersion)
	b = append(b, mpUint8, byte(r.Codec))
	b = appendStr(b, r.KeyID)
	b = appendStr(b, r.APIVersion)
	b = appendStr(b, r.Kind)
	b = appendArrayHead(b, len(r.Indexed))
	for _, iv := range r.Indexed {
		b = appendArrayHead(b, 2)
		b = appendStr(b, iv.Index)
		b = appendArrayHead(b, len(iv.Values))
		for _, v := range iv.Values {
			b = appendStr(b, v)
		}
	}
	return b
}

// appendEnvelope appends the record of key: the head, the checksum and
// the payload. It sets r.Checksum.
func appendEnvelope(dst []byte, key string, r *Record) ([]byte, error) {
	if uint64(len(r.Payload)) > math.MaxUint32 {
		return nil, fmt.Errorf("store: encode record %q: payload of %d bytes", key, len(r.Payload))
	}
	start := len(dst)
	if need := headLen(r) + checksumLen + binHeadLen(len(r.Payload)) + len(r.Payload); cap(dst)-start < need {
		grown := make([]byte, start, start+need)
		copy(grown, dst)
		dst = grown
	}
	dst = appendHead(dst, r)
	r.Checksum = encodeChecksum(key, dst[start:], r.Payload)
	dst = binary.BigEndian.AppendUint32(append(dst, mpUint32), r.Checksum)
	dst = appendBinHead(dst, len(r.Payload))
	return append(dst, r.Payload...), nil
}

// keyBytes is key as bytes, without a copy: for the checksum only, which
// does not keep it.
func keyBytes(key string) []byte { return unsafe.Slice(unsafe.StringData(key), len(key)) }

// encodeChecksum is recordChecksum without copying the key.
func encodeChecksum(key string, head, payload []byte) uint32 {
	c := crc32.Update(0, castagnoli, keyBytes(key))
	c = crc32.Update(c, castagnoli, head)
	return crc32.Update(c, castagnoli, payload)
}

// recordSpans locates, in the encoding of a record, field 6 (Indexed:
// b[indexed:head]) and the end of the head (b[:head], what the checksum
// covers before the payload). It reads only the encodings appendHead
// writes; ok is false for anything else (another valid encoding, or
// damage), which the caller leaves to DecodeRecord. It verifies neither
// the checksum nor the values.
func recordSpans(b []byte) (indexed, head int, sum uint32, payload []byte, ok bool) {
	p := 0
	// need reports whether n more bytes follow p.
	need := func(n int) bool { return n >= 0 && len(b)-p >= n }
	arrayLen := func() (int, bool) {
		if !need(1) {
			return 0, false
		}
		c := b[p]
		switch {
		case c&0xf0 == mpFixArray:
			p++
			return int(c & 0x0f), true
		case c == mpArray16 && need(3):
			n := int(binary.BigEndian.Uint16(b[p+1:]))
			p += 3
			return n, true
		case c == mpArray32 && need(5):
			n := int(binary.BigEndian.Uint32(b[p+1:]))
			p += 5
			return n, true
		}
		return 0, false
	}
	skipStr := func() bool {
		if !need(1) {
			return false
		}
		var n int
		switch c := b[p]; {
		case c&0xe0 == mpFixStr:
			n, p = int(c&0x1f), p+1
		case c == mpStr8 && need(2):
			n, p = int(b[p+1]), p+2
		case c == mpStr16 && need(3):
			n, p = int(binary.BigEndian.Uint16(b[p+1:])), p+3
		case c == mpStr32 && need(5):
			n, p = int(binary.BigEndian.Uint32(b[p+1:])), p+5
		default:
			return false
		}
		if !need(n) {
			return false
		}
		p += n
		return true
	}
	if n, ok := arrayLen(); !ok || n != recordFields {
		return 0, 0, 0, nil, false
	}
	if !skipStr() || !skipStr() || !need(2) || b[p] != mpUint8 || b[p+1] == byte(CodecUnknown) {
		return 0, 0, 0, nil, false
	}
	p += 2
	if !skipStr() || !skipStr() || !skipStr() {
		return 0, 0, 0, nil, false
	}
	indexed = p
	n, ok := arrayLen()
	if !ok {
		return 0, 0, 0, nil, false
	}
	for range n {
		if m, ok := arrayLen(); !ok || m != 2 || !skipStr() {
			return 0, 0, 0, nil, false
		}
		m, ok := arrayLen()
		if !ok {
			return 0, 0, 0, nil, false
		}
		for range m {
			if !skipStr() {
				return 0, 0, 0, nil, false
			}
		}
	}
	head = p
	if !need(checksumLen) || b[p] != mpUint32 {
		return 0, 0, 0, nil, false
	}
	sum = binary.BigEndian.Uint32(b[p+1:])
	p += checksumLen
	var plen int
	switch {
	case need(2) && b[p] == mpBin8:
		plen, p = int(b[p+1]), p+2
	case need(3) && b[p] == mpBin16:
		plen, p = int(binary.BigEndian.Uint16(b[p+1:])), p+3
	case need(5) && b[p] == mpBin32:
		plen, p = int(binary.BigEndian.Uint32(b[p+1:])), p+5
	default:
		return 0, 0, 0, nil, false
	}
	if plen != len(b)-p {
		return 0, 0, 0, nil, false
	}
	return indexed, head, sum, b[p:], true
}

// sameIndexed reports whether the record old, stored under key, is sound
// (its checksum verifies) and holds the same index values, byte for byte,
// as the record nw that replaces it: then the index entries stay as they
// are, and old need not be decoded. false means "decode and compare".
func sameIndexed(key string, old, nw []byte) bool {
	oi, oh, sum, payload, ok := recordSpans(old)
	if !ok {
		return false
	}
	ni, nh, _, _, ok := recordSpans(nw)
	if !ok || !bytes.Equal(old[oi:oh], nw[ni:nh]) {
		return false
	}
	return encodeChecksum(key, old[:oh], payload) == sum
}
