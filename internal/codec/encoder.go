package codec

import (
	"fmt"
	goruntime "runtime"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/boltinformer/boltinformer/store"
)

// reverseMarshaler is what gogo-protobuf generates for the built-in types,
// and what apimachinery's raw protobuf serializer prefers: the same bytes
// as Codec.Encode writes.
type reverseMarshaler interface {
	Size() int
	MarshalToSizedBuffer([]byte) (int, error)
}

// Encoder encodes records into a store.RecordBuffer. A plaintext protobuf
// payload is marshaled in place, into the end of the buffer's free space,
// so it is neither sized first (a Pod's Size pass costs about as much as
// marshaling it) nor copied into its envelope. The records are those
// Codec.Encode and store.EncodeRecord write. One Encoder per goroutine.
type Encoder struct {
	c    *Codec
	rb   *store.RecordBuffer
	tail protoTail // reused: no allocation per record
}

// NewEncoder returns an Encoder writing into rb.
func (c *Codec) NewEncoder(rb *store.RecordBuffer) *Encoder {
	return &Encoder{c: c, rb: rb}
}

// Encode sets r's envelope fields from obj (the caller's r.Indexed is kept)
// and returns the record stored under key, which lives in the Encoder's
// RecordBuffer; r.Payload points into it.
func (e *Encoder) Encode(key string, obj any, r *store.Record) ([]byte, error) {
	c := e.c
	ro, ti, err := c.envelope(obj, r)
	if err != nil {
		return nil, err
	}
	if m, ok := obj.(reverseMarshaler); ok && ti.enc == store.CodecKubeProtobuf && !c.Encrypted() && !cacheable(ro) {
		e.tail.m, e.tail.ti = m, ti
		raw, err := e.rb.AppendTail(key, r, &e.tail)
		e.tail.m, e.tail.ti = nil, nil
		if err != nil {
			return nil, fmt.Errorf("codec: encode %s %q: %w", ti.enc, key, err)
		}
		return raw, nil
	}
	if r.Payload, err = c.payload(key, ro, ti, r); err != nil {
		return nil, err
	}
	return e.rb.Append(key, r)
}

// cacheable objects (apiserver-side wrappers) encode through their cache.
func cacheable(o runtime.Object) bool {
	_, ok := o.(runtime.CacheableObject)
	return ok
}

// protoTail is a store.TailWriter of a CodecKubeProtobuf payload over
// MarshalToSizedBuffer, which writes from the end of its buffer and panics
// with an index error when the buffer is shorter than Size: that panic is
// the "too short" answer. The object's raw protobuf goes first, before the
// payload's trailer; its head (magic, kind, length) is then written in
// front of it.
type protoTail struct {
	m    reverseMarshaler
	ti   *typeInfo
	head []byte // reused
}

func (p *protoTail) Size() int {
	size := p.m.Size()
	p.head = store.AppendKubeProtobufHead(p.head[:0], p.ti.apiVersion, p.ti.kind, size)
	return len(p.head) + size + store.KubeProtobufTrailerLen
}

func (p *protoTail) WriteTail(dst []byte) (n int, ok bool, err error) {
	if len(dst) < store.KubeProtobufTrailerLen {
		return 0, false, nil
	}
	end := len(dst) - store.KubeProtobufTrailerLen
	store.AppendKubeProtobufTrailer(dst[end:end])
	raw, ok, err := p.marshal(dst[:end])
	if !ok || err != nil {
		return 0, ok, err
	}
	p.head = store.AppendKubeProtobufHead(p.head[:0], p.ti.apiVersion, p.ti.kind, raw)
	start := end - raw - len(p.head)
	if start < 0 {
		return 0, false, nil
	}
	copy(dst[start:], p.head)
	return len(dst) - start, true, nil
}

// marshal writes the raw protobuf into the end of dst.
func (p *protoTail) marshal(dst []byte) (n int, ok bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			if _, isRuntime := r.(goruntime.Error); !isRuntime {
				panic(r)
			}
			n, ok, err = 0, false, nil
		}
	}()
	n, err = p.m.MarshalToSizedBuffer(dst)
	return n, true, err
}
