package store

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"strings"
	"time"
)

// FormatVersion is the on-disk format version this build writes and reads.
// docs/FORMAT.md documents it. Any change to the layout below, to the meta
// record, to the record envelope or to the state record bumps it, with a
// migration in migrate.go. Version 2 made the record checksum cover the
// key and the envelope, not only the payload; version 3 added the envelope
// snapshot ("snapshot" in an informer's bucket, snapshot.go), which every
// writer must delete when it changes the informer.
const FormatVersion uint32 = 3

// The bucket layout (since format version 3; versions 1 and 2 had no
// snapshot):
//
//	(root)
//	├── "meta"                          bucket
//	│   └── "header"   -> meta record (24 bytes, below)
//	└── "informers"                     bucket
//	    └── <informer name>             bucket, one per informer
//	        ├── "state"   -> State record (msgpack map)
//	        ├── "snapshot" -> envelope snapshot (version 3, optional)
//	        ├── "objects"                bucket
//	        │   └── <object key>  -> Record envelope (msgpack array)
//	        └── "indexes"                bucket
//	            └── <index name>         bucket, one per index
//	                └── <index value> 0x00 <object key> -> (empty)
//
// An object key is what the informer's KeyFunc returns ("namespace/name" or
// "name"); it never contains a NUL byte (Put rejects one). An index value may
// contain anything, so an index entry key is split at its last NUL byte.
var (
	bucketMeta      = []byte("meta")
	bucketInformers = []byte("informers")
	bucketObjects   = []byte("objects")
	bucketIndexes   = []byte("indexes")

	keyHeader = []byte("header")
	keyState  = []byte("state")
)

// The meta record, big-endian, validated in this order on open: magic, then
// version, then checksum (like bbolt's Meta.Validate).
//
//	offset size field
//	0      4    magic     0x42494E46 ("BINF")
//	4      4    version   FormatVersion
//	8      8    created   Unix time in nanoseconds
//	16     8    checksum  FNV-1a 64 of bytes [0, 16)
const metaMagic uint32 = 0x42494E46

const metaRecordSize = 24

// header is the decoded meta record.
type header struct {
	Version uint32
	Created time.Time
}

func encodeHeader(h header) []byte {
	b := make([]byte, metaRecordSize)
	binary.BigEndian.PutUint32(b[0:4], metaMagic)
	binary.BigEndian.PutUint32(b[4:8], h.Version)
	binary.BigEndian.PutUint64(b[8:16], uint64(h.Created.UnixNano()))
	binary.BigEndian.PutUint64(b[16:24], headerChecksum(b[:16]))
	return b
}

func headerChecksum(b []byte) uint64 {
	h := fnv.New64a()
	_, _ = h.Write(b)
	return h.Sum64()
}

// decodeHeader validates magic, then version, then checksum. A bad magic is
// ErrForeign; a version this build neither reads nor migrates is a
// *VersionError; a bad checksum is ErrCorrupt. An older version that Open
// migrates is returned in the header.
func decodeHeader(path string, b []byte) (header, error) {
	if len(b) < 8 || binary.BigEndian.Uint32(b[0:4]) != metaMagic {
		return header{}, fmt.Errorf("%w: %s: bad meta magic", ErrForeign, path)
	}
	v := binary.BigEndian.Uint32(b[4:8])
	if v < minMigratable || v > FormatVersion {
		return header{}, &VersionError{Path: path, Found: v, Supported: FormatVersion}
	}
	if len(b) != metaRecordSize {
		return header{}, corruptf("%s: meta record is %d bytes, want %d", path, len(b), metaRecordSize)
	}
	if got, want := binary.BigEndian.Uint64(b[16:24]), headerChecksum(b[:16]); got != want {
		return header{}, corruptf("%s: meta checksum %016x, want %016x", path, got, want)
	}
	return header{Version: v, Created: time.Unix(0, int64(binary.BigEndian.Uint64(b[8:16]))).UTC()}, nil
}

// maxKeySize bounds object keys and index values (bbolt's limit is 32 KiB).
const maxKeySize = 16 << 10

func validKey(key string) error {
	if key == "" || len(key) > maxKeySize || strings.IndexByte(key, 0) >= 0 {
		return fmt.Errorf("%w: %q", ErrInvalidKey, key)
	}
	return nil
}

// ValidateKey returns an error wrapping ErrInvalidKey if key cannot be
// stored as an object key. Sources check it so that one bad key never
// fails a whole group commit over and over.
func ValidateKey(key string) error { return validKey(key) }

// ValidateName returns an error wrapping ErrInvalidName if name cannot be
// an informer or index name.
func ValidateName(name string) error { return validName(name) }

// ValidateIndexEntry returns an error wrapping ErrInvalidKey if value of
// key does not fit in an index bucket's key.
func ValidateIndexEntry(value, key string) error {
	if len(value) > maxKeySize || len(value)+1+len(key) > maxIndexEntrySize {
		return fmt.Errorf("%w: index value of %d bytes for key %q is too long", ErrInvalidKey, len(value), key)
	}
	return nil
}

// maxIndexEntrySize is bbolt's key size limit.
const maxIndexEntrySize = 32768

func validName(name string) error {
	if name == "" || len(name) > 1024 || strings.IndexByte(name, 0) >= 0 {
		return fmt.Errorf("%w: %q", ErrInvalidName, name)
	}
	return nil
}

// indexEntryKey encodes <index value> 0x00 <object key>.
func indexEntryKey(value, key string) []byte {
	b := make([]byte, 0, len(value)+1+len(key))
	b = append(b, value...)
	b = append(b, 0)
	return append(b, key...)
}

// indexValuePrefix is the prefix of every entry of value.
func indexValuePrefix(value string) []byte {
	b := make([]byte, 0, len(value)+1)
	b = append(b, value...)
	return append(b, 0)
}

// splitIndexEntryKey splits an index entry key at its last NUL byte.
func splitIndexEntryKey(k []byte) (value, key string, ok bool) {
	i := bytes.LastIndexByte(k, 0)
	if i < 0 || i == len(k)-1 {
		return "", "", false
	}
	return string(k[:i]), string(k[i+1:]), true
}
