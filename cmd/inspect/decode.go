package main

import (
	"encoding/base64"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"

	"github.com/boltinformer/boltinformer/internal/codec"
	"github.com/boltinformer/boltinformer/internal/encryptionconfig"
	"github.com/boltinformer/boltinformer/store"
)

// object is one stored object as the commands print it.
type object struct {
	key string
	rec *store.Record
	// obj is the decoded object (typed, or *unstructured.Unstructured for
	// JSON of types not in the scheme), with its TypeMeta set when the kind
	// is known; nil when only the envelope could be read.
	obj runtime.Object
	// gvk is the object's kind, when known.
	gvk schema.GroupVersionKind
	// failed means the payload should have decoded and did not (a damaged
	// payload); reason says why obj is nil either way.
	failed bool
	reason string
	// keyErr, when set, is why an encrypted payload was not decrypted (no
	// --key-file, or one without the key that opens it): an *exitError
	// wrapping codec.ErrEncrypted or codec.ErrWrongKey. The object is its
	// envelope.
	keyErr error
	// u is printable's result, once made.
	u *unstructured.Unstructured
}

// namespaceName splits the object's key.
func (o *object) namespaceName() (string, string) {
	ns, name, err := cache.SplitMetaNamespaceKey(o.key)
	if err != nil {
		return "", o.key
	}
	return ns, name
}

// printable is the object as inspect prints it, in kubectl's form: the
// decoded object as unstructured content (apiVersion and kind set, fields
// as the API's JSON has them), or its envelope (kind Record). It is made
// once and shared: printers may change it (managedFields left out).
func (o *object) printable() *unstructured.Unstructured {
	if o.u != nil {
		return o.u
	}
	switch obj := o.obj.(type) {
	case nil:
	case *unstructured.Unstructured:
		o.u = obj
	default:
		if m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj); err == nil {
			o.u = &unstructured.Unstructured{Object: m}
			if o.u.GetKind() == "" {
				o.u.SetGroupVersionKind(o.gvk)
			}
		}
	}
	if o.u == nil {
		o.u = newEnvelope(o).unstructured()
	}
	return o.u
}

// decoder decodes the records of one informer.
type decoder struct {
	informer string
	kind     schema.GroupVersionKind // the informer's objects', may be empty
	resource schema.GroupResource    // what the key file names them by
	keys     *encryptionconfig.Config
	keyring  *codec.Keyring // keys' for resource, or nil
	codecs   map[schema.GroupVersionKind]*codec.Codec
	raw      *codec.Codec
}

// newDecoder returns the decoder of an informer, whose payloads are
// decrypted with the keys that the key file (nil: none) has for its
// resource.
func newDecoder(informer string, st *store.State, keys *encryptionconfig.Config) *decoder {
	d := &decoder{informer: informer, kind: informerKind(st), resource: informerResource(informer, st), keys: keys,
		codecs: map[schema.GroupVersionKind]*codec.Codec{}}
	d.keyring = keys.For(d.resource)
	return d
}

// decode returns the object of a record stored under key. A payload that
// does not decode is returned as its envelope with the reason (keyErr set
// when a key is missing or wrong); the error is for a key file whose keys
// do not build (never, once parsed).
func (d *decoder) decode(key string, r *store.Record) (*object, error) {
	// The payload's type: the record's Type, or the informer's (the state's
	// kind; else the TypeMeta the object had, if any).
	gvk := d.kind
	switch {
	case r.Type == store.TypeUnstructured:
		gvk = schema.FromAPIVersionAndKind(r.APIVersion, r.Kind)
	case r.Type != "":
		gvk, _ = codec.ParseKind(r.Type)
	case gvk.Empty() && r.Kind != "":
		gvk = schema.FromAPIVersionAndKind(r.APIVersion, r.Kind)
	}
	o := &object{key: key, rec: r, gvk: gvk}
	if _, known := codec.NewKnown(gvk); known && gvk.Kind != "" && r.Type != store.TypeUnstructured {
		c, err := d.codecFor(gvk)
		if err != nil {
			return nil, err
		}
		obj, err := c.Decode(key, r)
		if err != nil {
			return o, d.failure(o, r, err)
		}
		if obj.GetObjectKind().GroupVersionKind().Kind == "" {
			obj.GetObjectKind().SetGroupVersionKind(gvk)
		}
		o.obj = obj
		return o, nil
	}
	if r.Codec != store.CodecJSON {
		o.reason = fmt.Sprintf("%s payload of a type this inspect does not know", r.Codec)
		if r.Type != "" {
			o.reason = fmt.Sprintf("%s payload of type %s, which is not in client-go's scheme", r.Codec, r.Type)
		}
		if gvk.Kind != "" {
			o.reason = fmt.Sprintf("%s payload of type %s, which is not in client-go's scheme", r.Codec, gvk)
		}
		return o, nil
	}
	if d.raw == nil {
		c, err := codec.New(&rawJSON{}, &codec.Options{Keyring: d.keyring})
		if err != nil {
			return nil, fmt.Errorf("--key-file: %w", err)
		}
		d.raw = c
	}
	// A type this inspect does not know: its JSON as a generic object.
	generic := *r
	generic.Type = ""
	obj, err := d.raw.Decode(key, &generic)
	if err != nil {
		return o, d.failure(o, r, err)
	}
	m := obj.(*rawJSON).Object
	if m == nil {
		return o, d.failure(o, r, errors.New("json payload is not an object"))
	}
	u := &unstructured.Unstructured{Object: m}
	if u.GetKind() == "" && gvk.Kind != "" {
		u.SetGroupVersionKind(gvk)
	}
	o.obj, o.gvk = u, u.GroupVersionKind()
	return o, nil
}

