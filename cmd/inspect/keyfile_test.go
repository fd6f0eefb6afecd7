package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestParseKeys(t *testing.T) {
	k, err := parseKeys([]byte("# keys\n\n  old : AAAAAAAAAAAAAAAAAAAAAA==\nnew:" + strings.Repeat("A", 43) + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if k.Current != "old" || len(k.Keys) != 2 || len(k.Keys["old"]) != 16 || !bytes.Equal(k.Keys["new"], make([]byte, 32)) {
		t.Fatalf("%+v", k)
	}
	for _, tc := range []struct{ in, want string }{
		{"", "no keys"},
		{"# only a comment\n", "no keys"},
		{"k1\n", "line 1: want keyid:base64key"},
		{":AAAA\n", "line 1: want keyid:base64key"},
		{"\nk1:!!!\n", `line 2: key "k1" is not base64`},
		{"k1:AAAA\n", `line 1: key "k1" is 3 bytes, want 16, 24 or 32 (AES)`},
		{"k1:AAAAAAAAAAAAAAAAAAAAAA==\nk1:AAAAAAAAAAAAAAAAAAAAAA==\n", `line 2: key "k1" given twice`},
	} {
		if _, err := parseKeys([]byte(tc.in)); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %s", tc.in, err, tc.want)
		}
	}
	if _, err := readKeyFile("/nonexistent/keys"); err == nil || !strings.HasPrefix(err.Error(), "--key-file: open /nonexistent/keys") {
		t.Errorf("missing file: %v", err)
	}
}
