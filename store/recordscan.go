package store

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"sync"

	"github.com/vmihailenco/msgpack/v5"
)

// RecordHead is a record's envelope as views into its encoding: the byte
// slices alias the encoded record and are valid only as long as it is
// (inside the transaction, for a record read from the file).
type RecordHead struct {
	UID, ResourceVersion, KeyID, APIVersion, Kind []byte
	// Key is field 7: the object key when its bucket key is escaped, else
	// empty (always empty in records of format versions 1 to 3).
	Key []byte
	// Type is field 8 (Record.Type).
	Type  []byte
	Codec Codec
	// Indexed is field 6 as encoded (the index values, for comparing two
	// records' without decoding them).
	Indexed  []byte
	Checksum uint32
	Payload  []byte
}

// ScanRecord verifies the record stored under key, like DecodeRecord, but
// copies nothing and allocates nothing: it returns the envelope as views
// and calls index (when not nil) with every index value, in order, as
// views too. When it returns an error, what index was given must be
// discarded. A warm start reads every record this way.
func ScanRecord(key string, b []byte, index func(name, value []byte)) (RecordHead, error) {
	return scanRecord(key, b, FormatVersion, index)
}

// recordScanner reads msgpack values in place from an encoded record.
type recordScanner struct {
	b   []byte
	rd  bytes.Reader
	dec *msgpack.Decoder
}

var scanners = sync.Pool{New: func() any { return &recordScanner{dec: msgpack.NewDecoder(nil)} }}

func (s *recordScanner) pos() int { return len(s.b) - s.rd.Len() }

// view reads a str or bin value (nil reads as empty) without copying it.
func (s *recordScanner) view() ([]byte, error) {
	n, err := s.dec.DecodeBytesLen()
	if err != nil || n <= 0 {
		return nil, err
	}
	if n > s.rd.Len() {
		return nil, io.ErrUnexpectedEOF
	}
	p := s.pos()
	if _, err := s.rd.Seek(int64(n), io.SeekCurrent); err != nil {
		return nil, err
	}
	return s.b[p : p+n : p+n], nil
}

func (s *recordScanner) uint(max uint64, what string) (uint64, error) {
	n, err := s.dec.DecodeUint64()
	if err == nil && n > max {
		err = fmt.Errorf("%s %d out of range", what, n)
	}
	return n, err
}

// scanRecord decodes a record of the given format version in place:
// version 1's checksum covers the payload only.
func scanRecord(key string, b []byte, version uint32, index func(name, value []byte)) (RecordHead, error) {
	h, head, err := scan(b, version, index)
	if err != nil {
		return RecordHead{}, err
	}
	want := recordChecksum(key, b[:head], h.Payload)
	if version == 1 {
		want = payloadChecksum(h.Payload)
	}
	if want != h.Checksum {
		return RecordHead{}, fmt.Errorf("%w: record: checksum %08x, want %08x (damaged, or stored under another key)", ErrCorrupt, h.Checksum, want)
	}
	// The checksum covers key and field 7 both: they agree unless the
	// writer was wrong.
	// (the empty key is escaped, and its field 7 is empty).
	if version >= 4 && (keyEscaped(key) && string(h.Key) != key || !keyEscaped(key) && len(h.Key) != 0) {
		return RecordHead{}, fmt.Errorf("%w: record of key %q names key %q", ErrCorrupt, key, h.Key)
	}
	return h, nil
}

// scanLayout reads a record's fields in place without verifying its
// checksum: for a record just encoded, or to read the key of a record
// under an escaped bucket key before verifying it.
func scanLayout(b []byte, index func(name, value []byte)) (RecordHead, error) {
	h, _, err := scan(b, FormatVersion, index)
	return h, err
}

// recordKey returns the object key of the record raw stored under the
// bucket key bkey: bkey itself, or for an escaped one the record's field
// 7, which must hash to bkey. It does not verify the checksum.
func recordKey(bkey, raw []byte) (string, error) {
	if !isEscaped(bkey) {
		return string(bkey), nil
	}
	h, err := scanLayout(raw, nil)
	if err != nil {
		return "", err
	}
	key := string(h.Key)
	if !keyEscaped(key) || !bytes.Equal(escape(key), bkey) {
		return "", fmt.Errorf("%w: record under escaped key %q holds key %q, which is not its own", ErrCorrupt, bkey, key)
	}
	return key, nil
}

// scan reads a record's fields in place and returns where the checksum
// field starts (the end of what the checksum covers before the payload).
// A record of format version 4 has 11 fields, an older one 9.
func scan(b []byte, version uint32, index func(name, value []byte)) (h RecordHead, head int, err error) {
	// No checkMsgpack walk first (DecodeRecord's guard): the scanner
	// allocates nothing whatever a damaged length says, and bounds-checks
	// every length against the bytes left.
	s := scanners.Get().(*recordScanner)
	defer func() {
		s.b = nil
		s.rd.Reset(nil)
		scanners.Put(s)
	}()
	s.b = b
	s.rd.Reset(b)
	s.dec.Reset(&s.rd)
	var indexed, indexedEnd int
	err = func() error {
		n, err := s.dec.DecodeArrayLen()
		if err != nil {
			return err
		}
		want := recordFields
		if version < 4 {
			want = legacyRecordFields
		}
		if n != want {
			return fmt.Errorf("envelope has %d fields, want %d", n, want)
		}
		if h.UID, err = s.view(); err != nil {
			return err
		}
		if h.ResourceVersion, err = s.view(); err != nil {
			return err
		}
		c, err := s.uint(math.MaxUint8, "codec")
		if err != nil {
			return err
		}
		h.Codec = Codec(c)
		for _, p := range []*[]byte{&h.KeyID, &h.APIVersion, &h.Kind} {
			if *p, err = s.view(); err != nil {
				return err
			}
		}
		indexed = s.pos()
		entries, err := s.dec.DecodeArrayLen()
		if err != nil {
			return err
		}
		for i := 0; i < entries; i++ {
			if m, err := s.dec.DecodeArrayLen(); err != nil || m != 2 {
				return fmt.Errorf("index entry %d: %d fields, %v", i, m, err)
			}
			name, err := s.view()
			if err != nil {
				return err
			}
			vals, err := s.dec.DecodeArrayLen()
			if err != nil {
				return err
			}
			for j := 0; j < vals; j++ {
				v, err := s.view()
				if err != nil {
					return err
				}
				if index != nil {
					index(name, v)
				}
			}
		}
		indexedEnd = s.pos()
		if want == recordFields {
			if h.Key, err = s.view(); err != nil {
				return err
			}
			if h.Type, err = s.view(); err != nil {
				return err
			}
		}
		head = s.pos()
		sum, err := s.uint(math.MaxUint32, "checksum")
		if err != nil {
			return err
		}
		h.Checksum = uint32(sum)
		n, err = s.dec.DecodeBytesLen()
		if err == nil && (n < 0 || n != s.rd.Len()) {
			err = fmt.Errorf("payload of %d bytes, %d follow", n, s.rd.Len())
		}
		return err
	}()
	if err != nil {
		return RecordHead{}, 0, fmt.Errorf("%w: record: malformed envelope: %v", ErrCorrupt, err)
	}
	h.Payload = b[s.pos():len(b):len(b)]
	h.Indexed = b[indexed:indexedEnd:indexedEnd]
	if h.Codec == CodecUnknown {
		return RecordHead{}, 0, fmt.Errorf("%w: record: no codec", ErrCorrupt)
	}
	return h, head, nil
}
