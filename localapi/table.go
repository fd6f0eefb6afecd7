package localapi

import (
	"bytes"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/boltinformer/boltinformer/internal/columns"
)

// partialMetadata is obj's metadata as a PartialObjectMetadata of
// meta.k8s.io/version (the metadata is shared with obj, not copied deep:
// it is only encoded).
func partialMetadata(obj runtime.Object, version string) runtime.Object {
	m, err := meta.Accessor(obj)
	if err != nil {
		return obj
	}
	p := meta.AsPartialObjectMetadata(m)
	p.SetGroupVersionKind(schema.GroupVersionKind{Group: metav1.GroupName, Version: version, Kind: "PartialObjectMetadata"})
	return p
}

// encodeTable writes objs as a meta.k8s.io Table, with the columns of
// their kind (internal/columns: those of cmd/inspect, in kubectl's manner;
// NAME and AGE for other kinds). Each row carries the object's metadata,
// the whole object or nothing, per includeObject. headers false leaves the
// column definitions out (a watch's events after the first).
func (h *Handler) encodeTable(buf *bytes.Buffer, out output, sv *served, objs []runtime.Object, lm metav1.ListMeta, opts *listOptions, headers bool) error {
	cols, _ := columns.For(schema.GroupKind{Group: sv.res.Group, Kind: sv.res.Kind})
	t := &metav1.Table{
		TypeMeta: metav1.TypeMeta{APIVersion: metav1.GroupName + "/" + out.version, Kind: "Table"},
		ListMeta: lm,
		Rows:     make([]metav1.TableRow, 0, len(objs)),
	}
	if headers {
		t.ColumnDefinitions = append(t.ColumnDefinitions, metav1.TableColumnDefinition{
			Name: "Name", Type: "string", Format: "name", Description: "Name must be unique within a namespace."})
		for _, c := range cols.Headers {
			t.ColumnDefinitions = append(t.ColumnDefinitions, metav1.TableColumnDefinition{Name: c, Type: "string"})
		}
		t.ColumnDefinitions = append(t.ColumnDefinitions, metav1.TableColumnDefinition{
			Name: "Age", Type: "string", Description: "Time since the object was created."})
		for _, c := range cols.AfterAge {
			t.ColumnDefinitions = append(t.ColumnDefinitions, metav1.TableColumnDefinition{Name: c, Type: "string"})
		}
		for _, c := range cols.Wide {
			t.ColumnDefinitions = append(t.ColumnDefinitions, metav1.TableColumnDefinition{Name: c, Type: "string", Priority: 1})
		}
	}
	now := time.Now()
	gvk := sv.res.gvk()
	for _, obj := range objs {
		m, err := meta.Accessor(obj)
		if err != nil {
			return err
		}
		cells, wide := columns.Unknown(len(cols.Headers)+len(cols.AfterAge)), columns.Unknown(len(cols.Wide))
		if cols.Cells != nil {
			cells, wide = cols.Cells(typedOf(obj, gvk), now)
		}
		before, after := cols.Split(cells)
		row := metav1.TableRow{Cells: make([]any, 0, 2+len(cells)+len(wide))}
		row.Cells = append(row.Cells, m.GetName())
		for _, c := range before {
			row.Cells = append(row.Cells, c)
		}
		row.Cells = append(row.Cells, columns.Age(now, m.GetCreationTimestamp().Time))
		for _, c := range after {
			row.Cells = append(row.Cells, c)
		}
		for _, c := range wide {
			row.Cells = append(row.Cells, c)
		}
		var embedded runtime.Object
		switch opts.table.IncludeObject {
		case metav1.IncludeNone:
		case metav1.IncludeObject:
			embedded = withKind(obj, gvk)
		default:
			embedded = partialMetadata(obj, out.version)
		}
		if embedded != nil {
			var b bytes.Buffer
			if err := encodeObject(&b, formatJSON, embedded); err != nil {
				return err
			}
			row.Object.Raw = bytes.TrimRight(b.Bytes(), "\n")
		}
		t.Rows = append(t.Rows, row)
	}
	return encodeObject(buf, out.format, t)
}
