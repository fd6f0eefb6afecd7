package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/printers"
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

// templateFormats are kubectl's -o formats that take an argument
// (-o jsonpath='{.metadata.name}'), printed by k8s.io/cli-runtime's
// printers (custom columns by customColumnsPrinter, over client-go's
// jsonpath, as kubectl's own lives outside cli-runtime).
var templateFormats = []string{
	"jsonpath", "jsonpath-file", "jsonpath-as-json",
	"go-template", "go-template-file", "template", "templatefile",
	"custom-columns", "custom-columns-file",
}

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
		"output format, as the command offers (its help lists them): wide, name, json, yaml, jsonl, "+
			"jsonpath=..., jsonpath-file=..., custom-columns=..., custom-columns-file=..., go-template=..., go-template-file=...; "+
			"default a table (json for export)")
	root.PersistentFlags().Bool(flagNoHeaders, false, "do not print table headers (no effect on other formats)")
}

// checkOutputFlags refuses -o for a command that prints no formats, rather
// than ignore it.
func checkOutputFlags(cmd *cobra.Command) error {
	f := cmd.Flags().Lookup(flagOutput)
	if f == nil || f.Value.String() == "" || cmd.Annotations[formatsAnnotation] != "" || cmd.Name() == "help" ||
		strings.HasPrefix(cmd.Name(), cobra.ShellCompRequestCmd) {
		return nil
	}
	return fmt.Errorf("%s prints no -o formats (got -o %s)", cmd.Name(), f.Value.String())
}

// printFlags are the values of -o and --no-headers for one command, set
// by validate, and, for the commands that print objects
// (addObjectPrintFlags), kubectl's flags of how to print them.
type printFlags struct {
	cmd       *cobra.Command
	output    string // the format, without a template's argument
	template  string // the argument of a template format
	noHeaders bool
	allowed   []string
	templates bool // the template formats are allowed

	showManagedFields bool
	allowMissingKeys  bool
	showLabels        bool
	labelColumns      []string
}

// addPrintFlags declares the formats cmd prints for -o, the first being
// the default, and lists them in its help.
func addPrintFlags(cmd *cobra.Command, allowed ...string) *printFlags {
	p := &printFlags{cmd: cmd, allowed: allowed}
	p.annotate()
	return p
}

// addObjectPrintFlags declares the formats of a command that prints
// objects: a table (wide), name, json, yaml and kubectl's template
// formats, with --show-managed-fields, --allow-missing-template-keys,
// --show-labels and -L.
func addObjectPrintFlags(cmd *cobra.Command) *printFlags {
	p := &printFlags{cmd: cmd, allowed: []string{formatTable, formatWide, formatName, formatJSON, formatYAML}, templates: true}
	p.annotate()
	addManagedFieldsFlag(cmd, &p.showManagedFields)
	cmd.Flags().BoolVar(&p.allowMissingKeys, "allow-missing-template-keys", true,
		"ignore a field or map key missing in a jsonpath or go-template (kubectl's default)")
	cmd.Flags().BoolVar(&p.showLabels, "show-labels", false, "add a LABELS column to tables")
	cmd.Flags().StringSliceVarP(&p.labelColumns, "label-columns", "L", nil,
		"add a column with the value of each of these labels to tables (-L app,tier)")
	return p
}

// addManagedFieldsFlag adds --show-managed-fields (kubectl's).
func addManagedFieldsFlag(cmd *cobra.Command, show *bool) {
	cmd.Flags().BoolVar(show, "show-managed-fields", false, "keep metadata.managedFields when printing objects as JSON or YAML")
}

func (p *printFlags) annotate() {
	cmd := p.cmd
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	cmd.Annotations[formatsAnnotation] = strings.Join(p.names(), ",")
	def := "a table"
	if p.allowed[0] != formatTable {
		def = p.allowed[0]
	}
	cmd.Long += fmt.Sprintf("\n\nOutput (-o): %s; default %s.", strings.Join(p.names(), ", "), def)
	if slices.Contains(p.allowed, formatTable) {
		cmd.Long += " --no-headers leaves out the header line of tables."
	}
}

