package codec

import (
	"fmt"
	"reflect"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/boltinformer/boltinformer/store"
)

// Options configure a Codec. A nil *Options means the defaults.
type Options struct {
	// Scheme resolves kinds: the example's, and those of objects of other
	// types (a transform's), which are stored with their kind and decoded
	// through it. Client-go's kubernetes scheme and the meta.k8s.io/v1
	// types (PartialObjectMetadata) are known too, after it. Default:
	// client-go's kubernetes scheme.
	Scheme *runtime.Scheme
	// Keyring, when set, seals every payload with AES-GCM.
	Keyring *Keyring
	// ForceJSON stores typed objects as JSON even when they have protobuf.
	ForceJSON bool
}

// metaScheme knows the meta.k8s.io/v1 types that client-go's scheme does
// not: PartialObjectMetadata, the objects of metadata-only informers and
// of transforms that trim objects to their metadata.
var metaScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(metav1.AddMetaToScheme(s))
	return s
}()

// Codec encodes and decodes the objects of one informer: objects of its
// example's type, and objects of any other type its scheme knows (what a
// transform returns), whose records name their type (store.Record.Type).
// A payload says its kind (store.CodecKubeProtobuf; JSON with apiVersion
// and kind), and Decode checks it against the record's. It is safe for
// concurrent use.
type Codec struct {
	example *typeInfo
	// schemes resolve kinds, in order: Options.Scheme, client-go's, the
	// meta.k8s.io types.
	schemes []*runtime.Scheme
	json    bool // ForceJSON
	seal    *sealer
	// byGoType caches typeOf (reflect.Type -> typeResult); byName caches
	// typeByName (Record.Type -> typeResult).
	byGoType sync.Map
	byName   sync.Map
}

// typeInfo is what the codec knows of one Go type.
type typeInfo struct {
	// name is the Record.Type of its objects: "" for the example's.
	name string
	// ptr is the pointer type (*corev1.Pod); goType its struct type, nil
	// for *unstructured.Unstructured.
	ptr, goType reflect.Type
	gvk         schema.GroupVersionKind
	// apiVersion and kind are gvk as payloads write it.
	apiVersion, kind string
	enc              store.Codec
}

// typeResult is a cached lookup.
type typeResult struct {
	ti  *typeInfo
	err error
}

var unstructuredPtr = reflect.TypeOf(&unstructured.Unstructured{})

type protoMarshaler interface {
	Marshal() ([]byte, error)
	Unmarshal([]byte) error
}

// New returns the codec for an informer of example's type: protobuf when
// the type has it, JSON otherwise (always for unstructured objects).
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
	c := &Codec{seal: s, schemes: []*runtime.Scheme{o.Scheme, metaScheme}, json: o.ForceJSON}
	if o.Scheme != scheme.Scheme {
		c.schemes = []*runtime.Scheme{o.Scheme, scheme.Scheme, metaScheme}
	}
	t := reflect.TypeOf(example)
	if t == unstructuredPtr {
		c.example = newTypeInfo("", t, example.GetObjectKind().GroupVersionKind(), store.CodecJSON)
		return c, nil
	}
	if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("%w: %T is not a pointer to a struct", ErrUnsupportedType, example)
	}
	gvk, ok := c.kindOf(example)
	if !ok {
		gvk = example.GetObjectKind().GroupVersionKind()
	}
	c.example = newTypeInfo("", t, gvk, c.encodingOf(example))
	return c, nil
}

func newTypeInfo(name string, ptr reflect.Type, gvk schema.GroupVersionKind, enc store.Codec) *typeInfo {
	ti := &typeInfo{name: name, ptr: ptr, gvk: gvk, enc: enc}
	if ptr != unstructuredPtr {
		ti.goType = ptr.Elem()
	}
	ti.apiVersion, ti.kind = gvk.ToAPIVersionAndKind()
	return ti
}

// encodingOf is the payload codec of a typed object.
func (c *Codec) encodingOf(obj runtime.Object) store.Codec {
	if _, ok := obj.(protoMarshaler); ok && !c.json {
		return store.CodecKubeProtobuf
	}
	return store.CodecJSON
}

// kindOf finds obj's kind in the schemes: the first of its kinds whose new
// object is of obj's type.
func (c *Codec) kindOf(obj runtime.Object) (schema.GroupVersionKind, bool) {
	t := reflect.TypeOf(obj)
	for _, s := range c.schemes {
		gvks, _, err := s.ObjectKinds(obj)
		if err != nil {
			continue
		}
		for _, gvk := range gvks {
			if gvk.Version == runtime.APIVersionInternal {
				continue
			}
			if n, err := s.New(gvk); err == nil && reflect.TypeOf(n) == t {
				return gvk, true
			}
		}
	}
	return schema.GroupVersionKind{}, false
}

