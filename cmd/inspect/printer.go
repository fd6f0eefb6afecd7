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

// The output flags, persistent on the root command so that they work
// before the verb as well as after it (kubectl's habit): -o and
// --no-headers. Each command says which formats it prints (addPrintFlags).
const (
	flagOutput    = "output"
	flagNoHeaders = "no-headers"
	// formatsAnnotation on a command lists the -o formats it prints.
	formatsAnnotation = "inspect/formats"
)

// addOutputFlags registers the output flags on root.
func addOutputFlags(root *cobra.Command) {
	root.PersistentFlags().StringP(flagOutput, "o", "",
		"output format: wide, name, json, yaml or jsonl, as the command offers (its help lists them); default a table (json for export)")
	root.PersistentFlags().Bool(flagNoHeaders, false, "do not print table headers (no effect on other formats)")
}

// checkOutputFlags refuses -o for a command that prints no formats, rather
// than ignore it.
func checkOutputFlags(cmd *cobra.Command) error {
	f := cmd.Flags().Lookup(flagOutput)
	if f == nil || f.Value.String() == "" || cmd.Annotations[formatsAnnotation] != "" || cmd.Name() == "help" {
		return nil
	}
	return fmt.Errorf("%s prints no -o formats (got -o %s)", cmd.Name(), f.Value.String())
}

// printFlags are the values of -o and --no-headers for one command, set
// by validate.
type printFlags struct {
	cmd       *cobra.Command
	output    string
	noHeaders bool
	allowed   []string
}

// addPrintFlags declares the formats cmd prints for -o, the first being
// the default, and lists them in its help.
func addPrintFlags(cmd *cobra.Command, allowed ...string) *printFlags {
	p := &printFlags{cmd: cmd, allowed: allowed}
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	cmd.Annotations[formatsAnnotation] = strings.Join(p.names(), ",")
	def := "a table"
	if allowed[0] != formatTable {
		def = allowed[0]
	}
	cmd.Long += fmt.Sprintf("\n\nOutput (-o): %s; default %s.", strings.Join(p.names(), ", "), def)
	if slices.Contains(allowed, formatTable) {
		cmd.Long += " --no-headers leaves out the header line of tables."
	}
	return p
}

// names are the allowed formats as -o spells them.
func (p *printFlags) names() []string {
	var names []string
	for _, f := range p.allowed {
		if f != formatTable {
			names = append(names, f)
		}
	}
	return names
}

// validate reads -o and --no-headers, wherever on the command line they
// were given, and checks the format.
func (p *printFlags) validate() error {
	p.output, p.noHeaders = p.allowed[0], false
	if f := p.cmd.Flags().Lookup(flagOutput); f != nil && f.Value.String() != "" {
		p.output = f.Value.String()
	}
	if f := p.cmd.Flags().Lookup(flagNoHeaders); f != nil {
		p.noHeaders = f.Value.String() == "true"
	}
	if !slices.Contains(p.allowed, p.output) {
		return fmt.Errorf("unknown output format %q (want one of %s)", p.output, strings.Join(p.names(), ", "))
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