// names are the allowed formats as -o spells them.
func (p *printFlags) names() []string {
	var names []string
	for _, f := range p.allowed {
		if f != formatTable {
			names = append(names, f)
		}
	}
	if p.templates {
		for _, f := range templateFormats {
			names = append(names, f+"=...")
		}
	}
	return names
}

// validate reads -o and --no-headers, wherever on the command line they
// were given, and checks the format.
func (p *printFlags) validate() error {
	p.output, p.template, p.noHeaders = p.allowed[0], "", false
	if f := p.cmd.Flags().Lookup(flagOutput); f != nil && f.Value.String() != "" {
		p.output = f.Value.String()
	}
	if f := p.cmd.Flags().Lookup(flagNoHeaders); f != nil {
		p.noHeaders = f.Value.String() == "true"
	}
	if p.templates {
		format, arg, hasArg := strings.Cut(p.output, "=")
		if slices.Contains(templateFormats, format) {
			if !hasArg || arg == "" {
				return fmt.Errorf("-o %s: template format specified but no template given (-o %s=TEMPLATE)", format, format)
			}
			p.output, p.template = format, arg
			_, err := p.resourcePrinter() // a template that does not parse fails before the file is read
			return err
		}
	}
	if !slices.Contains(p.allowed, p.output) {
		return fmt.Errorf("unknown output format %q (want one of %s)", p.output, strings.Join(p.names(), ", "))
	}
	return nil
}

func (p *printFlags) table() bool { return p.output == formatTable || p.output == formatWide }
func (p *printFlags) wide() bool  { return p.output == formatWide }

// resourcePrinter returns k8s.io/cli-runtime's printer of the format,
// which is not a table: JSON and YAML without managedFields (unless
// --show-managed-fields), names, jsonpath, go templates, custom columns.
func (p *printFlags) resourcePrinter() (printers.ResourcePrinter, error) {
	arg := p.template
	if strings.HasSuffix(p.output, "-file") || p.output == "templatefile" {
		data, err := os.ReadFile(arg)
		if err != nil {
			return nil, fmt.Errorf("-o %s: %w", p.output, err)
		}
		arg = string(data)
	}
	switch p.output {
	case formatJSON, formatYAML:
		var pr printers.ResourcePrinter = &printers.JSONPrinter{}
		if p.output == formatYAML {
			pr = &printers.YAMLPrinter{}
		}
		if !p.showManagedFields {
			pr = &printers.OmitManagedFieldsPrinter{Delegate: pr}
		}
		return pr, nil
	case formatName:
		return namePrinter{}, nil
	case "jsonpath", "jsonpath-file", "jsonpath-as-json":
		pr, err := printers.NewJSONPathPrinter(arg)
		if err != nil {
			return nil, fmt.Errorf("-o %s: error parsing jsonpath %s: %w", p.output, arg, err)
		}
		pr.AllowMissingKeys(p.allowMissingKeys)
		pr.EnableJSONOutput(p.output == "jsonpath-as-json")
		return pr, nil
	case "go-template", "go-template-file", "template", "templatefile":
		pr, err := printers.NewGoTemplatePrinter([]byte(arg))
		if err != nil {
			return nil, fmt.Errorf("-o %s: error parsing template %s: %w", p.output, arg, err)
		}
		pr.AllowMissingKeys(p.allowMissingKeys)
		return pr, nil
	case "custom-columns", "custom-columns-file":
		return newCustomColumnsPrinter(arg, p.output == "custom-columns-file", p.noHeaders)
	}
	return nil, fmt.Errorf("-o %s: not a format of %s", p.output, p.cmd.Name())
}

// namePrinter is cli-runtime's NamePrinter (kind[.group]/name), which
// fails on an object without a kind: such an object (a JSON payload that
// does not say its kind, of an informer whose kind the file does not say)
// prints as object/name. An envelope (an object encrypted without its key,
// or of a type inspect does not know) prints as the object it holds
// (secret/db, gadget.example.com/gadget-0), as kubectl names it, when its
// record says its kind.
type namePrinter struct{}

