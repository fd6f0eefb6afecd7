package codec

import (
	"bytes"
	"fmt"
	"reflect"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/boltinformer/boltinformer/store"
)

// Options configure a Codec. A nil *Options means the defaults.
type Options struct {
	// Scheme resolves the example object's kind. Default: client-go's
	// kubernetes scheme.
	Scheme *runtime.Scheme
	// Keyring, when set, seals every payload with AES-GCM.
	Keyring *Keyring
	// ForceJSON stores typed objects as JSON even when they have protobuf.
	ForceJSON bool
}

// Codec encodes and decodes the objects of one informer (one Go type).
// It is safe for concurrent use.
type Codec struct {
	typ          reflect.Type // the example's struct type; nil for unstructured
	gvk          schema.GroupVersionKind
	kind         store.Codec
	unstructured bool
	raw          *protobuf.RawSerializer
	seal         *sealer
}

type protoMarshaler interface {
	Marshal() ([]byte, error)
	Unmarshal([]byte) error
}

// New returns the codec for objects of example's type: protobuf when the
// type has it, JSON otherwise (always for unstructured objects).
func New(example runtime.Object, opts *Options) (*Codec, error) {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	if o.Scheme == nil {
		o.Scheme = scheme.Scheme
	}
	if example == nil {
		return nil, fmt.Errorf("%w: nil example object", ErrUnsupportedType)
	}
	s, err := newSealer(o.Keyring)
	if err != nil {
		return nil, err
	}
	c := &Codec{seal: s}
	switch example.(type) {
	case *unstructured.Unstructured:
		c.unstructured = true
		c.kind = store.CodecJSON
		c.gvk = example.GetObjectKind().GroupVersionKind()
		return c, nil
	}
	t := reflect.TypeOf(example)
	if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("%w: %T is not a pointer to a struct", ErrUnsupportedType, example)
	}
	c.typ = t.Elem()
	if gvks, _, err := o.Scheme.ObjectKinds(example); err == nil && len(gvks) > 0 {
		c.gvk = gvks[0]
	} else {
		c.gvk = example.GetObjectKind().GroupVersionKind()
	}
	if _, ok := example.(protoMarshaler); ok && !o.ForceJSON {
		c.kind = store.CodecProtobuf
		c.raw = protobuf.NewRawSerializer(o.Scheme, o.Scheme)
	} else {
		c.kind = store.CodecJSON
	}
	return c, nil
}

// GVK returns the kind the codec was built for (may be empty for an
// unstructured example without one).
func (c *Codec) GVK() schema.GroupVersionKind { return c.gvk }

// Kind returns the payload codec this Codec writes.
func (c *Codec) Kind() store.Codec { return c.kind }

// Encrypted reports whether payloads are sealed.
func (c *Codec) Encrypted() bool { return c.seal != nil && c.seal.current != "" }

// KeyID returns the key id the codec seals new payloads with ("" when it
// stores plaintext): a record with another key id is to be resealed
// (Reseal).
func (c *Codec) KeyID() string {
	if c.seal == nil {
		return ""
	}
	return c.seal.current
}

// Reseal changes r, the record stored under key, to what Encode would
// write now: a payload sealed with another key, or not sealed, is opened
// and sealed with the current key (or left in plaintext when the codec
// does not seal). It returns false, leaving r alone, when r already has
// the current key id. Only r's Payload and KeyID change; the payload is
// not decoded, so the object is unchanged. An error wraps ErrWrongKey or
// ErrEncrypted when the keyring does not open the payload.
func (c *Codec) Reseal(key string, r *store.Record) (bool, error) {
	want := c.KeyID()
	if r.KeyID == want {
		return false, nil
	}
	plain := r.Payload
	if r.KeyID != "" {
		var err error
		if plain, err = c.seal.open(r.KeyID, r.Payload, []byte(key)); err != nil {
			return false, fmt.Errorf("codec: %q: %w", key, err)
		}
	}
	if want == "" {
		r.Payload, r.KeyID = plain, ""
		return true, nil
	}
	sealed, id, err := c.seal.seal(plain, []byte(key))
	if err != nil {
		return false, err
	}
	r.Payload, r.KeyID = sealed, id
	return true, nil
}

// Encode returns the record for obj stored under key. The key is bound to
// a sealed payload as additional data, so sealed records cannot be swapped.
func (c *Codec) Encode(key string, obj any) (*store.Record, error) {
	r := &store.Record{}
	ro, err := c.envelope(key, obj, r)
	if err != nil {
		return nil, err
	}
	if r.Payload, err = c.payload(key, obj, ro, r); err != nil {
		return nil, err
	}
	return r, nil
}

