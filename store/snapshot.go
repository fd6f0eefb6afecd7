package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"sort"

	bolt "go.etcd.io/bbolt"
)

// The envelope snapshot (format version 3, docs/FORMAT.md section 7a).
//
// A warm start needs every record's key, resourceVersion, UID, key id and
// index values, not its payload. Reading them from the records means
// walking every leaf page of the objects bucket and verifying every
// record's checksum: most of a warm start. When an informer closes cleanly,
// WriteSnapshot stores all of them, read from the records in the same
// write transaction, as one value ("snapshot" in the informer's bucket);
// the next start reads that value instead.
//
// The snapshot is valid exactly as long as nothing else has written the
// informer's buckets since: every transaction that does (applyBatch,
// RepairIndexes) deletes it first, in the same transaction, and a reader
// also checks that the state record is the one it was taken with.

var keySnapshot = []byte("snapshot")

// ErrNoSnapshot is returned by Tx.Snapshot when the informer has no usable
// snapshot (none was written since its last change, or it does not belong
// to the state record); the caller reads the records instead.
var ErrNoSnapshot = errors.New("no snapshot")

// Snapshot is the envelopes of every record of one informer, as the
// records held them when it was written.
type Snapshot struct {
	// Keys are the object keys in file order (of their bucket keys: raw
	// keys in byte order, then escaped ones); ResourceVersions, UIDs and
	// KeyIDs are aligned with them.
	Keys, ResourceVersions, UIDs, KeyIDs []string
	// Indexes are the index values the records hold, by index name
	// (sorted).
	Indexes []SnapshotIndex
}

// SnapshotIndex is one index of a Snapshot.
type SnapshotIndex struct {
	Name string
	// Values are the index's values (sorted), each with the positions in
	// Snapshot.Keys of the objects that have it (ascending).
	Values []SnapshotValue
}

// SnapshotValue is one index value and its objects.
type SnapshotValue struct {
	Value   string
	Objects []int32
}

// snapshotStamp ties a snapshot to the state record it was taken with.
type snapshotStamp struct {
	rv         string
	lastCommit int64
	objects    int64
}

func stampOf(st *State) snapshotStamp {
	return snapshotStamp{rv: st.ResourceVersion, lastCommit: st.LastCommit.UnixNano(), objects: st.Objects}
}

// Snapshot returns the informer's envelope snapshot. ErrNoSnapshot means
// there is none that belongs to the current state record; an error
// wrapping ErrCorrupt, a damaged one. Either way the records are the
// source of truth: the caller reads them instead.
func (t *Tx) Snapshot(informer string) (*Snapshot, error) {
	root := t.informer(informer)
	if root == nil {
		return nil, ErrNoSnapshot
	}
	raw := root.Get(keySnapshot)
	if raw == nil {
		return nil, ErrNoSnapshot
	}
	st, err := t.State(informer)
	if err != nil {
		return nil, err
	}
	if st == nil {
		return nil, ErrNoSnapshot
	}
	sn, stamp, err := decodeSnapshot(raw)
	if err != nil {
		return nil, fmt.Errorf("informer %q: %w", informer, err)
	}
	if stamp != stampOf(st) {
		return nil, fmt.Errorf("%w: informer %q: it was taken at resourceVersion %q, the state record is at %q", ErrNoSnapshot, informer, stamp.rv, st.ResourceVersion)
	}
	return sn, nil
}

// WriteSnapshot stores the envelope snapshot of informer, read from its
// records in the same write transaction, unless a valid one is there
// already. It writes nothing when a record does not scan (the next start
// reads the records and reports it) or the informer has no state record;
// a read-only DB writes nothing.
func (db *DB) WriteSnapshot(informer string) error {
	if db.readOnly {
		return nil
	}
	var have bool
	err := db.View(func(tx *Tx) error {
		_, err := tx.Snapshot(informer)
		have = err == nil
		return nil
	})
	if err != nil || have {
		return err
	}
	err = db.update(func(btx *bolt.Tx) error {
		tx := &Tx{tx: btx}
		root := tx.informer(informer)
		if root == nil {
			return nil
		}
		st, err := tx.State(informer)
		if err != nil || st == nil {
			return err
		}
		sn, err := tx.scanSnapshot(informer)
		if err != nil {
			return err
		}
		if int64(len(sn.Keys)) != st.Objects {
			return corruptf("informer %q: %d records, the state record counts %d", informer, len(sn.Keys), st.Objects)
		}
		return root.Put(keySnapshot, encodeSnapshot(sn, stampOf(st)))
	})
	if err != nil {
		return fmt.Errorf("store: snapshot of informer %q in %s: %w", informer, db.path, err)
	}
	return nil
}

