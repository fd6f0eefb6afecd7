package store

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The CodecKubeProtobuf payload (docs/FORMAT.md section 5): what
// apimachinery's protobuf serializer writes, and kube-apiserver stores in
// etcd. It is here, not in internal/codec, because the migration from
// format version 3 writes it too.
//
//	"k8s\x00"                                   magic
//	0x0a len TypeMeta{0x0a len apiVersion, 0x12 len kind}   runtime.Unknown field 1
//	0x12 len raw                                field 2: the object's own protobuf
//	0x1a 0x00  0x22 0x00                        fields 3 and 4: contentEncoding and contentType, empty
//
// Lengths are protobuf varints.

// kubeProtobufMagic starts every CodecKubeProtobuf payload.
var kubeProtobufMagic = []byte("k8s\x00")

// kubeProtobufTrailer is the empty contentEncoding and contentType.
var kubeProtobufTrailer = []byte{0x1a, 0x00, 0x22, 0x00}

// KubeProtobufTrailerLen is the length of what follows the raw protobuf in
// a CodecKubeProtobuf payload.
const KubeProtobufTrailerLen = 4

// AppendKubeProtobufHead appends to dst what precedes the raw protobuf (of
// rawLen bytes) of an object of apiVersion and kind in a CodecKubeProtobuf
// payload. AppendKubeProtobufTrailer appends what follows it.
func AppendKubeProtobufHead(dst []byte, apiVersion, kind string, rawLen int) []byte {
	tmLen := 1 + uvarintLen(len(apiVersion)) + len(apiVersion) + 1 + uvarintLen(len(kind)) + len(kind)
	dst = append(dst, kubeProtobufMagic...)
	dst = append(dst, 0x0a)
	dst = binary.AppendUvarint(dst, uint64(tmLen))
	dst = append(dst, 0x0a)
	dst = binary.AppendUvarint(dst, uint64(len(apiVersion)))
	dst = append(dst, apiVersion...)
	dst = append(dst, 0x12)
	dst = binary.AppendUvarint(dst, uint64(len(kind)))
	dst = append(dst, kind...)
	dst = append(dst, 0x12)
	return binary.AppendUvarint(dst, uint64(rawLen))
}

// AppendKubeProtobufTrailer appends what follows the raw protobuf in a
// CodecKubeProtobuf payload.
func AppendKubeProtobufTrailer(dst []byte) []byte { return append(dst, kubeProtobufTrailer...) }

// WrapKubeProtobuf returns the CodecKubeProtobuf payload of raw, the raw
// protobuf of an object of apiVersion and kind.
func WrapKubeProtobuf(apiVersion, kind string, raw []byte) []byte {
	b := AppendKubeProtobufHead(make([]byte, 0, len(raw)+64+len(apiVersion)+len(kind)), apiVersion, kind, len(raw))
	b = append(b, raw...)
	return AppendKubeProtobufTrailer(b)
}

func uvarintLen(n int) int {
	l := 1
	for ; n >= 0x80; n >>= 7 {
		l++
	}
	return l
}

// errKubeProtobuf is the cause of a payload SplitKubeProtobuf rejects.
var errKubeProtobuf = errors.New("not a kube-protobuf payload")

// SplitKubeProtobuf reads a CodecKubeProtobuf payload: the apiVersion and
// kind it says, and the object's raw protobuf, as views into p. Fields may
// come in any order; contentEncoding and contentType must be empty (the
// raw bytes are the object itself); anything else is an error.
func SplitKubeProtobuf(p []byte) (apiVersion, kind, raw []byte, err error) {
	if len(p) < len(kubeProtobufMagic) || string(p[:len(kubeProtobufMagic)]) != string(kubeProtobufMagic) {
		return nil, nil, nil, fmt.Errorf("%w: no magic", errKubeProtobuf)
	}
	var haveRaw bool
	err = eachBytesField(p[len(kubeProtobufMagic):], func(field uint64, v []byte) error {
		switch field {
		case 1:
			return eachBytesField(v, func(f uint64, s []byte) error {
				switch f {
				case 1:
					apiVersion = s
				case 2:
					kind = s
				default:
					return fmt.Errorf("%w: TypeMeta field %d", errKubeProtobuf, f)
				}
				return nil
			})
		case 2:
			raw, haveRaw = v, true
		case 3, 4:
			if len(v) != 0 {
				return fmt.Errorf("%w: content encoding or type %q", errKubeProtobuf, v)
			}
		default:
			return fmt.Errorf("%w: field %d", errKubeProtobuf, field)
		}
		return nil
	})
	if err == nil && !haveRaw {
		err = fmt.Errorf("%w: no object", errKubeProtobuf)
	}
	if err != nil {
		return nil, nil, nil, err
	}
	return apiVersion, kind, raw, nil
}

// eachBytesField calls fn with every field of the protobuf message b,
// which must all be length-delimited (wire type 2).
func eachBytesField(b []byte, fn func(field uint64, v []byte) error) error {
	for len(b) > 0 {
		tag, n := binary.Uvarint(b)
		if n <= 0 || tag&7 != 2 || tag>>3 == 0 {
			return fmt.Errorf("%w: bad tag", errKubeProtobuf)
		}
		b = b[n:]
		l, n := binary.Uvarint(b)
		if n <= 0 || l > uint64(len(b)-n) {
			return fmt.Errorf("%w: bad length", errKubeProtobuf)
		}
		v := b[n : n+int(l) : n+int(l)]
		b = b[n+int(l):]
		if err := fn(tag>>3, v); err != nil {
			return err
		}
	}
	return nil
}
