package localapi

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	jsonserializer "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

var (
	jsonSerializer  = jsonserializer.NewSerializerWithOptions(jsonserializer.DefaultMetaFactory, scheme.Scheme, scheme.Scheme, jsonserializer.SerializerOptions{})
	protoSerializer = protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)
	// protoMagic starts every protobuf-encoded Kubernetes object.
	protoMagic = []byte{0x6b, 0x38, 0x73, 0x00}
)

// protoMarshaler is what Kubernetes' generated types implement.
type protoMarshaler interface {
	Marshal() ([]byte, error)
}

// hasProtobuf reports whether objects like example have a protobuf
// encoding (built-in types; not unstructured ones).
func hasProtobuf(example runtime.Object) bool {
	_, ok := example.(protoMarshaler)
	return ok
}

// withKind returns obj with its apiVersion and kind set to gvk: obj itself
// when they are, else a shallow copy, since objects are shared with the
// informer's listers and must never be written.
func withKind(obj runtime.Object, gvk schema.GroupVersionKind) runtime.Object {
	if obj.GetObjectKind().GroupVersionKind() == gvk {
		return obj
	}
	if u, ok := obj.(*unstructured.Unstructured); ok {
		m := make(map[string]any, len(u.Object)+2)
		for k, v := range u.Object {
			m[k] = v
		}
		c := &unstructured.Unstructured{Object: m}
		c.SetGroupVersionKind(gvk)
		return c
	}
	v := reflect.ValueOf(obj)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return obj
	}
	c := reflect.New(v.Elem().Type())
	c.Elem().Set(v.Elem())
	out := c.Interface().(runtime.Object)
	out.GetObjectKind().SetGroupVersionKind(gvk)
	return out
}

// encodeObject appends obj (whose kind is set) in format f.
func encodeObject(buf *bytes.Buffer, f format, obj runtime.Object) error {
	switch f {
	case formatProtobuf:
		return protoSerializer.Encode(obj, buf)
	case formatYAML:
		var j bytes.Buffer
		if err := jsonSerializer.Encode(obj, &j); err != nil {
			return err
		}
		y, err := yaml.JSONToYAML(j.Bytes())
		if err != nil {
			return err
		}
		buf.Write(y)
		return nil
	}
	return jsonSerializer.Encode(obj, buf)
}

// encodeBare appends obj without an envelope: its JSON (a list item), or
// its protobuf message without the magic and the Unknown around it.
func encodeBare(buf *bytes.Buffer, f format, obj runtime.Object) error {
	b, err := bareBytes(f, obj)
	if err != nil {
		return err
	}
	buf.Write(b)
	return nil
}

// bareBytes returns obj encoded without an envelope (see encodeBare), in
// a new slice.
func bareBytes(f format, obj runtime.Object) ([]byte, error) {
	if f == formatProtobuf {
		m, ok := obj.(protoMarshaler)
		if !ok {
			return nil, fmt.Errorf("%T has no protobuf encoding", obj)
		}
		return m.Marshal()
	}
	if u, ok := obj.(*unstructured.Unstructured); ok {
		return u.MarshalJSON()
	}
	return json.Marshal(obj)
}

// appendList appends to dst a whole list response in format f: the list
// kind listGVK, its ListMeta lm and the items, each already encoded bare
// (item.encoded). It makes the bytes listWriter makes, sized up front.
func appendList(dst []byte, f format, listGVK schema.GroupVersionKind, lm metav1.ListMeta, items [][]byte) ([]byte, error) {
	apiVersion, kind := listGVK.ToAPIVersionAndKind()
	if f == formatProtobuf {
		lmb, err := lm.Marshal()
		if err != nil {
			return nil, err
		}
		tm, err := (&runtime.TypeMeta{APIVersion: apiVersion, Kind: kind}).Marshal()
		if err != nil {
			return nil, err
		}
		// runtime.Unknown as its Marshal writes it: TypeMeta (1), Raw (2:
		// the List message: ListMeta as field 1, each item as field 2),
		// ContentEncoding (3) and ContentType (4), both empty.
		raw := fieldSize(len(lmb))
		for _, b := range items {
			raw += fieldSize(len(b))
		}
		dst = slices.Grow(dst, len(protoMagic)+fieldSize(len(tm))+fieldSize(raw)+4)
		dst = append(dst, protoMagic...)
		dst = appendFieldBytes(dst, 1, tm)
		dst = appendTag(dst, 2, raw)
		dst = appendFieldBytes(dst, 1, lmb)
		for _, b := range items {
			dst = appendFieldBytes(dst, 2, b)
		}
		return append(dst, 0x1a, 0, 0x22, 0), nil
	}
	lmb, err := json.Marshal(lm)
	if err != nil {
		return nil, err
	}
	av, _ := json.Marshal(apiVersion)
	k, _ := json.Marshal(kind)
	n := len(`{"kind":,"apiVersion":,"metadata":,"items":[]}`+"\n") + len(av) + len(k) + len(lmb) + len(items)
	for _, b := range items {
		n += len(b)
	}
	start := len(dst)
	dst = slices.Grow(dst, n)
	dst = append(dst, `{"kind":`...)
	dst = append(dst, k...)
	dst = append(dst, `,"apiVersion":`...)
	dst = append(dst, av...)
	dst = append(dst, `,"metadata":`...)
	dst = append(dst, lmb...)
	dst = append(dst, `,"items":[`...)
	for i, b := range items {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, b...)
	}
	dst = append(dst, "]}\n"...)
	if f == formatYAML {
		y, err := yaml.JSONToYAML(dst[start:])
		if err != nil {
			return nil, err
		}
		return append(dst[:start], y...), nil
	}
	return dst, nil
}

