package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
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
// writer must delete when it changes the informer; version 4 stores every
// key and index value (escaped ones under a hash, the real one in the
// record), adds the envelope's Key and Type fields, the self-describing
// protobuf codec and the state's types; version 5 adds the deletes kept for
// checkpoints ("deletes" in an informer's bucket) and the checkpoints
// ("checkpoints" at the root), which a version 4 writer would not keep in
// step, and the window of recent changes ("window" in an informer's
// bucket, window.go), which every writer of the informer's objects must
// append to or clear.
const FormatVersion uint32 = 5

// The bucket layout (since format version 3; versions 1 and 2 had no
// snapshot):
//
//	(root)
//	├── "meta"                          bucket
//	│   └── "header"   -> meta record (24 bytes, below)
//	├── "checkpoints"                   bucket (version 5, optional)
//	│   └── <checkpoint name> -> Checkpoint record (msgpack map)
//	└── "informers"                     bucket
//	    └── <informer name>             bucket, one per informer
//	        ├── "state"   -> State record (msgpack map)
//	        ├── "snapshot" -> envelope snapshot (version 3, optional)
//	        ├── "objects"                bucket
//	        │   └── <bucket key>  -> Record envelope (msgpack array)
//	        ├── "deletes"                bucket (version 5, optional)
//	        │   └── <bucket key>  -> Record envelope of the object's last
//	        │                        state, at the delete's resourceVersion
//	        ├── "window"                 bucket (version 5, optional)
//	        │   └── <sequence number, 8 bytes big-endian> -> window event
//	        │                        (msgpack array, window.go)
//	        └── "indexes"                bucket
//	            └── <index name>         bucket, one per index
//	                └── <entry value> 0x00 <bucket key> -> (empty)
//
// An object key is what the informer's KeyFunc returns ("namespace/name" or
// "name"), and any string is stored (format version 4). Its bucket key is
// the key itself when bbolt can hold it and an index entry can embed it: 1
// to maxRawKey bytes, no NUL byte, and not starting with escapeMark.
// Any other key (empty, too long, with a NUL, or starting with the mark)
// is escaped: its bucket key is escapeMark followed by the 64 hex digits of
// its SHA-256, and its record holds the real key (field Key). A raw key
// never starts with the mark, so the two forms never collide. An escaped
// bucket key has no NUL either, so an index entry key is split at its last
// NUL byte, and an index value may contain anything. Its entry value is
// the value itself up to maxRawValue bytes when it does not start with the
// mark, else the mark and the hex SHA-256 of the value: the record's
// Indexed field keeps the exact value.
var (
	bucketMeta      = []byte("meta")
	bucketInformers = []byte("informers")
	bucketObjects   = []byte("objects")
	bucketIndexes   = []byte("indexes")
	// bucketDeletes holds, per informer, the last state of each object
	// deleted since the oldest checkpoint's position (version 5).
	bucketDeletes = []byte("deletes")
	// bucketCheckpoints holds the checkpoints by name (version 5).
	bucketCheckpoints = []byte("checkpoints")

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

// maxRawKey is the longest object key stored as its own bucket key.
const maxRawKey = 16 << 10

// maxRawValue is the longest index value stored as itself in an index
// entry: an entry (value, NUL, bucket key) is then at most bbolt's key
// limit of 32 KiB.
const maxRawValue = maxRawKey - 1

// escapeMark starts every escaped bucket key and entry value, and no raw
// one (0xff is never part of UTF-8).
const escapeMark = 0xff

// escapedLen is the length of an escaped key or value.
const escapedLen = 1 + 2*sha256.Size

// keyEscaped reports whether key is stored under a hash.
func keyEscaped(key string) bool {
	return key == "" || len(key) > maxRawKey || key[0] == escapeMark || strings.IndexByte(key, 0) >= 0
}

// valueEscaped reports whether an index value is stored as a hash.
func valueEscaped(v string) bool {
	return len(v) > maxRawValue || (v != "" && v[0] == escapeMark)
}

// escape returns the escaped form of s: the mark and s's hex SHA-256.
func escape(s string) []byte {
	sum := sha256.Sum256(keyBytes(s))
	b := make([]byte, escapedLen)
	b[0] = escapeMark
	hex.Encode(b[1:], sum[:])
	return b
}

// isEscaped reports whether a bucket key or entry value is in the escaped
// form.
func isEscaped(b []byte) bool { return len(b) > 0 && b[0] == escapeMark }

// bucketKey is key's key in the objects bucket. A raw key is lent without
// a copy (bbolt's Put clones the keys it keeps); do not modify it.
func bucketKey(key string) []byte {
	if keyEscaped(key) {
		return escape(key)
	}
	return keyBytes(key)
}

// entryValue is an index value's form in its entries.
func entryValue(v string) []byte {
	if valueEscaped(v) {
		return escape(v)
	}
	return keyBytes(v)
}

// compareBucketKeys orders two object keys as their bucket keys are
// ordered in the file.
func compareBucketKeys(a, b string) int { return bytes.Compare(bucketKey(a), bucketKey(b)) }

// ValidateName returns an error wrapping ErrInvalidName if name cannot be
// an informer or index name.
func ValidateName(name string) error { return validName(name) }

func validName(name string) error {
	if name == "" || len(name) > 1024 || strings.IndexByte(name, 0) >= 0 {
		return fmt.Errorf("%w: %q", ErrInvalidName, name)
	}
	return nil
}

// indexEntryKey encodes <entry value> 0x00 <bucket key> for value of key.
func indexEntryKey(value, key string) []byte {
	v, k := entryValue(value), bucketKey(key)
	b := make([]byte, 0, len(v)+1+len(k))
	b = append(b, v...)
	b = append(b, 0)
	return append(b, k...)
}

// indexValuePrefix is the prefix of every entry of value.
func indexValuePrefix(value string) []byte {
	v := entryValue(value)
	b := make([]byte, 0, len(v)+1)
	b = append(b, v...)
	return append(b, 0)
}

// splitIndexEntryKey splits an index entry key at its last NUL byte into
// the entry value and the bucket key (both as stored: escaped ones are
// hashes).
func splitIndexEntryKey(k []byte) (value, bkey []byte, ok bool) {
	i := bytes.LastIndexByte(k, 0)
	if i < 0 || i == len(k)-1 {
		return nil, nil, false
	}
	return k[:i], k[i+1:], true
}
