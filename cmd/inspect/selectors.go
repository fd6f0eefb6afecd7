package main

import (
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/util/jsonpath"
)

// objectSelector is what -l and --field-selector select.
type objectSelector struct {
	labels labels.Selector
	fields fields.Selector
	// envelopeFields: every field the field selector names is one that
	// envelopes have (metadata.name, namespace, uid, resourceVersion).
	envelopeFields bool
}

// envelopeFieldPaths are the fields of a record's envelope.
var envelopeFieldPaths = map[string]bool{"metadata.name": true, "metadata.namespace": true, "metadata.uid": true, "metadata.resourceVersion": true}

func newObjectSelector(labelSel, fieldSel string) (*objectSelector, error) {
	s := &objectSelector{labels: labels.Everything(), fields: fields.Everything(), envelopeFields: true}
	var err error
	if s.labels, err = labels.Parse(labelSel); err != nil {
		return nil, fmt.Errorf("-l %q: %w", labelSel, err)
	}
	if s.fields, err = fields.ParseSelector(fieldSel); err != nil {
		return nil, fmt.Errorf("--field-selector %q: %w", fieldSel, err)
	}
	for _, r := range s.fields.Requirements() {
		s.envelopeFields = s.envelopeFields && envelopeFieldPaths[r.Field]
	}
	return s, nil
}

func (s *objectSelector) empty() bool { return s.labels.Empty() && s.fields.Empty() }

// matches reports whether o is selected, and whether it could be judged:
// an envelope (an object that does not decode) has no labels, and has
// only the fields of envelopeFieldPaths.
func (s *objectSelector) matches(o *object) (match, judged bool) {
	if o.obj == nil && (!s.labels.Empty() || !s.envelopeFields) {
		return false, false
	}
	u := o.printable()
	if !s.labels.Matches(labels.Set(u.GetLabels())) {
		return false, true
	}
	if s.fields.Empty() {
		return true, true
	}
	set := fields.Set{}
	for _, r := range s.fields.Requirements() {
		set[r.Field] = fieldValue(u.Object, r.Field)
	}
	return s.fields.Matches(set), true
}

// fieldValue is the value at a dotted path as a field selector compares
// it: a string, a number or a boolean as JSON writes it, "" when absent.
func fieldValue(m map[string]any, path string) string {
	var cur any = m
	for _, p := range strings.Split(path, ".") {
		mm, ok := cur.(map[string]any)
		if !ok {
			return ""
		}
		if cur, ok = mm[p]; !ok {
			return ""
		}
	}
	switch v := cur.(type) {
	case string:
		return v
	case bool, int64, float64:
		return fmt.Sprint(v)
	}
	return ""
}

// sortObjects sorts objs by the value of a jsonpath (--sort-by, kubectl's
// habit: numbers as numbers, times as times, other values as strings; an
// object without the field comes first), keeping the order of equal ones.
func sortObjects(objs []*object, expr string) error {
	rel, err := relaxedJSONPath(expr)
	if err != nil {
		return fmt.Errorf("--sort-by %q: %w", expr, err)
	}
	jp := jsonpath.New("sort-by").AllowMissingKeys(true)
	if err := jp.Parse(rel); err != nil {
		return fmt.Errorf("--sort-by %q: %w", expr, err)
	}
	keys := make([]sortKey, len(objs))
	for i, o := range objs {
		results, err := jp.FindResults(o.printable().Object)
		if err != nil {
			return fmt.Errorf("--sort-by %q: %w", expr, err)
		}
		if len(results) > 0 && len(results[0]) > 0 {
			if len(results) > 1 || len(results[0]) > 1 {
				return fmt.Errorf("--sort-by %q: object %q has several values there: sort by one field", expr, o.key)
			}
			keys[i] = newSortKey(results[0][0])
		}
	}
	idx := make([]int, len(objs))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return keys[idx[a]].less(keys[idx[b]]) })
	sorted := make([]*object, len(objs))
	for i, j := range idx {
		sorted[i] = objs[j]
	}
	copy(objs, sorted)
	return nil
}

// sortKey is one object's --sort-by value.
type sortKey struct {
	present bool
	num     *float64
	t       *time.Time
	s       string
}

func newSortKey(v reflect.Value) sortKey {
	for v.Kind() == reflect.Interface || v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return sortKey{}
		}
		v = v.Elem()
	}
	k := sortKey{present: true}
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		f := float64(v.Int())
		k.num = &f
	case reflect.Float32, reflect.Float64:
		f := v.Float()
		k.num = &f
	case reflect.String:
		k.s = v.String()
		if t, err := time.Parse(time.RFC3339, k.s); err == nil {
			k.t = &t
		} else if f, err := strconv.ParseFloat(k.s, 64); err == nil && !strings.ContainsAny(k.s, "eE") {
			k.num = &f // a resourceVersion, a count
		}
	default:
		k.s = fmt.Sprint(v.Interface())
	}
	return k
}

func (k sortKey) less(o sortKey) bool {
	switch {
	case !k.present || !o.present:
		return !k.present && o.present
	case k.num != nil && o.num != nil:
		return *k.num < *o.num
	case k.t != nil && o.t != nil:
		return k.t.Before(*o.t)
	}
	return k.s < o.s
}
