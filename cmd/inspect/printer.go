package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/yaml"
)

// Output formats of -o. The empty format is the default table.
const (
	formatTable = ""
	formatWide  = "wide"
	formatName  = "name"
	formatJSON  = "json"
	formatYAML  = "yaml"
	formatJSONL = "jsonl"
)

// printFlags are -o and --no-headers.
type printFlags struct {
	output    string
	noHeaders bool
	allowed   []string
}

// addPrintFlags registers -o (with the formats allowed, the first being
// the default) and, when a table is allowed, --no-headers.
func addPrintFlags(cmd *cobra.Command, allowed ...string) *printFlags {
	p := &printFlags{allowed: allowed}
	var names []string
	for _, f := range allowed {
		if f != formatTable {
			names = append(names, f)
		}
	}
	cmd.Flags().StringVarP(&p.output, "output", "o", allowed[0], "output format: "+strings.Join(names, "|"))
	if slices.Contains(allowed, formatTable) {
		cmd.Flags().BoolVar(&p.noHeaders, "no-headers", false, "do not print table headers")
	}
	return p
}

func (p *printFlags) validate() error {
	if !slices.Contains(p.allowed, p.output) {
		var names []string
		for _, f := range p.allowed {
			if f != formatTable {
				names = append(names, f)
			}
		}
		return fmt.Errorf("unknown output format %q (want one of %s)", p.output, strings.Join(names, ", "))
	}
	return nil
}

func (p *printFlags) table() bool { return p.output == formatTable || p.output == formatWide }
func (p *printFlags) wide() bool  { return p.output == formatWide }

// table is rows of cells printed in columns like kubectl's.
type table struct {
	headers []string
	rows    [][]string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) print(w io.Writer, noHeaders bool) error {
	tw := tabwriter.NewWriter(w, 6, 4, 3, ' ', 0)
	if !noHeaders {
		fmt.Fprintln(tw, strings.Join(t.headers, "\t"))
	}
	for _, r := range t.rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// marshalJSON indents like kubectl (four spaces), without HTML escaping.
func marshalJSON(v any, prefix string) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent(prefix, "    ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

func writeJSON(w io.Writer, v any) error {
	b, err := marshalJSON(v, "")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

func writeYAML(w io.Writer, v any) error {
	b, err := yaml.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// writeValue prints v as JSON or YAML.
func writeValue(w io.Writer, format string, v any) error {
	if format == formatYAML {
		return writeYAML(w, v)
	}
	return writeJSON(w, v)
}

// listWriter streams objects as a kubectl-style List (json, yaml), as
// JSON lines (jsonl) or as names (name), without holding them all.
type listWriter struct {
	w      io.Writer
	format string
	rv     string
	n      int
}

func newListWriter(w io.Writer, format, resourceVersion string) *listWriter {
	return &listWriter{w: w, format: format, rv: resourceVersion}
}

func (l *listWriter) add(o *object) error {
	defer func() { l.n++ }()
	v := o.printable()
	switch l.format {
	case formatName:
		_, err := fmt.Fprintln(l.w, objectName(o))
		return err
	case formatJSONL:
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v); err != nil {
			return err
		}
		_, err := l.w.Write(buf.Bytes())
		return err
	case formatYAML:
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		if l.n == 0 {
			if _, err := io.WriteString(l.w, "apiVersion: v1\nitems:\n"); err != nil {
				return err
			}
		}
		_, err = l.w.Write(indentYAMLItem(b))
		return err
	default:
		b, err := marshalJSON(v, "        ")
		if err != nil {
			return err
		}
		sep := ",\n        "
		if l.n == 0 {
			sep = "{\n    \"apiVersion\": \"v1\",\n    \"items\": [\n        "
		}
		_, err = fmt.Fprintf(l.w, "%s%s", sep, b)
		return err
	}
}

// indentYAMLItem makes a YAML document an item of a block sequence.
func indentYAMLItem(b []byte) []byte {
	var out bytes.Buffer
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	for i, line := range lines {
		switch {
		case i == 0:
			out.WriteString("- ")
		case line != "":
			out.WriteString("  ")
		}
		out.WriteString(line)
		out.WriteByte('\n')
	}
	return out.Bytes()
}

// close ends the List.
func (l *listWriter) close() error {
	tail := map[string]any{"kind": "List", "metadata": map[string]string{"resourceVersion": l.rv}}
	switch l.format {
	case formatYAML:
		b, err := yaml.Marshal(tail)
		if err != nil {
			return err
		}
		head := ""
		if l.n == 0 {
			head = "apiVersion: v1\nitems: []\n"
		}
		_, err = fmt.Fprintf(l.w, "%s%s", head, b)
		return err
	case formatJSON:
		head := "\n    ]"
		if l.n == 0 {
			head = "{\n    \"apiVersion\": \"v1\",\n    \"items\": []"
		}
		rv, _ := marshalJSON(l.rv, "")
		_, err := fmt.Fprintf(l.w, "%s,\n    \"kind\": \"List\",\n    \"metadata\": {\n        \"resourceVersion\": %s\n    }\n}\n", head, rv)
		return err
	}
	return nil
}

// objectName is the -o name form: kind[.group]/name, like kubectl.
func objectName(o *object) string {
	_, name := o.namespaceName()
	if o.obj == nil || o.gvk.Kind == "" {
		return "record/" + name
	}
	k := strings.ToLower(o.gvk.Kind)
	if o.gvk.Group != "" {
		k += "." + o.gvk.Group
	}
	return k + "/" + name
}

// age formats the time since t like kubectl's AGE column.
func age(now time.Time, t time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t))
}

// timestamp formats t for wide and detail columns.
func timestamp(t time.Time) string {
	if t.IsZero() {
		return "<none>"
	}
	return t.UTC().Format(time.RFC3339)
}

// formatBytes formats a size in binary units.
func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// orNone is s, or "<none>" when empty.
func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}
