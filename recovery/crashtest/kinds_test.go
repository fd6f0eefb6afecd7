package crashtest_test

// A History of your own kind: a CRD-like typed struct registered in a
// scheme, and unstructured objects. Event i is a pure function of the seed
// and i for them as for Pods; a Source rebuilt from the history serves
// them to boltinformer, and VerifyFile checks the file against the truth.

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/recovery/crashtest"
)

// Widget is a custom resource's Go type, as kubebuilder would generate it.
type Widget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              WidgetSpec `json:"spec"`
}

// WidgetSpec is a Widget's spec.
type WidgetSpec struct {
	Color string   `json:"color"`
	Size  int64    `json:"size"`
	Tags  []string `json:"tags,omitempty"`
}

func (w *Widget) DeepCopyObject() runtime.Object {
	c := *w
	w.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	c.Spec.Tags = append([]string(nil), w.Spec.Tags...)
	return &c
}

// WidgetList is a list of Widgets.
type WidgetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Widget `json:"items"`
}

func (l *WidgetList) DeepCopyObject() runtime.Object {
	c := *l
	l.ListMeta.DeepCopyInto(&c.ListMeta)
	c.Items = make([]Widget, len(l.Items))
	for i := range l.Items {
		c.Items[i] = *l.Items[i].DeepCopyObject().(*Widget)
	}
	return &c
}

var widgetGV = schema.GroupVersion{Group: "example.com", Version: "v1"}

func widgetScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	s.AddKnownTypes(widgetGV, &Widget{}, &WidgetList{})
	metav1.AddToGroupVersion(s, widgetGV)
	return s
}

var colors = []string{"red", "green", "blue", "black"}

// newWidget is the typed history's Object: a pure function of the spec.
func newWidget(o crashtest.ObjectSpec) runtime.Object {
	return &Widget{
		TypeMeta: metav1.TypeMeta{APIVersion: widgetGV.String(), Kind: "Widget"},
		Spec: WidgetSpec{
			Color: colors[o.Rand%uint64(len(colors))],
			Size:  int64(o.Rand>>8) % 1000,
			Tags:  []string{fmt.Sprintf("key-%d", o.Key), fmt.Sprintf("incarnation-%d", o.Created)},
		},
	}
}

// newGadget is the unstructured history's Object.
func newGadget(o crashtest.ObjectSpec) runtime.Object {
	u := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{
			"color":   colors[o.Rand%uint64(len(colors))],
			"replica": int64(o.Rand>>8) % 7,
		},
	}}
	u.SetAPIVersion("example.com/v1")
	u.SetKind("Gadget")
	return u
}

// colorIndex indexes both kinds by spec.color.
func colorIndex(obj any) ([]string, error) {
	switch o := obj.(type) {
	case *Widget:
		return []string{o.Spec.Color}, nil
	case *unstructured.Unstructured:
		c, _, err := unstructured.NestedString(o.Object, "spec", "color")
		return []string{c}, err
	}
	return nil, fmt.Errorf("unexpected %T", obj)
}

func TestHistoryOfYourOwnKinds(t *testing.T) {
	for _, c := range []struct {
		name    string
		opts    crashtest.HistoryOptions
		example runtime.Object
		scheme  *runtime.Scheme
	}{
		{"typed", crashtest.HistoryOptions{Keys: 40, Growth: 10, MaxKeys: 90, MaxPadding: 256, Object: newWidget,
			NewList: func() runtime.Object { return &WidgetList{} }}, &Widget{}, widgetScheme()},
		{"typed without NewList", crashtest.HistoryOptions{Keys: 30, MaxPadding: 64, Object: newWidget}, &Widget{}, widgetScheme()},
		{"unstructured", crashtest.HistoryOptions{Keys: 40, Growth: 10, MaxKeys: 90, MaxPadding: 256, Object: newGadget, NamePrefix: "gadget"},
			func() runtime.Object {
				u := &unstructured.Unstructured{}
				u.SetAPIVersion("example.com/v1")
				u.SetKind("Gadget")
				return u
			}(), nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := crashtest.NewHistory(11, &c.opts)
			// Event i is a pure function of the seed and i: another
			// History of the seed (another process) agrees on every event
			// and state; another seed does not.
			h2 := crashtest.NewHistory(11, &c.opts)
			e1, e2 := h.Events(0, 300), h2.Events(0, 300)
			for i := range e1 {
				if e1[i].RV != e2[i].RV || e1[i].Type != e2[i].Type || e1[i].Key != e2[i].Key || !apiequality.Semantic.DeepEqual(e1[i].Object, e2[i].Object) {
					t.Fatalf("event %d differs between two histories of one seed:\n%+v\n%+v", i+1, e1[i], e2[i])
				}
			}
			if err := crashtest.Compare(objects(h2.StateAt(250)), h.StateAt(250)); err != nil {
				t.Fatalf("two histories of one seed: %v", err)
			}
			if crashtest.Compare(objects(crashtest.NewHistory(12, &c.opts).StateAt(250)), h.StateAt(250)) == nil {
				t.Fatal("another seed has the same state")
			}
			if got := fmt.Sprintf("%T", e1[0].Object); got != fmt.Sprintf("%T", c.example) {
				t.Fatalf("objects of type %s, want %T", got, c.example)
			}

			// The history as a Source, served to a boltinformer informer;
			// the file is the truth at its saved resourceVersion.
			src := h.Source(0, 150)
			if err := crashtest.Compare(objects(src.StateAt(150)), h.StateAt(150)); err != nil {
				t.Fatalf("Source(0, 150): %v", err)
			}
			path := filepath.Join(t.TempDir(), "cache.db")
			logger := klog.Background().V(5)
			db, err := boltinformer.Open(path, &boltinformer.Options{Logger: &logger, NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			indexers := cache.Indexers{"color": colorIndex}
			inf, err := db.NewInformer("things", src, c.example, 0, indexers, &boltinformer.InformerOptions{Scheme: c.scheme})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				defer close(done)
				inf.RunWithContext(ctx)
			}()
			for _, e := range h.Events(150, 300) {
				if err := src.Apply(e); err != nil {
					t.Fatal(err)
				}
			}
			deadline := time.Now().Add(time.Minute) // a bound against a hang
			for crashtest.Compare(inf.GetStore().List(), h.StateAt(300)) != nil {
				if time.Now().After(deadline) {
					t.Fatalf("the informer did not reach resourceVersion 300: %v", crashtest.Compare(inf.GetStore().List(), h.StateAt(300)))
				}
				time.Sleep(5 * time.Millisecond)
			}
			cancel()
			<-done
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			fs, err := crashtest.VerifyFile(path, "things", h.StateAt, &crashtest.VerifyOptions{Example: c.example, Scheme: c.scheme, Indexers: indexers})
			if err != nil {
				t.Fatal(err)
			}
			if fs.RV != 300 || fs.Decoded != fs.Objects || fs.Objects == 0 {
				t.Fatalf("file %+v: want resourceVersion 300, every object decoded", fs)
			}
		})
	}
}
