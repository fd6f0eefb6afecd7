package store

import (
	"encoding/binary"
	"fmt"
	"math"
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
	r.Checksum = recordChecksum(key, dst[start:], r.Payload)
	dst = binary.BigEndian.AppendUint32(append(dst, mpUint32), r.Checksum)
	dst = appendBinHead(dst, len(r.Payload))
	return append(dst, r.Payload...), nil
}