// GVK returns the kind of the informer's example (may be empty for an
// unstructured example without one, or a type its scheme lacks).
func (c *Codec) GVK() schema.GroupVersionKind { return c.example.gvk }

// Kind returns the payload codec this Codec writes for the example's
// objects.
func (c *Codec) Kind() store.Codec { return c.example.enc }

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

// typeOf returns what the codec knows of obj's type, or an error wrapping
// ErrUnsupportedType when objects of that type cannot be stored: not a
// pointer to a struct, or neither the example's type, unstructured, nor a
// kind of the scheme.
func (c *Codec) typeOf(obj any) (*typeInfo, error) {
	t := reflect.TypeOf(obj)
	if t == c.example.ptr {
		return c.example, nil
	}
	if v, ok := c.byGoType.Load(t); ok {
		r := v.(typeResult)
		return r.ti, r.err
	}
	ti, err := c.newType(obj)
	c.byGoType.Store(t, typeResult{ti, err})
	return ti, err
}

func (c *Codec) newType(obj any) (*typeInfo, error) {
	t := reflect.TypeOf(obj)
	if t == unstructuredPtr {
		return newTypeInfo(store.TypeUnstructured, t, schema.GroupVersionKind{}, store.CodecJSON), nil
	}
	ro, ok := obj.(runtime.Object)
	if !ok {
		return nil, fmt.Errorf("%w: %T is not a runtime.Object", ErrUnsupportedType, obj)
	}
	if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("%w: %T is not a pointer to a struct", ErrUnsupportedType, obj)
	}
	gvk, ok := c.kindOf(ro)
	if !ok {
		return nil, fmt.Errorf("%w: %T is not the informer's type (%s) and its scheme has no kind for it", ErrUnsupportedType, obj, c.example.ptr)
	}
	return newTypeInfo(gvk.String(), t, gvk, c.encodingOf(ro)), nil
}

// typeByName returns the type a record's Type names.
func (c *Codec) typeByName(name string) (*typeInfo, error) {
	if name == "" {
		return c.example, nil
	}
	if v, ok := c.byName.Load(name); ok {
		r := v.(typeResult)
		return r.ti, r.err
	}
	ti, err := c.namedType(name)
	c.byName.Store(name, typeResult{ti, err})
	return ti, err
}

func (c *Codec) namedType(name string) (*typeInfo, error) {
	if name == store.TypeUnstructured {
		return c.typeOf(&unstructured.Unstructured{})
	}
	gvk, ok := ParseKind(name)
	if !ok {
		return nil, fmt.Errorf("%w: record type %q is not a kind", ErrUnsupportedType, name)
	}
	for _, s := range c.schemes {
		if obj, err := s.New(gvk); err == nil {
			ti, err := c.typeOf(obj)
			if err != nil {
				return nil, err
			}
			// The example's own type named explicitly (a reader that
			// built the codec from the record's type) is that type.
			if ti.name != name && (ti != c.example || ti.gvk != gvk) {
				break
			}
			return ti, nil
		}
	}
	return nil, fmt.Errorf("%w: record type %q is not a kind of the informer's scheme", ErrUnsupportedType, name)
}

// NewKnown returns a new object of kind gvk from client-go's scheme or the
// meta.k8s.io/v1 types (what a tool reading any file can decode).
func NewKnown(gvk schema.GroupVersionKind) (runtime.Object, bool) {
	for _, s := range []*runtime.Scheme{scheme.Scheme, metaScheme} {
		if obj, err := s.New(gvk); err == nil {
			return obj, true
		}
	}
	return nil, false
}

// ParseKind parses schema.GroupVersionKind.String()'s form ("apps/v1,
// Kind=Deployment", "/v1, Kind=Pod"), as the state record's Kind and a
// record's Type write a kind.
func ParseKind(s string) (schema.GroupVersionKind, bool) {
	gv, kind, ok := strings.Cut(s, ", Kind=")
	if !ok || kind == "" {
		return schema.GroupVersionKind{}, false
	}
	g, err := schema.ParseGroupVersion(strings.TrimPrefix(gv, "/"))
	if err != nil {
		return schema.GroupVersionKind{}, false
	}
	return g.WithKind(kind), true
}

// Storable returns nil when the codec can store obj, else why not (an
// error wrapping ErrUnsupportedType): obj must be a runtime.Object with
// object metadata, of the example's type, unstructured, or of a kind the
// scheme knows. Encoding can still fail (Encode), but not for its type.
func (c *Codec) Storable(obj any) error {
	_, err := c.TypeOf(obj)
	return err
}