// scanSnapshot builds the snapshot from the informer's records.
func (t *Tx) scanSnapshot(informer string) (*Snapshot, error) {
	b := newSnapshotBuilder()
	err := t.ForEachRaw(informer, func(key string, raw []byte) error {
		h, err := ScanRecord(key, raw, b.index)
		if err != nil {
			return fmt.Errorf("informer %q key %q: %w", informer, key, err)
		}
		b.object(key, h.ResourceVersion, h.UID, h.KeyID)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return b.snapshot(), nil
}

// snapshotBuilder collects a Snapshot from records given in key order:
// index (the values of the record about to be added), then object.
type snapshotBuilder struct {
	sn      Snapshot
	byIndex map[string]map[string][]int32
	intern  map[string]string
}

func newSnapshotBuilder() *snapshotBuilder {
	return &snapshotBuilder{byIndex: map[string]map[string][]int32{}, intern: map[string]string{}}
}

// str interns b: index values and key ids repeat across records.
func (b *snapshotBuilder) str(v []byte) string {
	if s, ok := b.intern[string(v)]; ok {
		return s
	}
	s := string(v)
	b.intern[s] = s
	return s
}

// index adds one index value of the next object.
func (b *snapshotBuilder) index(name, value []byte) {
	vals := b.byIndex[string(name)]
	if vals == nil {
		vals = map[string][]int32{}
		b.byIndex[string(name)] = vals
	}
	v := b.str(value)
	vals[v] = append(vals[v], int32(len(b.sn.Keys)))
}

// object adds the next object's envelope.
func (b *snapshotBuilder) object(key string, rv, uid, keyID []byte) {
	b.sn.Keys = append(b.sn.Keys, key)
	b.sn.ResourceVersions = append(b.sn.ResourceVersions, string(rv))
	b.sn.UIDs = append(b.sn.UIDs, string(uid))
	b.sn.KeyIDs = append(b.sn.KeyIDs, b.str(keyID))
}

// snapshot returns what was added, indexes and values sorted.
func (b *snapshotBuilder) snapshot() *Snapshot {
	sn := &b.sn
	for name, vals := range b.byIndex {
		idx := SnapshotIndex{Name: name}
		for v, objs := range vals {
			idx.Values = append(idx.Values, SnapshotValue{Value: v, Objects: objs})
		}
		sort.Slice(idx.Values, func(i, j int) bool { return idx.Values[i].Value < idx.Values[j].Value })
		sn.Indexes = append(sn.Indexes, idx)
	}
	sort.Slice(sn.Indexes, func(i, j int) bool { return sn.Indexes[i].Name < sn.Indexes[j].Name })
	return sn
}

// encodeSnapshot lays sn out as docs/FORMAT.md section 7a describes:
// uvarint counts and lengths, positions as deltas, a CRC-32C last.
func encodeSnapshot(sn *Snapshot, stamp snapshotStamp) []byte {
	var b []byte
	str := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	str(stamp.rv)
	b = binary.AppendVarint(b, stamp.lastCommit)
	b = binary.AppendVarint(b, stamp.objects)
	// The distinct key ids, then the objects with their key id's number.
	var ids []string
	idOf := map[string]uint64{}
	for _, id := range sn.KeyIDs {
		if _, ok := idOf[id]; !ok {
			idOf[id] = uint64(len(ids))
			ids = append(ids, id)
		}
	}
	b = binary.AppendUvarint(b, uint64(len(ids)))
	for _, id := range ids {
		str(id)
	}
	b = binary.AppendUvarint(b, uint64(len(sn.Keys)))
	for i, k := range sn.Keys {
		str(k)
		str(sn.ResourceVersions[i])
		str(sn.UIDs[i])
		b = binary.AppendUvarint(b, idOf[sn.KeyIDs[i]])
	}
	b = binary.AppendUvarint(b, uint64(len(sn.Indexes)))
	for _, idx := range sn.Indexes {
		str(idx.Name)
		b = binary.AppendUvarint(b, uint64(len(idx.Values)))
		for _, v := range idx.Values {
			str(v.Value)
			b = binary.AppendUvarint(b, uint64(len(v.Objects)))
			prev := int32(0)
			for _, o := range v.Objects {
				b = binary.AppendUvarint(b, uint64(o-prev))
				prev = o
			}
		}
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// snapshotReader reads the fields of an encoded snapshot: integers from b,
// strings cut from s, one copy of b, so that a load allocates once for all
// of them.
type snapshotReader struct {
	b   []byte
	s   string
	pos int
	err error
}

func (r *snapshotReader) fail(what string) {
	if r.err == nil {
		r.err = corruptf("snapshot: malformed at byte %d: %s", r.pos, what)
	}
}

// uvarint reads an unsigned varint no larger than limit.
func (r *snapshotReader) uvarint(what string, limit uint64) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b[r.pos:])
	if n <= 0 || v > limit {
		r.fail(what)
		return 0
	}
	r.pos += n
	return v
}

func (r *snapshotReader) varint(what string) int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b[r.pos:])
	if n <= 0 {
		r.fail(what)
		return 0
	}
	r.pos += n
	return v
}