// failure records a payload that did not decode: damage, or a key that is
// missing or wrong (keyErr).
func (d *decoder) failure(o *object, r *store.Record, err error) error {
	if errors.Is(err, codec.ErrEncrypted) || errors.Is(err, codec.ErrWrongKey) {
		o.keyErr = d.keyProblem(o.key, r, err)
		o.reason = o.keyErr.Error()
		return nil
	}
	o.failed, o.reason = true, err.Error()
	return nil
}

// keyProblem explains a payload that could not be decrypted.
func (d *decoder) keyProblem(key string, r *store.Record, err error) error {
	res := resourceName(d.resource)
	var msg string
	switch {
	case d.keys == nil:
		msg = fmt.Sprintf("informer %q: object %q is encrypted (key id %q): pass --key-file FILE (an EncryptionConfiguration with the keys of %s)",
			d.informer, key, r.KeyID, res)
	case d.keyring == nil:
		var with []string
		for _, kr := range d.keys.Resources {
			if kr.Keyring != nil {
				with = append(with, kr.Name)
			}
		}
		msg = fmt.Sprintf("informer %q: object %q is encrypted (key id %q), and --key-file has no keys for %s (it has keys for %s)",
			d.informer, key, r.KeyID, res, orNone(strings.Join(with, ", ")))
	case d.keyring.Keys[r.KeyID] == nil:
		msg = fmt.Sprintf("informer %q: object %q is encrypted with key id %q, which --key-file does not have for %s (it has %s)",
			d.informer, key, r.KeyID, res, strings.Join(d.keyring.IDs(), ", "))
	default:
		msg = fmt.Sprintf("informer %q: object %q does not decrypt with key %q of --key-file: wrong key", d.informer, key, r.KeyID)
	}
	return &exitError{code: exitFailure, err: err, msg: msg}
}

func (d *decoder) codecFor(gvk schema.GroupVersionKind) (*codec.Codec, error) {
	if c := d.codecs[gvk]; c != nil {
		return c, nil
	}
	example, ok := codec.NewKnown(gvk)
	if !ok {
		return nil, fmt.Errorf("no type for kind %s", gvk)
	}
	c, err := codec.New(example, &codec.Options{Keyring: d.keyring})
	if err != nil {
		return nil, fmt.Errorf("--key-file: %w", err)
	}
	d.codecs[gvk] = c
	return c, nil
}

// rawJSON is a codec target taking a JSON payload as a generic map: it
// decodes (and unseals) the payloads of types not in the scheme.
type rawJSON struct{ Object map[string]any }

func (r *rawJSON) UnmarshalJSON(b []byte) error     { return utiljson.Unmarshal(b, &r.Object) }
func (r *rawJSON) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }
func (r *rawJSON) DeepCopyObject() runtime.Object {
	return &rawJSON{Object: runtime.DeepCopyJSON(r.Object)}
}

// informerKind is the kind of an informer's objects: the state's Kind
// (written by the indexer), else guessed from its Resource, which is a
// GroupVersionResource string ("/v1, Resource=pods"), a plural resource
// name ("pods") or a Go type ("*v1.Pod", the root package's default).
func informerKind(st *store.State) schema.GroupVersionKind {
	if st == nil {
		return schema.GroupVersionKind{}
	}
	if gvk, ok := parseGVK(st.Kind); ok {
		return gvk
	}
	res := st.Resource
	if gv, r, ok := strings.Cut(res, ", Resource="); ok {
		g, err := schema.ParseGroupVersion(strings.TrimPrefix(gv, "/"))
		if err != nil {
			return schema.GroupVersionKind{}
		}
		return kindForResource(g.WithResource(r), true)
	}
	if strings.HasPrefix(res, "*") {
		return kindForGoType(res)
	}
	if res != "" {
		return kindForResource(schema.GroupVersionResource{Resource: res}, false)
	}
	return schema.GroupVersionKind{}
}

