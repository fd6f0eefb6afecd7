package store

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"sort"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// Codec names how a Record's payload is encoded. The values are part of the
// format; never renumber them.
type Codec uint8

const (
	// CodecUnknown is the zero value and never valid on disk.
	CodecUnknown Codec = 0
	// CodecProtobuf is a typed built-in object in apimachinery's raw protobuf
	// encoding (no runtime.Unknown wrapper).
	CodecProtobuf Codec = 1
	// CodecJSON is an object (typed or unstructured) in apimachinery's JSON
	// encoding.
	CodecJSON Codec = 2
)

// String implements fmt.Stringer.
func (c Codec) String() string {
	switch c {
	case CodecProtobuf:
		return "protobuf"
	case CodecJSON:
		return "json"
	default:
		return fmt.Sprintf("codec(%d)", uint8(c))
	}
}

// IndexValues are the values one object has in one index.
type IndexValues struct {
	//lint:ignore U1000 the msgpack encoder reads this field's tag.
	_msgpack struct{} `msgpack:",as_array"`
	Index    string
	Values   []string
}

// Record is the envelope stored for each object, msgpack-encoded as an array
// in this field order (docs/FORMAT.md):
//
//	0 UID              string
//	1 ResourceVersion  string
//	2 Codec            uint8
//	3 KeyID            string   encryption key id; "" means plaintext
//	4 APIVersion       string   the object's TypeMeta, when it had one
//	5 Kind             string
//	6 Indexed          [][Index, [Values...]]  sorted by index name
//	7 Checksum         uint32   CRC-32C of Payload as stored
//	8 Payload          bytes
//
// Indexed lets the store keep index buckets in step (remove an object's old
// entries) without decoding the payload, and lets Check verify them.
type Record struct {
	//lint:ignore U1000 the msgpack encoder reads this field's tag.
	_msgpack        struct{} `msgpack:",as_array"`
	UID             string
	ResourceVersion string
	Codec           Codec
	KeyID           string
	APIVersion      string
	Kind            string
	Indexed         []IndexValues
	Checksum        uint32
	Payload         []byte
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// PayloadChecksum returns the checksum stored in Record.Checksum.
func PayloadChecksum(payload []byte) uint32 { return crc32.Checksum(payload, castagnoli) }

// Values returns the object's values in index, or nil.
func (r *Record) Values(index string) []string {
	for i := range r.Indexed {
		if r.Indexed[i].Index == index {
			return r.Indexed[i].Values
		}
	}
	return nil
}

// SetIndexed replaces r.Indexed with the given map, sorted by index name and
// with each value list deduplicated, so that equal inputs encode equally.
func (r *Record) SetIndexed(m map[string][]string) {
	r.Indexed = r.Indexed[:0]
	for name, vals := range m {
		if len(vals) == 0 {
			continue
		}
		vs := append([]string(nil), vals...)
		sort.Strings(vs)
		out := vs[:1]
		for _, v := range vs[1:] {
			if v != out[len(out)-1] {
				out = append(out, v)
			}
		}
		r.Indexed = append(r.Indexed, IndexValues{Index: name, Values: out})
	}
	sort.Slice(r.Indexed, func(i, j int) bool { return r.Indexed[i].Index < r.Indexed[j].Index })
}

// EncodeRecord encodes r, setting its checksum from its payload.
func EncodeRecord(r *Record) ([]byte, error) {
	r.Checksum = PayloadChecksum(r.Payload)
	var buf bytes.Buffer
	buf.Grow(len(r.Payload) + 64)
	enc := msgpack.GetEncoder()
	defer msgpack.PutEncoder(enc)
	enc.Reset(&buf)
	if err := enc.Encode(r); err != nil {
		return nil, fmt.Errorf("store: encode record: %w", err)
	}
	return buf.Bytes(), nil
}

// DecodeRecord decodes and verifies a record. b is not retained. Damage is
// reported as an error wrapping ErrCorrupt, never a panic.
func DecodeRecord(b []byte) (*Record, error) {
	var r Record
	if err := checkMsgpack(b); err != nil {
		return nil, fmt.Errorf("%w: record: %v", ErrCorrupt, err)
	}
	if err := msgpack.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%w: record: %v", ErrCorrupt, err)
	}
	if r.Codec == CodecUnknown {
		return nil, fmt.Errorf("%w: record: no codec", ErrCorrupt)
	}
	if got := PayloadChecksum(r.Payload); got != r.Checksum {
		return nil, fmt.Errorf("%w: record: payload checksum %08x, want %08x", ErrCorrupt, got, r.Checksum)
	}
	return &r, nil
}

// State is an informer's state record, msgpack-encoded as a map (so fields
// can be added within a format version; readers ignore unknown ones). It is
// written in the same transaction as the objects it describes: after any
// crash, the objects on disk are exactly the state as of ResourceVersion.
type State struct {
	// ResourceVersion is the resourceVersion of the last event (object,
	// bookmark or list) whose effect is on disk. "" means nothing synced.
	ResourceVersion string `msgpack:"rv,omitempty"`
	// Synced is true once a complete list (from the server, or a resumed
	// warm start) has been committed: only then may the file be resumed.
	Synced bool `msgpack:"synced,omitempty"`
	// ClusterID identifies the cluster the objects came from.
	ClusterID string `msgpack:"cluster,omitempty"`
	// Resource names what the informer lists, e.g. "/v1, Resource=pods".
	Resource string `msgpack:"resource,omitempty"`
	// Kind is the group, version and kind of the informer's objects as
	// schema.GroupVersionKind.String() writes it ("/v1, Kind=Pod"), set by
	// the indexer from its codec; "" when unknown (unstructured). It lets
	// tools (cmd/inspect) decode typed payloads, which carry no TypeMeta.
	// Not part of the identity.
	Kind string `msgpack:"kind,omitempty"`
	// ListOptions is a fingerprint of the list options (selectors).
	ListOptions string `msgpack:"listopts,omitempty"`
	// Transform is a fingerprint of the transform applied before storage.
	Transform string `msgpack:"transform,omitempty"`
	// Indexes are the names of the index buckets, sorted.
	Indexes []string `msgpack:"indexes,omitempty"`
	// Objects is the number of records in the objects bucket.
	Objects int64 `msgpack:"objects,omitempty"`
	// Created is when the informer's bucket was first written.
	Created time.Time `msgpack:"created,omitempty"`
	// LastCommit is when this record was last written.
	LastCommit time.Time `msgpack:"lastcommit,omitempty"`
	// LastSync is when the informer last completed a list or resume.
	LastSync time.Time `msgpack:"lastsync,omitempty"`
}

// EncodeState encodes s.
func EncodeState(s *State) ([]byte, error) {
	b, err := msgpack.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("store: encode state: %w", err)
	}
	return b, nil
}

// DecodeState decodes a state record; damage wraps ErrCorrupt.
func DecodeState(b []byte) (*State, error) {
	var s State
	if err := checkMsgpack(b); err != nil {
		return nil, fmt.Errorf("%w: state record: %v", ErrCorrupt, err)
	}
	if err := msgpack.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%w: state record: %v", ErrCorrupt, err)
	}
	return &s, nil
}