func (namePrinter) PrintObj(obj runtime.Object, w io.Writer) error {
	if l, ok := obj.(*unstructured.UnstructuredList); ok {
		for i := range l.Items {
			if err := (namePrinter{}).PrintObj(&l.Items[i], w); err != nil {
				return err
			}
		}
		return nil
	}
	if u, ok := obj.(*unstructured.Unstructured); ok && u.GetKind() == "" {
		_, err := fmt.Fprintf(w, "object/%s\n", u.GetName())
		return err
	}
	if u, ok := obj.(*unstructured.Unstructured); ok && u.GetAPIVersion() == envelopeAPIVersion && u.GetKind() == envelopeKind {
		if gvk, ok := envelopeObjectKind(u); ok {
			held := &unstructured.Unstructured{}
			held.SetGroupVersionKind(gvk)
			held.SetName(u.GetName())
			obj = held
		}
	}
	return (&printers.NamePrinter{}).PrintObj(obj, w)
}

// envelopeObjectKind is the kind of the object an envelope holds, from its
// objectKind ("example.com/v1, Kind=Gadget", "/v1, Kind=Secret").
func envelopeObjectKind(u *unstructured.Unstructured) (schema.GroupVersionKind, bool) {
	s, _, _ := unstructured.NestedString(u.Object, "objectKind")
	gv, kind, ok := strings.Cut(s, ", Kind=")
	if !ok || kind == "" {
		return schema.GroupVersionKind{}, false
	}
	v, err := schema.ParseGroupVersion(strings.TrimPrefix(gv, "/"))
	if err != nil || v.Version == "" {
		return schema.GroupVersionKind{}, false
	}
	return v.WithKind(kind), true
}

// table is rows of cells printed in columns like kubectl's (cli-runtime's
// tab writer).
type table struct {
	headers []string
	rows    [][]string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) print(w io.Writer, noHeaders bool) error {
	tw := printers.GetNewTabWriter(w)
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

// writeValue prints a report v as JSON or YAML.
func writeValue(w io.Writer, format string, v any) error {
	if format == formatYAML {
		return writeYAML(w, v)
	}
	return writeJSON(w, v)
}

// newList is the List that kubectl prints objects in, as of
// resourceVersion.
func newList(resourceVersion string, items []runtime.Object) *unstructured.UnstructuredList {
	l := &unstructured.UnstructuredList{Object: map[string]any{
		"apiVersion": "v1", "kind": "List", "metadata": map[string]any{"resourceVersion": resourceVersion}}}
	l.Items = make([]unstructured.Unstructured, 0, len(items))
	for _, it := range items {
		l.Items = append(l.Items, *it.(*unstructured.Unstructured))
	}
	return l
}

// listWriter streams objects as a List (json, yaml) or as JSON lines
// (jsonl), without holding them all: export's writer. Its json and yaml
// are what cli-runtime's printers print of the same List (a test holds
// them equal).
type listWriter struct {
	w      io.Writer
	format string
	rv     string
	n      int
	// showManagedFields keeps them (--show-managed-fields).
	showManagedFields bool
}

func newListWriter(w io.Writer, format, resourceVersion string, showManagedFields bool) *listWriter {
	return &listWriter{w: w, format: format, rv: resourceVersion, showManagedFields: showManagedFields}
}

func (l *listWriter) add(o *object) error {
	defer func() { l.n++ }()
	u := o.printable()
	if !l.showManagedFields {
		u.SetManagedFields(nil)
	}
	switch l.format {
	case formatJSONL:
		b, err := json.Marshal(u)
		if err != nil {
			return err
		}
		_, err = l.w.Write(append(b, '\n'))
		return err
	case formatYAML:
		// Marshaled as an item of a list, so that the YAML encoder folds
		// long strings as it does within the whole List.
		b, err := yaml.Marshal(map[string]any{"items": []any{u.Object}})
		if err != nil {
			return err
		}
		if l.n == 0 {
			if _, err := io.WriteString(l.w, "apiVersion: v1\n"); err != nil {
				return err
			}
			_, err = l.w.Write(b)
			return err
		}
		_, err = l.w.Write(bytes.TrimPrefix(b, []byte("items:\n")))
		return err
	default:
		b, err := json.MarshalIndent(u, "        ", "    ")
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
		rv, _ := json.Marshal(l.rv)
		_, err := fmt.Fprintf(l.w, "%s,\n    \"kind\": \"List\",\n    \"metadata\": {\n        \"resourceVersion\": %s\n    }\n}\n", head, rv)
		return err
	}
	return nil
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