// parseGVK parses schema.GroupVersionKind.String() ("apps/v1, Kind=Deployment",
// "/v1, Kind=Pod").
func parseGVK(s string) (schema.GroupVersionKind, bool) {
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

// kindForResource finds the kind whose plural (as guessed by
// meta.UnsafeGuessKindToResource) or lower-case name is the resource, in
// the resource's group and version (exact) or anywhere, the core group
// first.
func kindForResource(gvr schema.GroupVersionResource, exact bool) schema.GroupVersionKind {
	var found []schema.GroupVersionKind
	for gvk := range scheme.Scheme.AllKnownTypes() {
		if exact && gvk.GroupVersion() != gvr.GroupVersion() {
			continue
		}
		if gvk.Version == runtime.APIVersionInternal || strings.HasSuffix(gvk.Kind, "List") {
			continue
		}
		plural, _ := meta.UnsafeGuessKindToResource(gvk)
		if plural.Resource == gvr.Resource || strings.ToLower(gvk.Kind) == gvr.Resource {
			found = append(found, gvk)
		}
	}
	return first(found)
}

// kindForGoType finds the kind of a Go type printed with %T.
func kindForGoType(name string) schema.GroupVersionKind {
	var found []schema.GroupVersionKind
	for gvk, t := range scheme.Scheme.AllKnownTypes() {
		if "*"+t.String() == name && t.Kind() == reflect.Struct {
			found = append(found, gvk)
		}
	}
	return first(found)
}

// first picks deterministically: core group first, then by group, version.
func first(gvks []schema.GroupVersionKind) schema.GroupVersionKind {
	if len(gvks) == 0 {
		return schema.GroupVersionKind{}
	}
	sort.Slice(gvks, func(i, j int) bool {
		a, b := gvks[i], gvks[j]
		if (a.Group == "") != (b.Group == "") {
			return a.Group == ""
		}
		return a.String() < b.String()
	})
	return gvks[0]
}

// envelope is what inspect prints of a record whose payload it cannot
// decode: the record's fields around the payload.
type envelope struct {
	APIVersion string              `json:"apiVersion"`
	Kind       string              `json:"kind"`
	Metadata   envelopeMetadata    `json:"metadata"`
	Key        string              `json:"key"`
	Codec      string              `json:"codec"`
	KeyID      string              `json:"keyID,omitempty"`
	Object     string              `json:"objectKind,omitempty"`
	Indexed    map[string][]string `json:"indexed,omitempty"`
	Reason     string              `json:"reason"`
	Bytes      int                 `json:"payloadBytes"`
	Payload    []byte              `json:"payload"`
}

type envelopeMetadata struct {
	Name            string `json:"name"`
	Namespace       string `json:"namespace,omitempty"`
	UID             string `json:"uid,omitempty"`
	ResourceVersion string `json:"resourceVersion,omitempty"`
}

// unstructured is the envelope as an object that printers print, with
// the fields its JSON has.
func (e *envelope) unstructured() *unstructured.Unstructured {
	md := map[string]any{"name": e.Metadata.Name}
	for k, v := range map[string]string{"namespace": e.Metadata.Namespace, "uid": e.Metadata.UID, "resourceVersion": e.Metadata.ResourceVersion} {
		if v != "" {
			md[k] = v
		}
	}
	m := map[string]any{
		"apiVersion": e.APIVersion, "kind": e.Kind, "metadata": md, "key": e.Key, "codec": e.Codec,
		"reason": e.Reason, "payloadBytes": int64(e.Bytes), "payload": base64.StdEncoding.EncodeToString(e.Payload),
	}
	if e.KeyID != "" {
		m["keyID"] = e.KeyID
	}
	if e.Object != "" {
		m["objectKind"] = e.Object
	}
	if len(e.Indexed) > 0 {
		idx := map[string]any{}
		for name, values := range e.Indexed {
			vs := make([]any, len(values))
			for i, v := range values {
				vs[i] = v
			}
			idx[name] = vs
		}
		m["indexed"] = idx
	}
	return &unstructured.Unstructured{Object: m}
}

// envelopeKind is the apiVersion and kind of printed envelopes.
const envelopeAPIVersion, envelopeKind = "inspect.boltinformer.io/v1", "Record"

func newEnvelope(o *object) *envelope {
	ns, name := o.namespaceName()
	e := &envelope{
		APIVersion: envelopeAPIVersion,
		Kind:       envelopeKind,
		Metadata:   envelopeMetadata{Name: name, Namespace: ns, UID: o.rec.UID, ResourceVersion: o.rec.ResourceVersion},
		Key:        o.key,
		Codec:      o.rec.Codec.String(),
		KeyID:      o.rec.KeyID,
		Reason:     o.reason,
		Bytes:      len(o.rec.Payload),
		Payload:    o.rec.Payload,
	}
	if !o.gvk.Empty() {
		e.Object = o.gvk.String()
	}
	if len(o.rec.Indexed) > 0 {
		e.Indexed = map[string][]string{}
		for _, iv := range o.rec.Indexed {
			e.Indexed[iv.Index] = iv.Values
		}
	}
	return e
}

// codecName describes a record's payload encoding, e.g. "protobuf+aes(k1)".
func codecName(r *store.Record) string {
	if r.KeyID != "" {
		return fmt.Sprintf("%s+aes(%s)", r.Codec, r.KeyID)
	}
	return r.Codec.String()
}