// envelope checks obj and sets r's fields from it, except Indexed and the
// payload.
func (c *Codec) envelope(key string, obj any, r *store.Record) (runtime.Object, error) {
	ro, ok := obj.(runtime.Object)
	if !ok {
		return nil, fmt.Errorf("%w: %T is not a runtime.Object", ErrUnsupportedType, obj)
	}
	acc, err := meta.Accessor(obj)
	if err != nil {
		return nil, fmt.Errorf("%w: %T: %v", ErrUnsupportedType, obj, err)
	}
	r.UID = string(acc.GetUID())
	r.ResourceVersion = acc.GetResourceVersion()
	r.Codec = c.kind
	r.KeyID = ""
	gvk := ro.GetObjectKind().GroupVersionKind()
	r.APIVersion, r.Kind = gvk.ToAPIVersionAndKind()
	switch {
	case c.unstructured:
		if _, ok := obj.(*unstructured.Unstructured); !ok {
			return nil, fmt.Errorf("%w: %T in an unstructured informer", ErrUnsupportedType, obj)
		}
	case reflect.TypeOf(obj).Elem() != c.typ:
		return nil, fmt.Errorf("%w: %T in an informer of %s", ErrUnsupportedType, obj, c.typ)
	}
	return ro, nil
}

// payload encodes (and seals) the payload of obj, checked by envelope, and
// sets r.KeyID.
func (c *Codec) payload(key string, obj any, ro runtime.Object, r *store.Record) ([]byte, error) {
	var payload []byte
	var err error
	switch {
	case c.unstructured:
		payload, err = obj.(*unstructured.Unstructured).MarshalJSON()
	case c.kind == store.CodecProtobuf:
		var buf bytes.Buffer
		err = c.raw.Encode(ro, &buf)
		payload = buf.Bytes()
	default:
		payload, err = utiljson.Marshal(obj)
	}
	if err != nil {
		return nil, fmt.Errorf("codec: encode %s %q: %w", c.kind, key, err)
	}
	if c.Encrypted() {
		payload, r.KeyID, err = c.seal.seal(payload, []byte(key))
		if err != nil {
			return nil, err
		}
	}
	return payload, nil
}

// Decode returns the object of a record stored under key.
func (c *Codec) Decode(key string, r *store.Record) (runtime.Object, error) {
	payload := r.Payload
	if r.KeyID != "" {
		var err error
		if payload, err = c.seal.open(r.KeyID, payload, []byte(key)); err != nil {
			return nil, fmt.Errorf("codec: %q: %w", key, err)
		}
	}
	obj, err := DecodePayload(r.Codec, payload, c.newObject())
	if err != nil {
		return nil, fmt.Errorf("codec: %q: %w", key, err)
	}
	if !c.unstructured {
		// Restore the TypeMeta exactly as it was (usually empty for typed
		// informers): the serializer defaults it.
		obj.GetObjectKind().SetGroupVersionKind(schema.FromAPIVersionAndKind(r.APIVersion, r.Kind))
	}
	return obj, nil
}

func (c *Codec) newObject() runtime.Object {
	if c.unstructured {
		return &unstructured.Unstructured{}
	}
	return reflect.New(c.typ).Interface().(runtime.Object)
}

// rawSerializer decodes protobuf payloads of types that need no scheme.
var rawSerializer = protobuf.NewRawSerializer(scheme.Scheme, scheme.Scheme)

// DecodePayload decodes a plaintext payload of the given codec into into
// (a new, empty object of the right type). Garbage is an error, never a
// panic: the decoders of generated protobuf code can panic on some
// malformed input, which is recovered here.
func DecodePayload(kind store.Codec, payload []byte, into runtime.Object) (obj runtime.Object, err error) {
	defer func() {
		if r := recover(); r != nil {
			obj, err = nil, fmt.Errorf("decode %s payload: %v", kind, r)
		}
	}()
	switch kind {
	case store.CodecProtobuf:
		if _, ok := into.(protoMarshaler); !ok {
			return nil, fmt.Errorf("%w: %T has no protobuf", ErrUnsupportedType, into)
		}
		obj, _, err = rawSerializer.Decode(payload, nil, into)
		if err != nil {
			return nil, fmt.Errorf("decode protobuf payload: %w", err)
		}
		return obj, nil
	case store.CodecJSON:
		if u, ok := into.(*unstructured.Unstructured); ok {
			if err := u.UnmarshalJSON(payload); err != nil {
				return nil, fmt.Errorf("decode json payload: %w", err)
			}
			return u, nil
		}
		if err := utiljson.Unmarshal(payload, into); err != nil {
			return nil, fmt.Errorf("decode json payload: %w", err)
		}
		return into, nil
	default:
		return nil, fmt.Errorf("%w %d", ErrUnknownCodec, kind)
	}
}
