package codec_test

import (
	"bytes"
	"errors"
	"os"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/boltinformer/boltinformer/internal/codec"
	"github.com/boltinformer/boltinformer/internal/testobj"
	"github.com/boltinformer/boltinformer/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func roundTrip(t *testing.T, c *codec.Codec, key string, obj runtime.Object) runtime.Object {
	t.Helper()
	r, err := c.Encode(key, obj)
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	raw, err := store.EncodeRecord(key, r)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := store.DecodeRecord(key, raw)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Decode(key, r2)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	return got
}

func TestRoundTripExact(t *testing.T) {
	pod := testobj.Pod(7, 3, 2, "42")
	for _, tc := range []struct {
		name string
		opts *codec.Options
		want store.Codec
	}{
		{"protobuf", nil, store.CodecKubeProtobuf},
		{"json", &codec.Options{ForceJSON: true}, store.CodecJSON},
		{"sealed", &codec.Options{Keyring: &codec.Keyring{Current: "k1", Keys: map[string][]byte{"k1": bytes.Repeat([]byte{1}, 32)}}}, store.CodecKubeProtobuf},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := codec.New(&corev1.Pod{}, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if c.Kind() != tc.want {
				t.Fatalf("codec %v, want %v", c.Kind(), tc.want)
			}
			got := roundTrip(t, c, "ns-1/pod-000007", pod)
			if !apiequality.Semantic.DeepEqual(got, pod) || !reflect.DeepEqual(got.(*corev1.Pod).Spec.Containers[0].Resources.Requests.Cpu().String(), "250m") {
				t.Fatalf("round trip differs:\n got %#v\nwant %#v", got, pod)
			}
			// TypeMeta is restored as it was: empty here, set below.
			if got.GetObjectKind().GroupVersionKind().Kind != "" {
				t.Fatalf("TypeMeta was invented: %v", got.GetObjectKind().GroupVersionKind())
			}
			withTM := pod.DeepCopy()
			withTM.APIVersion, withTM.Kind = "v1", "Pod"
			if got := roundTrip(t, c, "k", withTM); got.(*corev1.Pod).Kind != "Pod" || got.(*corev1.Pod).APIVersion != "v1" {
				t.Fatalf("TypeMeta lost: %#v", got.(*corev1.Pod).TypeMeta)
			}
		})
	}
}