func (r *snapshotReader) str(what string) string {
	n := int(r.uvarint(what, uint64(len(r.b))))
	if r.err != nil || n > len(r.b)-r.pos {
		r.fail(what)
		return ""
	}
	s := r.s[r.pos : r.pos+n]
	r.pos += n
	return s
}

// decodeSnapshot decodes an encoded snapshot, checking its checksum first
// and every count against what is left, so that a damaged value is an
// error (wrapping ErrCorrupt), never a panic or a huge allocation.
func decodeSnapshot(raw []byte) (*Snapshot, snapshotStamp, error) {
	var stamp snapshotStamp
	if len(raw) < 4 {
		return nil, stamp, corruptf("snapshot: %d bytes", len(raw))
	}
	body := raw[:len(raw)-4]
	if got, want := crc32.Checksum(body, castagnoli), binary.BigEndian.Uint32(raw[len(raw)-4:]); got != want {
		return nil, stamp, corruptf("snapshot: checksum %08x, want %08x", got, want)
	}
	r := &snapshotReader{b: body, s: string(body)}
	left := func() uint64 { return uint64(len(r.b) - r.pos) }
	stamp.rv = r.str("resourceVersion")
	stamp.lastCommit = r.varint("last commit")
	stamp.objects = r.varint("object count")
	ids := make([]string, r.uvarint("key id count", left()))
	for i := range ids {
		ids[i] = r.str("key id")
	}
	// Every object takes at least four bytes.
	n := r.uvarint("object count", left()/4)
	sn := &Snapshot{Keys: make([]string, n), ResourceVersions: make([]string, n), UIDs: make([]string, n), KeyIDs: make([]string, n)}
	for i := range n {
		sn.Keys[i] = r.str("key")
		sn.ResourceVersions[i] = r.str("resourceVersion")
		sn.UIDs[i] = r.str("uid")
		id := r.uvarint("key id", uint64(max(len(ids), 1)-1))
		if r.err != nil {
			break
		}
		if len(ids) == 0 {
			r.fail("key id of an object, and no key ids")
			break
		}
		sn.KeyIDs[i] = ids[id]
		if i > 0 && compareBucketKeys(sn.Keys[i], sn.Keys[i-1]) <= 0 {
			r.fail("keys out of order")
		}
	}
	sn.Indexes = make([]SnapshotIndex, r.uvarint("index count", left()))
	for i := range sn.Indexes {
		idx := &sn.Indexes[i]
		idx.Name = r.str("index name")
		if i > 0 && idx.Name <= sn.Indexes[i-1].Name {
			r.fail("index names out of order")
		}
		idx.Values = make([]SnapshotValue, r.uvarint("value count", left()))
		for j := range idx.Values {
			v := &idx.Values[j]
			v.Value = r.str("index value")
			if j > 0 && v.Value <= idx.Values[j-1].Value {
				r.fail("index values out of order")
			}
			v.Objects = make([]int32, r.uvarint("entry count", left()))
			if len(v.Objects) == 0 {
				r.fail("index value without objects")
			}
			pos := uint64(0)
			for k := range v.Objects {
				pos += r.uvarint("entry", n)
				if pos >= n {
					r.fail("entry out of range")
				}
				if r.err != nil {
					break
				}
				v.Objects[k] = int32(pos)
			}
			if r.err != nil {
				break
			}
		}
		if r.err != nil {
			break
		}
	}
	if r.err == nil && r.pos != len(r.b) {
		r.fail("trailing bytes")
	}
	if r.err != nil {
		return nil, stamp, r.err
	}
	return sn, stamp, nil
}
