package codec_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/boltinformer/boltinformer/internal/codec"
	"github.com/boltinformer/boltinformer/internal/testobj"
	"github.com/boltinformer/boltinformer/store"
)

// TestEncoderMatchesEncode: the Encoder writes the records Encode and
// store.EncodeRecord write (byte for byte for plaintext; sealed payloads
// differ by their nonce, so they are compared decoded), for Pods that fit
// the free space and Pods that do not (a 3 MB annotation, larger than a
// chunk, makes the in-place marshal fall back to sizing it first).
func TestEncoderMatchesEncode(t *testing.T) {
	big := testobj.Pod(1, 3, 2, "7")
	big.Annotations = map[string]string{"blob": strings.Repeat("x", 3<<20)}
	pods := []runtime.Object{big}
	for i := range 600 { // more than one chunk's worth
		pods = append(pods, testobj.Pod(i, 3, 2, fmt.Sprint(i)))
	}
	pods = append(pods, big.DeepCopy())
	keyring := &codec.Keyring{Current: "k1", Keys: map[string][]byte{"k1": bytes.Repeat([]byte{1}, 32)}}
	for _, tc := range []struct {
		name    string
		example runtime.Object
		opts    *codec.Options
		objs    []runtime.Object
	}{
		{"protobuf", &corev1.Pod{}, nil, pods},
		{"json", &corev1.Pod{}, &codec.Options{ForceJSON: true}, pods[:20]},
		{"sealed", &corev1.Pod{}, &codec.Options{Keyring: keyring}, pods[:20]},
		{"unstructured", &unstructured.Unstructured{}, nil, []runtime.Object{&unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "example.com/v1", "kind": "Thing",
			"metadata": map[string]any{"name": "a", "namespace": "ns", "uid": "u1", "resourceVersion": "3"},
		}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := codec.New(tc.example, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			var rb store.RecordBuffer
			defer rb.Release()
			enc := c.NewEncoder(&rb)
			indexed := []store.IndexValues{{Index: "namespace", Values: []string{"ns"}}}
			var got, want [][]byte
			for i, obj := range tc.objs {
				key := fmt.Sprintf("ns/obj-%d", i)
				r := &store.Record{Indexed: indexed}
				raw, err := enc.Encode(key, obj, r)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, raw)
				exp, err := c.Encode(key, obj)
				if err != nil {
					t.Fatal(err)
				}
				exp.Indexed = indexed
				b, err := store.EncodeRecord(key, exp)
				if err != nil {
					t.Fatal(err)
				}
				want = append(want, b)
			}
			for i := range got {
				key := fmt.Sprintf("ns/obj-%d", i)
				if c.Encrypted() {
					g, err := store.DecodeRecord(key, got[i])
					if err != nil {
						t.Fatal(err)
					}
					obj, err := c.Decode(key, g)
					if err != nil {
						t.Fatal(err)
					}
					if obj.(*corev1.Pod).Name != tc.objs[i].(*corev1.Pod).Name {
						t.Fatalf("record %d: decodes to %s", i, obj.(*corev1.Pod).Name)
					}
					continue
				}
				if !bytes.Equal(got[i], want[i]) {
					t.Fatalf("record %d: the Encoder's bytes differ from Encode's", i)
				}
			}
		})
	}
}

// notRegistered is an object type no scheme knows.
type notRegistered struct {
	metav1.TypeMeta
	metav1.ObjectMeta
}

func (n *notRegistered) DeepCopyObject() runtime.Object { c := *n; return &c }

// TestEncoderErrors: what Encode refuses, the Encoder refuses, and the
// buffer stays usable. Objects of other kinds of the scheme are stored.
func TestEncoderErrors(t *testing.T) {
	c, err := codec.New(&corev1.Pod{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var rb store.RecordBuffer
	defer rb.Release()
	enc := c.NewEncoder(&rb)
	for _, obj := range []any{"a string", &notRegistered{}, corev1.Pod{}} {
		if _, err := enc.Encode("ns/x", obj, &store.Record{}); !errors.Is(err, codec.ErrUnsupportedType) {
			t.Errorf("%T: %v", obj, err)
		}
		if err := c.Storable(obj); !errors.Is(err, codec.ErrUnsupportedType) {
			t.Errorf("Storable(%T): %v", obj, err)
		}
	}
	r := &store.Record{}
	if _, err := enc.Encode("ns/x", &corev1.Node{}, r); err != nil || r.Type != "/v1, Kind=Node" {
		t.Fatalf("a Node in a Pod informer: type %q, %v", r.Type, err)
	}
	if _, err := enc.Encode("ns/x", testobj.Pod(1, 1, 1, "1"), &store.Record{}); err != nil {
		t.Fatal(err)
	}
}
