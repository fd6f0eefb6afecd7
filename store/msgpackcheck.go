package store

import (
	"encoding/binary"
	"errors"
)

// errMalformed is returned by checkMsgpack.
var errMalformed = errors.New("malformed msgpack")

// checkMsgpack walks one msgpack value in b and verifies that every length
// it declares fits in the bytes that follow and that nesting stays shallow.
// The msgpack decoder allocates what a header declares before reading it,
// so a damaged length would otherwise ask for gigabytes; after this check
// no allocation can exceed len(b).
func checkMsgpack(b []byte) error {
	rest, err := checkValue(b, 0)
	if err != nil {
		return err
	}
	if len(rest) != 0 {
		return errMalformed
	}
	return nil
}

func checkValue(b []byte, depth int) ([]byte, error) {
	if depth > 32 || len(b) == 0 {
		return nil, errMalformed
	}
	c := b[0]
	b = b[1:]
	skip := func(n uint64) ([]byte, error) {
		if n > uint64(len(b)) {
			return nil, errMalformed
		}
		return b[n:], nil
	}
	length := func(size int) (uint64, error) {
		if len(b) < size {
			return 0, errMalformed
		}
		var n uint64
		switch size {
		case 1:
			n = uint64(b[0])
		case 2:
			n = uint64(binary.BigEndian.Uint16(b))
		case 4:
			n = uint64(binary.BigEndian.Uint32(b))
		}
		b = b[size:]
		return n, nil
	}
	items := func(n uint64) ([]byte, error) {
		if n > uint64(len(b)) { // every item takes at least one byte
			return nil, errMalformed
		}
		var err error
		for i := uint64(0); i < n; i++ {
			if b, err = checkValue(b, depth+1); err != nil {
				return nil, err
			}
		}
		return b, nil
	}
	switch {
	case c <= 0x7f, c >= 0xe0, c == 0xc0, c == 0xc2, c == 0xc3:
		return b, nil
	case c >= 0xa0 && c <= 0xbf: // fixstr
		return skip(uint64(c & 0x1f))
	case c >= 0x90 && c <= 0x9f: // fixarray
		return items(uint64(c & 0x0f))
	case c >= 0x80 && c <= 0x8f: // fixmap
		return items(2 * uint64(c&0x0f))
	}
	switch c {
	case 0xcc, 0xd0:
		return skip(1)
	case 0xcd, 0xd1:
		return skip(2)
	case 0xca, 0xce, 0xd2:
		return skip(4)
	case 0xcb, 0xcf, 0xd3:
		return skip(8)
	case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8: // fixext 1, 2, 4, 8, 16 (+ type byte)
		return skip(1 + 1<<(c-0xd4))
	case 0xc4, 0xd9: // bin8, str8
		n, err := length(1)
		if err != nil {
			return nil, err
		}
		return skip(n)
	case 0xc5, 0xda:
		n, err := length(2)
		if err != nil {
			return nil, err
		}
		return skip(n)
	case 0xc6, 0xdb:
		n, err := length(4)
		if err != nil {
			return nil, err
		}
		return skip(n)
	case 0xc7, 0xc8, 0xc9: // ext8/16/32 (+ type byte)
		n, err := length(1 << (c - 0xc7))
		if err != nil {
			return nil, err
		}
		return skip(n + 1)
	case 0xdc, 0xde: // array16, map16
		n, err := length(2)
		if err != nil {
			return nil, err
		}
		if c == 0xde {
			n *= 2
		}
		return items(n)
	case 0xdd, 0xdf: // array32, map32
		n, err := length(4)
		if err != nil {
			return nil, err
		}
		if c == 0xdf {
			n *= 2
		}
		return items(n)
	}
	return nil, errMalformed // 0xc1 is never used
}
