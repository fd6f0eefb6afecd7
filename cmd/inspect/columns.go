package main

import (
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/boltinformer/boltinformer/internal/columns"
)

// objectTable is the table of objects of one informer, whose objects are
// of kind (empty: unknown). Undecoded records show their envelope.
func objectTable(objs []*object, kind schema.GroupVersionKind, withNamespace, wide bool, now time.Time) *table {
	t := &table{}
	if withNamespace {
		t.headers = append(t.headers, "NAMESPACE")
	}
	t.headers = append(t.headers, "NAME")
	decoded := false
	for _, o := range objs {
		decoded = decoded || o.obj != nil
	}
	if !decoded && len(objs) > 0 {
		// Nothing decodes (a type this inspect does not know): envelopes.
		t.headers = append(t.headers, "UID", "RESOURCEVERSION", "CODEC", "BYTES")
		for _, o := range objs {
			ns, name := o.namespaceName()
			row := []string{name, orNone(o.rec.UID), orNone(o.rec.ResourceVersion), codecName(o.rec), strconv.Itoa(len(o.rec.Payload))}
			if withNamespace {
				row = append([]string{orNone(ns)}, row...)
			}
			t.add(row...)
		}
		return t
	}
	cols, _ := columns.For(kind.GroupKind())
	t.headers = append(t.headers, cols.Headers...)
	t.headers = append(t.headers, "AGE")
	if wide {
		t.headers = append(t.headers, cols.Wide...)
		t.headers = append(t.headers, "RESOURCEVERSION", "CODEC", "BYTES")
	}
	for _, o := range objs {
		ns, name := o.namespaceName()
		cells, wcells := columns.Unknown(len(cols.Headers)), columns.Unknown(len(cols.Wide))
		created := time.Time{}
		if o.obj != nil {
			if cols.Cells != nil && o.gvk.GroupKind() == kind.GroupKind() {
				cells, wcells = cols.Cells(o.obj)
			}
			if m, err := meta.Accessor(o.obj); err == nil {
				created = m.GetCreationTimestamp().Time
				ns, name = m.GetNamespace(), m.GetName()
			}
		}
		var row []string
		if withNamespace {
			row = append(row, orNone(ns))
		}
		row = append(row, name)
		row = append(row, cells...)
		row = append(row, columns.Age(now, created))
		if wide {
			row = append(row, wcells...)
			row = append(row, orNone(o.rec.ResourceVersion), codecName(o.rec), strconv.Itoa(len(o.rec.Payload)))
		}
		t.add(row...)
	}
	return t
}