func TestUnstructuredRoundTrip(t *testing.T) {
	c, err := codec.New(&unstructured.Unstructured{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	u := testobj.Unstructured(3, "default", "9")
	got := roundTrip(t, c, "default/widget-3", u)
	// JSON numbers come back as int64 and float64, exactly as the dynamic
	// client produces them.
	want := u.DeepCopy()
	want.Object["spec"].(map[string]any)["tags"] = []any{"a", "b"}
	if !reflect.DeepEqual(got.(*unstructured.Unstructured).Object, want.Object) {
		t.Fatalf("got %#v\nwant %#v", got, want)
	}
}

func TestWrongKey(t *testing.T) {
	k1 := &codec.Keyring{Current: "k1", Keys: map[string][]byte{"k1": bytes.Repeat([]byte{1}, 32)}}
	c1, _ := codec.New(&corev1.Secret{}, &codec.Options{Keyring: k1})
	s := &corev1.Secret{Data: map[string][]byte{"password": []byte("hunter2")}}
	s.Name, s.Namespace = "db", "prod"
	r, err := c1.Encode("prod/db", s)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(r.Payload, []byte("hunter2")) {
		t.Fatal("sealed payload contains the plaintext")
	}
	if r.KeyID != "k1" {
		t.Fatalf("key id %q", r.KeyID)
	}
	wrong := &codec.Keyring{Current: "k1", Keys: map[string][]byte{"k1": bytes.Repeat([]byte{2}, 32)}}
	c2, _ := codec.New(&corev1.Secret{}, &codec.Options{Keyring: wrong})
	if _, err := c2.Decode("prod/db", r); !errors.Is(err, codec.ErrWrongKey) {
		t.Fatalf("wrong key: %v", err)
	}
	plain, _ := codec.New(&corev1.Secret{}, nil)
	if _, err := plain.Decode("prod/db", r); !errors.Is(err, codec.ErrEncrypted) {
		t.Fatalf("no key: %v", err)
	}
	// Rotation: the new current key seals, the old one still opens.
	rotated := &codec.Keyring{Current: "k2", Keys: map[string][]byte{"k1": k1.Keys["k1"], "k2": bytes.Repeat([]byte{3}, 16)}}
	c3, _ := codec.New(&corev1.Secret{}, &codec.Options{Keyring: rotated})
	if got, err := c3.Decode("prod/db", r); err != nil || string(got.(*corev1.Secret).Data["password"]) != "hunter2" {
		t.Fatalf("rotated keyring: %v", err)
	}
	// A record moved to another key does not open.
	if _, err := c1.Decode("prod/other", r); !errors.Is(err, codec.ErrWrongKey) {
		t.Fatalf("swapped record: %v", err)
	}
}

func TestGarbagePayload(t *testing.T) {
	c, _ := codec.New(&corev1.Pod{}, nil)
	for _, p := range [][]byte{nil, {0xff}, bytes.Repeat([]byte{0x0a, 0xff}, 40), []byte("{}")} {
		if _, err := c.Decode("k", &store.Record{Codec: store.CodecProtobuf, Payload: p}); err == nil && len(p) < 2 {
			t.Errorf("payload %x decoded", p)
		}
		if _, err := c.Decode("k", &store.Record{Codec: store.CodecKubeProtobuf, Payload: p}); err == nil {
			t.Errorf("kube-protobuf payload %x decoded", p)
		}
	}
	if _, err := c.Decode("k", &store.Record{Codec: 99, Payload: []byte{1}}); !errors.Is(err, codec.ErrUnknownCodec) {
		t.Fatalf("unknown codec: %v", err)
	}
}

// The benchmark behind the payload choice in docs/FORMAT.md.
func BenchmarkPayload(b *testing.B) {
	pod := testobj.Pod(1, 10, 10, "123456")
	pb, _ := codec.New(&corev1.Pod{}, nil)
	js, _ := codec.New(&corev1.Pod{}, &codec.Options{ForceJSON: true})
	for _, c := range []struct {
		name   string
		encode func() []byte
		decode func([]byte) error
	}{
		{"codec=kube-protobuf", func() []byte { r, _ := pb.Encode("k", pod); return r.Payload }, func(p []byte) error {
			_, err := pb.Decode("k", &store.Record{Codec: store.CodecKubeProtobuf, Payload: p})
			return err
		}},
		{"codec=protobuf", func() []byte { p, _ := pod.Marshal(); return p }, func(p []byte) error {
			_, err := pb.Decode("k", &store.Record{Codec: store.CodecProtobuf, Payload: p})
			return err
		}},
		{"codec=json", func() []byte { r, _ := js.Encode("k", pod); return r.Payload }, func(p []byte) error {
			_, err := js.Decode("k", &store.Record{Codec: store.CodecJSON, Payload: p})
			return err
		}},
		{"codec=msgpack-struct", func() []byte { p, _ := msgpack.Marshal(pod); return p }, func(p []byte) error {
			var out corev1.Pod
			return msgpack.Unmarshal(p, &out)
		}},
	} {
		payload := c.encode()
		b.Run(c.name+"/decode", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := c.decode(payload); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(payload)), "bytes/obj")
		})
		b.Run(c.name+"/encode", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = c.encode()
			}
		})
	}
}

// TestMsgpackIsLossy documents why Kubernetes objects are never msgpacked.
func TestMsgpackIsLossy(t *testing.T) {
	pod := testobj.Pod(1, 1, 1, "1")
	p, err := msgpack.Marshal(pod)
	if err != nil {
		t.Skip("msgpack cannot encode a Pod:", err)
	}
	var out corev1.Pod
	if err := msgpack.Unmarshal(p, &out); err != nil {
		t.Skip("msgpack cannot decode a Pod:", err)
	}
	if apiequality.Semantic.DeepEqual(&out, pod) {
		t.Fatal("msgpack round trip of a Pod is exact; revisit the codec choice in docs/FORMAT.md")
	}
}

func FuzzDecodePayload(f *testing.F) {
	pb, _ := codec.New(&corev1.Pod{}, nil)
	r, _ := pb.Encode("k", testobj.Pod(1, 1, 1, "1"))
	f.Add(uint8(store.CodecKubeProtobuf), r.Payload)
	if _, _, raw, err := store.SplitKubeProtobuf(r.Payload); err == nil {
		f.Add(uint8(store.CodecProtobuf), raw)
	}
	j, _ := utiljson.Marshal(testobj.Pod(2, 1, 1, "2"))
	f.Add(uint8(store.CodecJSON), j)
	f.Add(uint8(store.CodecJSON), []byte(`{"apiVersion":"example.com/v1","kind":"W","metadata":{"name":"x"}}`))
	if seed, err := os.ReadFile("testdata/seed.bin"); err == nil {
		f.Add(uint8(store.CodecKubeProtobuf), seed)
	}
	f.Fuzz(func(t *testing.T, kind uint8, payload []byte) {
		_, _ = codec.DecodePayload(store.Codec(kind), payload, &corev1.Pod{})
		_, _ = codec.DecodePayload(store.Codec(kind), payload, &unstructured.Unstructured{})
	})
}

