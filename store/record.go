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
	// encoding (no runtime.Unknown wrapper), so the payload does not say its
	// kind. Format version 4 writes CodecKubeProtobuf instead; this codec
	// remains in records migrated from version 3 that could not be
	// rewritten (sealed payloads, or an informer of unknown kind).
	CodecProtobuf Codec = 1
	// CodecJSON is an object (typed or unstructured) in apimachinery's JSON
	// encoding. Since format version 4 a typed object's JSON carries its
	// apiVersion and kind.
	CodecJSON Codec = 2
	// CodecKubeProtobuf is a typed object as apimachinery's protobuf
	// serializer writes it (and kube-apiserver stores it in etcd): the
	// magic "k8s\x00", then a runtime.Unknown holding the object's
	// apiVersion, kind and raw protobuf, so that a reader can check the
	// payload's kind. Format version 4.
	CodecKubeProtobuf Codec = 3
)

// String implements fmt.Stringer.
func (c Codec) String() string {
	switch c {
	case CodecProtobuf:
		return "protobuf"
	case CodecJSON:
		return "json"
	case CodecKubeProtobuf:
		return "kube-protobuf"
	default:
		return fmt.Sprintf("codec(%d)", uint8(c))
	}
}

// IndexValues are the values one object has in one index.
type IndexValues struct {
	Index  string
	Values []string
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
//	7 Key              string   the object key when its bucket key is escaped, else ""
//	8 Type             string   the payload's type when not the informer's, else ""
//	9 Checksum         uint32   CRC-32C of the key, fields 0-8 and Payload
//	10 Payload         bytes
//
// Indexed lets the store keep index buckets in step (remove an object's old
// entries) without decoding the payload, and lets Check verify them. The
// checksum covers the key the record is stored under and every field but
// itself, so a record that checks can be trusted without decoding its
// payload (a warm start reads only envelopes). Field 7 is written by the
// store from the key (the encoders take it as an argument); records of
// format versions 1 to 3 have 9 fields (no Key and Type).
type Record struct {
	UID             string
	ResourceVersion string
	Codec           Codec
	KeyID           string
	APIVersion      string
	Kind            string
	Indexed         []IndexValues
	// Type names the payload's Go type when it is not the informer's (the
	// state record's Kind): a schema.GroupVersionKind.String() ("meta.k8s.io/v1,
	// Kind=PartialObjectMetadata"), or TypeUnstructured. It must be one of
	// the state record's Types.
	Type     string
	Checksum uint32
	Payload  []byte
}

// TypeUnstructured is the Record.Type of an *unstructured.Unstructured
// object in an informer of a typed example.
const TypeUnstructured = "unstructured"

// recordFields is the length of the envelope array; legacyRecordFields
// that of format versions 1 to 3.
const (
	recordFields       = 11
	legacyRecordFields = 9
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// recordChecksum is the format version 2 checksum (also 3 and 4's):
// CRC-32C of the key, of the envelope's encoding up to and excluding the
// Checksum field (head),
// and of the payload. The key is read in place, not copied (it runs for
// every record of a warm load and of a commit).
func recordChecksum(key string, head, payload []byte) uint32 {
	c := crc32.Update(0, castagnoli, keyBytes(key))
	c = crc32.Update(c, castagnoli, head)
	return crc32.Update(c, castagnoli, payload)
}

// payloadChecksum is the format version 1 checksum (payload only), read by
// the migration to version 2.
func payloadChecksum(payload []byte) uint32 { return crc32.Checksum(payload, castagnoli) }

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

// EncodeRecord encodes r as the record of key, setting r.Checksum.
func EncodeRecord(key string, r *Record) ([]byte, error) {
	return AppendRecord(nil, key, r)
}

// AppendRecord appends the encoding of r, the record of key, to dst and
// returns the extended slice, setting r.Checksum.
func AppendRecord(dst []byte, key string, r *Record) ([]byte, error) {
	return appendEnvelope(dst, key, r)
}

// DecodeRecord decodes and verifies the record stored under key. b is not
// retained. Damage (including a record stored under another key) is
// reported as an error wrapping ErrCorrupt, never a panic.
func DecodeRecord(key string, b []byte) (*Record, error) {
	r, err := ViewRecord(key, b)
	if err != nil {
		return nil, err
	}
	r.Payload = bytes.Clone(r.Payload)
	return r, nil
}

// ViewRecord is DecodeRecord without copying the payload: r.Payload points
// into b, so it is valid only as long as b is (inside a transaction, for a
// value read from the file).
func ViewRecord(key string, b []byte) (*Record, error) {
	return decodeRecord(key, b, FormatVersion)
}

// decodeRecord decodes a record of the given format version (version 1's
// checksum covers the payload only), with the in-place scanner, copying
// the fields out of b except the payload.
func decodeRecord(key string, b []byte, version uint32) (*Record, error) {
	var r Record
	h, err := scanRecord(key, b, version, func(name, value []byte) {
		if n := len(r.Indexed); n == 0 || r.Indexed[n-1].Index != string(name) {
			r.Indexed = append(r.Indexed, IndexValues{Index: string(name)})
		}
		last := &r.Indexed[len(r.Indexed)-1]
		last.Values = append(last.Values, string(value))
	})
	if err != nil {
		return nil, err
	}
	r.UID, r.ResourceVersion = string(h.UID), string(h.ResourceVersion)
	r.Codec, r.KeyID, r.APIVersion, r.Kind = h.Codec, string(h.KeyID), string(h.APIVersion), string(h.Kind)
	r.Type = string(h.Type)
	r.Checksum, r.Payload = h.Checksum, h.Payload
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
	// Types are the Record.Type values the informer's records may carry
	// besides "" (objects of other Go types than its example, from a
	// transform), sorted; a record of another type is not the informer's.
	Types []string `msgpack:"types,omitempty"`
	// Objects is the number of records in the objects bucket.
	Objects int64 `msgpack:"objects,omitempty"`
	// Created is when the informer's bucket was first written.
	Created time.Time `msgpack:"created,omitempty"`
	// LastCommit is when this record was last written.
	LastCommit time.Time `msgpack:"lastcommit,omitempty"`
	// LastSync is when the informer last completed a list or resume.
	LastSync time.Time `msgpack:"lastsync,omitempty"`
	// DeletesFrom is the resourceVersion from which every delete of the
	// informer is kept in its deletes bucket (format version 5), "" when
	// none are: a checkpoint behind it cannot be served from them.
	DeletesFrom string `msgpack:"deletesfrom,omitempty"`
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