// TypeOf returns the store.Record.Type obj's record will have ("" for the
// example's type), or Storable's error.
func (c *Codec) TypeOf(obj any) (string, error) {
	ti, err := c.typeOf(obj)
	if err != nil {
		return "", err
	}
	if _, err := meta.Accessor(obj); err != nil {
		return "", fmt.Errorf("%w: %T: %v", ErrUnsupportedType, obj, err)
	}
	return ti.name, nil
}

// Encode returns the record for obj stored under key. The key is bound to
// a sealed payload as additional data, so sealed records cannot be swapped.
func (c *Codec) Encode(key string, obj any) (*store.Record, error) {
	r := &store.Record{}
	ro, ti, err := c.envelope(obj, r)
	if err != nil {
		return nil, err
	}
	if r.Payload, err = c.payload(key, ro, ti, r); err != nil {
		return nil, err
	}
	return r, nil
}

// envelope checks obj and sets r's fields from it, except Indexed and the
// payload.
func (c *Codec) envelope(obj any, r *store.Record) (runtime.Object, *typeInfo, error) {
	ti, err := c.typeOf(obj)
	if err != nil {
		return nil, nil, err
	}
	ro := obj.(runtime.Object)
	acc, err := meta.Accessor(obj)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %T: %v", ErrUnsupportedType, obj, err)
	}
	r.UID = string(acc.GetUID())
	r.ResourceVersion = acc.GetResourceVersion()
	r.Codec = ti.enc
	r.KeyID = ""
	r.Type = ti.name
	gvk := ro.GetObjectKind().GroupVersionKind()
	r.APIVersion, r.Kind = gvk.ToAPIVersionAndKind()
	return ro, ti, nil
}

// payload encodes (and seals) the payload of obj, checked by envelope, and
// sets r.KeyID.
func (c *Codec) payload(key string, ro runtime.Object, ti *typeInfo, r *store.Record) ([]byte, error) {
	var payload []byte
	var err error
	switch {
	case ti.goType == nil:
		payload, err = ro.(*unstructured.Unstructured).MarshalJSON()
	case ti.enc == store.CodecKubeProtobuf:
		payload, err = kubeProtobuf(ro, ti)
	default:
		payload, err = utiljson.Marshal(withKind(ro, ti))
	}
	if err != nil {
		return nil, fmt.Errorf("codec: encode %s %q: %w", ti.enc, key, err)
	}
	if c.Encrypted() {
		payload, r.KeyID, err = c.seal.seal(payload, []byte(key))
		if err != nil {
			return nil, err
		}
	}
	return payload, nil
}

// kubeProtobuf returns the CodecKubeProtobuf payload of a typed object.
func kubeProtobuf(ro runtime.Object, ti *typeInfo) ([]byte, error) {
	if m, ok := ro.(reverseMarshaler); ok {
		size := m.Size()
		b := store.AppendKubeProtobufHead(make([]byte, 0, size+64+len(ti.apiVersion)+len(ti.kind)), ti.apiVersion, ti.kind, size)
		b = b[:len(b)+size]
		n, err := m.MarshalToSizedBuffer(b[len(b)-size:])
		if err != nil {
			return nil, err
		}
		if n != size {
			return nil, fmt.Errorf("%T: Size %d, marshaled %d bytes", ro, size, n)
		}
		return store.AppendKubeProtobufTrailer(b), nil
	}
	raw, err := ro.(protoMarshaler).Marshal()
	if err != nil {
		return nil, err
	}
	return store.WrapKubeProtobuf(ti.apiVersion, ti.kind, raw), nil
}

// withKind returns obj, or a shallow copy of it with its TypeMeta set to
// its kind, so that its JSON says its kind (a typed object's TypeMeta is
// usually empty in an informer). obj is shared: it is never changed.
func withKind(ro runtime.Object, ti *typeInfo) runtime.Object {
	if ti.gvk.Empty() || ro.GetObjectKind().GroupVersionKind() == ti.gvk {
		return ro
	}
	cp := reflect.New(ti.goType)
	cp.Elem().Set(reflect.ValueOf(ro).Elem())
	out := cp.Interface().(runtime.Object)
	out.GetObjectKind().SetGroupVersionKind(ti.gvk)
	return out
}