// fieldSize is the size of a length-delimited protobuf field (of a field
// number below 16) holding n bytes.
func fieldSize(n int) int {
	return 1 + uvarintSize(uint64(n)) + n
}

func uvarintSize(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// appendTag appends the key and length of a length-delimited protobuf
// field of n bytes.
func appendTag(dst []byte, field, n int) []byte {
	dst = binary.AppendUvarint(dst, uint64(field<<3|2))
	return binary.AppendUvarint(dst, uint64(n))
}

// appendFieldBytes appends a length-delimited protobuf field.
func appendFieldBytes(dst []byte, field int, b []byte) []byte {
	return append(appendTag(dst, field, len(b)), b...)
}

// listWriter writes a list response item by item: the apiserver's list
// encoding (JSON: kind, apiVersion, metadata, items; protobuf: the List
// message with ListMeta as field 1 and each item as field 2, in an
// Unknown), without building a typed List of copies.
type listWriter struct {
	f     format
	gvk   schema.GroupVersionKind // of the list
	items bytes.Buffer            // JSON: items joined by commas; protobuf: the fields 2
	n     int
	tmp   bytes.Buffer
}

func newListWriter(f format, listGVK schema.GroupVersionKind) *listWriter {
	return &listWriter{f: f, gvk: listGVK}
}

// add appends one item (encoded bare).
func (w *listWriter) add(obj runtime.Object) error {
	if w.f != formatProtobuf {
		if w.n > 0 {
			w.items.WriteByte(',')
		}
		w.n++
		return encodeBare(&w.items, w.f, obj)
	}
	w.tmp.Reset()
	if err := encodeBare(&w.tmp, w.f, obj); err != nil {
		return err
	}
	w.n++
	appendField(&w.items, 2, w.tmp.Bytes())
	return nil
}

// finish writes the whole list to out.
func (w *listWriter) finish(out *bytes.Buffer, lm metav1.ListMeta) error {
	apiVersion, kind := w.gvk.ToAPIVersionAndKind()
	switch w.f {
	case formatProtobuf:
		lmb, err := lm.Marshal()
		if err != nil {
			return err
		}
		var raw bytes.Buffer
		raw.Grow(len(lmb) + 8 + w.items.Len())
		appendField(&raw, 1, lmb)
		raw.Write(w.items.Bytes())
		unk := runtime.Unknown{TypeMeta: runtime.TypeMeta{APIVersion: apiVersion, Kind: kind}, Raw: raw.Bytes()}
		ub, err := unk.Marshal()
		if err != nil {
			return err
		}
		out.Write(protoMagic)
		out.Write(ub)
		return nil
	case formatYAML:
		var j bytes.Buffer
		if err := w.writeJSON(&j, apiVersion, kind, lm); err != nil {
			return err
		}
		y, err := yaml.JSONToYAML(j.Bytes())
		if err != nil {
			return err
		}
		out.Write(y)
		return nil
	}
	return w.writeJSON(out, apiVersion, kind, lm)
}

func (w *listWriter) writeJSON(out *bytes.Buffer, apiVersion, kind string, lm metav1.ListMeta) error {
	lmb, err := json.Marshal(lm)
	if err != nil {
		return err
	}
	av, _ := json.Marshal(apiVersion)
	k, _ := json.Marshal(kind)
	out.WriteString(`{"kind":`)
	out.Write(k)
	out.WriteString(`,"apiVersion":`)
	out.Write(av)
	out.WriteString(`,"metadata":`)
	out.Write(lmb)
	out.WriteString(`,"items":[`)
	out.Write(w.items.Bytes())
	out.WriteString("]}\n")
	return nil
}

// appendField appends a length-delimited protobuf field.
func appendField(buf *bytes.Buffer, field int, b []byte) {
	var tmp [binary.MaxVarintLen64]byte
	n := binary.PutUvarint(tmp[:], uint64(field<<3|2))
	buf.Write(tmp[:n])
	n = binary.PutUvarint(tmp[:], uint64(len(b)))
	buf.Write(tmp[:n])
	buf.Write(b)
}

// encodeWatchEvent appends one watch event whose object is already
// encoded (obj: JSON, or protobuf with its envelope): a JSON line, or a
// length-prefixed protobuf WatchEvent.
func encodeWatchEvent(buf *bytes.Buffer, f format, typ string, obj []byte) error {
	if f == formatProtobuf {
		we := metav1.WatchEvent{Type: typ, Object: runtime.RawExtension{Raw: obj}}
		b, err := we.Marshal()
		if err != nil {
			return err
		}
		var l [4]byte
		binary.BigEndian.PutUint32(l[:], uint32(len(b)))
		buf.Write(l[:])
		buf.Write(b)
		return nil
	}
	t, _ := json.Marshal(typ)
	buf.WriteString(`{"type":`)
	buf.Write(t)
	buf.WriteString(`,"object":`)
	buf.Write(bytes.TrimRight(obj, "\n"))
	buf.WriteString("}\n")
	return nil
}