func TestKeyringValidate(t *testing.T) {
	key := bytes.Repeat([]byte{1}, 32)
	for name, k := range map[string]*codec.Keyring{
		"no keys":         {Current: "k1"},
		"empty":           {},
		"empty id":        {Current: "", Keys: map[string][]byte{"": key}},
		"bad key":         {Current: "k1", Keys: map[string][]byte{"k1": key[:5]}},
		"current missing": {Current: "k2", Keys: map[string][]byte{"k1": key}},
	} {
		if err := k.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %+v", name, k)
		}
	}
	for name, k := range map[string]*codec.Keyring{
		"sealing":      {Current: "k1", Keys: map[string][]byte{"k1": key}},
		"decrypt only": {Keys: map[string][]byte{"k1": key}},
	} {
		if err := k.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestReseal: Reseal moves a record to the codec's current key (or to
// plaintext for a decrypt-only keyring) without decoding the object.
func TestReseal(t *testing.T) {
	k1 := bytes.Repeat([]byte{1}, 32)
	k2 := bytes.Repeat([]byte{2}, 16)
	s := &corev1.Secret{Data: map[string][]byte{"password": []byte("hunter2")}}
	s.Name, s.Namespace = "db", "prod"
	plain, _ := codec.New(&corev1.Secret{}, nil)
	r, err := plain.Encode("prod/db", s)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		keyring *codec.Keyring
		want    string
		changed bool
	}{
		{&codec.Keyring{Current: "k1", Keys: map[string][]byte{"k1": k1}}, "k1", true},
		{&codec.Keyring{Current: "k1", Keys: map[string][]byte{"k1": k1}}, "k1", false},
		{&codec.Keyring{Current: "k2", Keys: map[string][]byte{"k1": k1, "k2": k2}}, "k2", true},
		{&codec.Keyring{Keys: map[string][]byte{"k2": k2}}, "", true},
		{nil, "", false},
	}
	for i, st := range steps {
		c, err := codec.New(&corev1.Secret{}, &codec.Options{Keyring: st.keyring})
		if err != nil {
			t.Fatal(err)
		}
		if c.KeyID() != st.want || c.Encrypted() != (st.want != "") {
			t.Fatalf("step %d: KeyID %q Encrypted %v", i, c.KeyID(), c.Encrypted())
		}
		changed, err := c.Reseal("prod/db", r)
		if err != nil || changed != st.changed || r.KeyID != st.want {
			t.Fatalf("step %d: Reseal %v, %v; key id %q, want %v, %q", i, changed, err, r.KeyID, st.changed, st.want)
		}
		if bytes.Contains(r.Payload, []byte("hunter2")) != (st.want == "") {
			t.Fatalf("step %d: plaintext in the payload: %v", i, bytes.Contains(r.Payload, []byte("hunter2")))
		}
		got, err := c.Decode("prod/db", r)
		if err != nil || string(got.(*corev1.Secret).Data["password"]) != "hunter2" {
			t.Fatalf("step %d: decode after Reseal: %v", i, err)
		}
	}
	// A keyring without the record's key cannot reseal it.
	c1, _ := codec.New(&corev1.Secret{}, &codec.Options{Keyring: &codec.Keyring{Current: "k1", Keys: map[string][]byte{"k1": k1}}})
	if _, err := c1.Reseal("prod/db", r); err != nil {
		t.Fatal(err)
	}
	c2, _ := codec.New(&corev1.Secret{}, &codec.Options{Keyring: &codec.Keyring{Current: "k2", Keys: map[string][]byte{"k2": k2}}})
	if changed, err := c2.Reseal("prod/db", r); !errors.Is(err, codec.ErrWrongKey) || changed || r.KeyID != "k1" {
		t.Fatalf("Reseal without the record's key: %v, %v, key id %q", changed, err, r.KeyID)
	}
	if _, err := plain.Reseal("prod/db", r); !errors.Is(err, codec.ErrEncrypted) {
		t.Fatalf("Reseal without a keyring: %v", err)
	}
}
