package main

import (
	"io"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/printers"

	"github.com/boltinformer/boltinformer/internal/columns"
)

// objectTable is the table of objects of one informer, whose objects are
// of kind (empty: unknown), as a metav1.Table that cli-runtime's table
// printer prints the way kubectl does (NAMESPACE, -L and --show-labels
// columns, wide columns at priority 1). Its columns are those of
// internal/columns for the kind, shared with the local API's Tables, then
// the record's resourceVersion, codec and payload size in wide output.
// When no object decodes (a type this inspect does not know, or encrypted
// without the key), the table shows the records' envelopes.
func objectTable(objs []*object, kind schema.GroupVersionKind, now time.Time) *metav1.Table {
	t := &metav1.Table{ColumnDefinitions: []metav1.TableColumnDefinition{{Name: "Name", Type: "string", Format: "name"}}}
	col := func(priority int32, names ...string) {
		for _, n := range names {
			t.ColumnDefinitions = append(t.ColumnDefinitions, metav1.TableColumnDefinition{Name: n, Type: "string", Priority: priority})
		}
	}
	row := func(o *object, cells ...string) {
		u := o.printable()
		r := metav1.TableRow{Object: runtime.RawExtension{Object: u}}
		_, name := o.namespaceName()
		if n := u.GetName(); n != "" {
			name = n
		}
		r.Cells = append(r.Cells, name)
		for _, c := range cells {
			r.Cells = append(r.Cells, c)
		}
		t.Rows = append(t.Rows, r)
	}
	decoded := false
	for _, o := range objs {
		decoded = decoded || o.obj != nil
	}
	if !decoded && len(objs) > 0 {
		// Nothing decodes: the envelopes.
		col(0, "UID", "RESOURCEVERSION", "CODEC", "BYTES")
		for _, o := range objs {
			row(o, orNone(o.rec.UID), orNone(o.rec.ResourceVersion), codecName(o.rec), strconv.Itoa(len(o.rec.Payload)))
		}
		return t
	}
	cols, _ := columns.For(kind.GroupKind())
	col(0, cols.Headers...)
	col(0, "AGE")
	col(0, cols.AfterAge...)
	col(1, cols.Wide...)
	col(1, "RESOURCEVERSION", "CODEC", "BYTES")
	for _, o := range objs {
		cells, wcells := columns.Unknown(len(cols.Headers)+len(cols.AfterAge)), columns.Unknown(len(cols.Wide))
		created := time.Time{}
		if o.obj != nil {
			if cols.Cells != nil && o.gvk.GroupKind() == kind.GroupKind() {
				cells, wcells = cols.Cells(o.obj, now)
			}
			if m, err := meta.Accessor(o.obj); err == nil {
				created = m.GetCreationTimestamp().Time
			}
		}
		before, after := cols.Split(cells)
		all := append(append([]string{}, before...), columns.Age(now, created))
		all = append(all, after...)
		all = append(all, wcells...)
		all = append(all, orNone(o.rec.ResourceVersion), codecName(o.rec), strconv.Itoa(len(o.rec.Payload)))
		row(o, all...)
	}
	return t
}

// printTable prints t as kubectl does.
func printTable(w io.Writer, t *metav1.Table, p *printFlags, withNamespace bool) error {
	return printers.NewTablePrinter(printers.PrintOptions{
		NoHeaders:     p.noHeaders,
		WithNamespace: withNamespace,
		Wide:          p.wide(),
		ShowLabels:    p.showLabels,
		ColumnLabels:  p.labelColumns,
	}).PrintObj(t, w)
}
