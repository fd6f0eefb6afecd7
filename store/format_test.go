package store_test

import (
	"encoding/hex"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/boltinformer/boltinformer/store"
)

// These tests keep docs/FORMAT.md and the code in step: a key added to the
// state record, a field added to the envelope or a changed example fails
// here until the document says so.

func formatDoc(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../docs/FORMAT.md")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// section returns the text of the section whose heading starts with title.
func section(t *testing.T, doc, title string) string {
	t.Helper()
	i := strings.Index(doc, "\n## "+title)
	if i < 0 {
		t.Fatalf("FORMAT.md has no section %q", title)
	}
	rest := doc[i+4:]
	if j := strings.Index(rest, "\n## "); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

func TestFormatDocStateKeys(t *testing.T) {
	// Every field set, so that none is omitted as empty.
	full := &store.State{}
	v := reflect.ValueOf(full).Elem()
	for i := 0; i < v.NumField(); i++ {
		f := v.Field(i)
		switch {
		case f.Type() == reflect.TypeOf(time.Time{}):
			f.Set(reflect.ValueOf(time.Unix(int64(i), 0)))
		case f.Kind() == reflect.String:
			f.SetString("x")
		case f.Kind() == reflect.Bool:
			f.SetBool(true)
		case f.CanInt():
			f.SetInt(1)
		case f.Type() == reflect.TypeOf([]string{}):
			f.Set(reflect.ValueOf([]string{"a"}))
		default:
			t.Fatalf("State.%s: type %v not handled by this test", v.Type().Field(i).Name, f.Type())
		}
	}
	b, err := store.EncodeState(full)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := msgpack.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	var code []string
	for k := range m {
		code = append(code, k)
	}
	sort.Strings(code)
	var doc []string
	for _, match := range regexp.MustCompile("(?m)^\\| `([a-z]+)` \\|").FindAllStringSubmatch(section(t, formatDoc(t), "7."), -1) {
		doc = append(doc, match[1])
	}
	sort.Strings(doc)
	if strings.Join(code, " ") != strings.Join(doc, " ") {
		t.Fatalf("state keys in code: %v\nin docs/FORMAT.md section 7: %v", code, doc)
	}
}

func TestFormatDocRecordFields(t *testing.T) {
	b, err := store.EncodeRecord("k", &store.Record{Codec: store.CodecProtobuf})
	if err != nil {
		t.Fatal(err)
	}
	var a []any
	if err := msgpack.Unmarshal(b, &a); err != nil {
		t.Fatal(err)
	}
	rows := regexp.MustCompile(`(?m)^\| ([0-9]+) \| `).FindAllStringSubmatch(section(t, formatDoc(t), "5."), -1)
	if len(a) != 11 || len(rows) != len(a) {
		t.Fatalf("the envelope has %d fields, docs/FORMAT.md section 5 lists %d", len(a), len(rows))
	}
}

// hexOf extracts the hex digits of the first code block after marker.
func hexOf(t *testing.T, text, marker string) []byte {
	t.Helper()
	i := strings.Index(text, marker)
	if i < 0 {
		t.Fatalf("no %q in FORMAT.md", marker)
	}
	block := text[i:]
	start := strings.Index(block, "```\n") + 4
	end := start + strings.Index(block[start:], "```")
	var digits strings.Builder
	for _, line := range strings.Split(block[start:end], "\n") {
		// Each line: hex groups, then an optional description after two
		// or more spaces (or a description-only line).
		for _, f := range strings.Fields(strings.SplitN(line, "  ", 2)[0]) {
			if _, err := hex.DecodeString(f); err != nil {
				break
			}
			digits.WriteString(f)
		}
	}
	b, err := hex.DecodeString(digits.String())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestFormatDocExamples(t *testing.T) {
	doc := formatDoc(t)
	hdr := hexOf(t, section(t, doc, "3."), "Example, created")
	if want := header(magic, store.FormatVersion, time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)); string(hdr) != string(want) {
		t.Errorf("meta record example %x, want %x", hdr, want)
	}
	rec := hexOf(t, section(t, doc, "5."), "Example: the record of key")
	want, err := store.EncodeRecord("ns/a", &store.Record{UID: "u", ResourceVersion: "7", Codec: store.CodecProtobuf,
		Indexed: []store.IndexValues{{Index: "node", Values: []string{"n1"}}}, Payload: []byte("abc")})
	if err != nil {
		t.Fatal(err)
	}
	if string(rec) != string(want) {
		t.Errorf("record example %x, want %x", rec, want)
	}
	st := hexOf(t, section(t, doc, "7."), "Example, `{")
	if want, _ := store.EncodeState(&store.State{ResourceVersion: "7", Objects: 2}); string(st) != string(want) {
		t.Errorf("state example %x, want %x", st, want)
	}
}
