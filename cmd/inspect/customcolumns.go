package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/client-go/util/jsonpath"
)

// customColumnsPrinter prints kubectl's -o custom-columns: a table whose
// columns are named by the user, each cell a jsonpath of the object
// (client-go's jsonpath; kubectl's printer of this format is not in
// cli-runtime). A List prints a row per item. A field that is missing
// prints <none>; several values are joined with commas.
type customColumnsPrinter struct {
	headers   []string
	paths     []*jsonpath.JSONPath
	noHeaders bool
}

// newCustomColumnsPrinter parses spec: "HEADER:PATH,HEADER:PATH" or, from
// a file, a line of headers over a line of paths, separated by blanks.
func newCustomColumnsPrinter(spec string, file, noHeaders bool) (*customColumnsPrinter, error) {
	var headers, exprs []string
	if file {
		sc := bufio.NewScanner(strings.NewReader(spec))
		var lines [][]string
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) > 0 {
				lines = append(lines, f)
			}
		}
		if len(lines) != 2 || len(lines[0]) != len(lines[1]) {
			return nil, fmt.Errorf("-o custom-columns-file: want a line of headers and a line of as many jsonpaths")
		}
		headers, exprs = lines[0], lines[1]
	} else {
		for _, col := range strings.Split(spec, ",") {
			h, e, ok := strings.Cut(col, ":")
			if !ok || h == "" || e == "" {
				return nil, fmt.Errorf("-o custom-columns=%s: want HEADER:JSONPATH[,HEADER:JSONPATH...], got %q", spec, col)
			}
			headers, exprs = append(headers, h), append(exprs, e)
		}
	}
	p := &customColumnsPrinter{headers: headers, noHeaders: noHeaders}
	for i, e := range exprs {
		rel, err := relaxedJSONPath(e)
		if err != nil {
			return nil, fmt.Errorf("-o custom-columns: column %s: %w", headers[i], err)
		}
		jp := jsonpath.New(headers[i]).AllowMissingKeys(true)
		if err := jp.Parse(rel); err != nil {
			return nil, fmt.Errorf("-o custom-columns: column %s: %w", headers[i], err)
		}
		p.paths = append(p.paths, jp)
	}
	return p, nil
}

var jsonPathBraces = regexp.MustCompile(`^\{.*\}$`)

// relaxedJSONPath accepts kubectl's spellings of a path: {.a.b}, .a.b and
// a.b.
func relaxedJSONPath(e string) (string, error) {
	e = strings.TrimSpace(e)
	if jsonPathBraces.MatchString(e) {
		return e, nil
	}
	if e == "" || strings.ContainsAny(e, "{}") {
		return "", fmt.Errorf("unexpected path %q, want {.a.b}, .a.b or a.b", e)
	}
	if !strings.HasPrefix(e, ".") {
		e = "." + e
	}
	return "{" + e + "}", nil
}

var _ printers.ResourcePrinter = (*customColumnsPrinter)(nil)

// PrintObj prints obj's row, or a row per item of a List.
func (p *customColumnsPrinter) PrintObj(obj runtime.Object, w io.Writer) error {
	items := []runtime.Object{obj}
	if meta.IsListType(obj) {
		var err error
		if items, err = meta.ExtractList(obj); err != nil {
			return err
		}
	}
	tw := printers.GetNewTabWriter(w)
	if !p.noHeaders {
		fmt.Fprintln(tw, strings.Join(p.headers, "\t"))
	}
	for _, it := range items {
		var content any = it
		if u, ok := it.(runtime.Unstructured); ok {
			content = u.UnstructuredContent()
		}
		cells := make([]string, len(p.paths))
		for i, jp := range p.paths {
			results, err := jp.FindResults(content)
			if err != nil {
				return err
			}
			var vals []string
			for _, rs := range results {
				for _, v := range rs {
					if s, ok := printable(v); ok {
						vals = append(vals, s)
					}
				}
			}
			cells[i] = strings.Join(vals, ",")
			if len(vals) == 0 {
				cells[i] = "<none>"
			}
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

// printable is a jsonpath result as a cell, or false for a nil value.
func printable(v reflect.Value) (string, bool) {
	for v.Kind() == reflect.Interface || v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return "", false
		}
		v = v.Elem()
	}
	var buf bytes.Buffer
	if err := jsonpath.New("cell").PrintResults(&buf, []reflect.Value{v}); err != nil {
		return fmt.Sprint(v.Interface()), true
	}
	return buf.String(), true
}