// Decode returns the object of a record stored under key. The payload's
// kind must be the one the record names (its Type, or the example's): a
// payload of another kind is an error wrapping ErrKindMismatch, never an
// object of the wrong kind. Records of codec 1 (raw protobuf, migrated
// from format version 3) carry no kind to check, nor do typed JSON
// payloads without one.
func (c *Codec) Decode(key string, r *store.Record) (runtime.Object, error) {
	ti, err := c.typeByName(r.Type)
	if err != nil {
		return nil, fmt.Errorf("codec: %q: %w", key, err)
	}
	payload := r.Payload
	if r.KeyID != "" {
		if payload, err = c.seal.open(r.KeyID, payload, []byte(key)); err != nil {
			return nil, fmt.Errorf("codec: %q: %w", key, err)
		}
	}
	obj, err := decodeChecked(r, payload, ti)
	if err != nil {
		return nil, fmt.Errorf("codec: %q: %w", key, err)
	}
	if ti.goType != nil {
		// Restore the TypeMeta exactly as it was (usually empty for typed
		// informers): the payload holds the kind.
		obj.GetObjectKind().SetGroupVersionKind(schema.FromAPIVersionAndKind(r.APIVersion, r.Kind))
	}
	return obj, nil
}

// decodeChecked decodes a plaintext payload of r into a new object of
// ti's type, checking the kind the payload says.
func decodeChecked(r *store.Record, payload []byte, ti *typeInfo) (runtime.Object, error) {
	into := ti.new()
	switch r.Codec {
	case store.CodecKubeProtobuf:
		if ti.goType == nil {
			return nil, fmt.Errorf("%w: unstructured object in a %s payload", ErrKindMismatch, r.Codec)
		}
		av, kind, _, err := store.SplitKubeProtobuf(payload)
		if err != nil {
			return nil, fmt.Errorf("decode %s payload: %w", r.Codec, err)
		}
		if string(av) != ti.apiVersion || string(kind) != ti.kind {
			return nil, fmt.Errorf("%w: the payload is apiVersion %q kind %q, the record's type is %q", ErrKindMismatch, av, kind, describe(ti))
		}
	case store.CodecProtobuf:
		if ti.goType == nil {
			return nil, fmt.Errorf("%w: unstructured object in a %s payload", ErrKindMismatch, r.Codec)
		}
	}
	obj, err := DecodePayload(r.Codec, payload, into)
	if err != nil || r.Codec != store.CodecJSON {
		return obj, err
	}
	got := obj.GetObjectKind().GroupVersionKind()
	if ti.goType == nil {
		// The object's own apiVersion and kind, as the envelope recorded
		// them when it was written.
		if want := schema.FromAPIVersionAndKind(r.APIVersion, r.Kind); got != want {
			return nil, fmt.Errorf("%w: the payload is %q, the record says %q", ErrKindMismatch, got, want)
		}
		return obj, nil
	}
	if got.Kind != "" && !ti.gvk.Empty() && got != ti.gvk {
		return nil, fmt.Errorf("%w: the payload is %q, the record's type is %q", ErrKindMismatch, got, describe(ti))
	}
	return obj, nil
}

// describe names a type for messages.
func describe(ti *typeInfo) string {
	if ti.gvk.Empty() {
		return ti.ptr.String()
	}
	return ti.gvk.String()
}

func (ti *typeInfo) new() runtime.Object {
	if ti.goType == nil {
		return &unstructured.Unstructured{}
	}
	return reflect.New(ti.goType).Interface().(runtime.Object)
}

// DecodePayload decodes a plaintext payload of the given codec into into
// (a new, empty object of the right type), without checking its kind.
// Garbage is an error, never a panic: the decoders of generated protobuf
// code can panic on some malformed input, which is recovered here.
func DecodePayload(kind store.Codec, payload []byte, into runtime.Object) (obj runtime.Object, err error) {
	defer func() {
		if r := recover(); r != nil {
			obj, err = nil, fmt.Errorf("decode %s payload: %v", kind, r)
		}
	}()
	switch kind {
	case store.CodecProtobuf, store.CodecKubeProtobuf:
		pb, ok := into.(protoMarshaler)
		if !ok {
			return nil, fmt.Errorf("%w: %T has no protobuf", ErrUnsupportedType, into)
		}
		raw := payload
		if kind == store.CodecKubeProtobuf {
			if _, _, raw, err = store.SplitKubeProtobuf(payload); err != nil {
				return nil, fmt.Errorf("decode %s payload: %w", kind, err)
			}
		}
		if len(raw) == 0 {
			return nil, fmt.Errorf("decode %s payload: empty data", kind)
		}
		if err := pb.Unmarshal(raw); err != nil {
			return nil, fmt.Errorf("decode %s payload: %w", kind, err)
		}
		return into, nil
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
