package main

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"fmt"
	"os"
	"strings"
	"unicode"

	"github.com/boltinformer/boltinformer/internal/codec"
)

// readKeyFile parses a --key-file: one key per line as
//
//	keyid:base64key
//
// where keyid is the id records name (store.Record.KeyID, the Keyring's
// map key) and base64key the AES key (16, 24 or 32 bytes) in standard
// base64, padded or not. Blank lines and lines starting with '#' are
// ignored. The first key is the keyring's current key (inspect only
// decrypts, so which one does not matter). An empty path means no keys.
func readKeyFile(path string) (*codec.Keyring, error) {
	if path == "" {
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--key-file: %w", err)
	}
	k, err := parseKeys(data)
	if err != nil {
		return nil, fmt.Errorf("--key-file %s: %w", path, err)
	}
	return k, nil
}

func parseKeys(data []byte) (*codec.Keyring, error) {
	k := &codec.Keyring{Keys: map[string][]byte{}}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		id, b64, ok := strings.Cut(line, ":")
		id, b64 = strings.TrimSpace(id), strings.TrimSpace(b64)
		if !ok || id == "" || b64 == "" || len(id) > 256 || strings.ContainsFunc(id, unicode.IsControl) {
			return nil, fmt.Errorf("line %d: want keyid:base64key", n)
		}
		key, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			key, err = base64.RawStdEncoding.DecodeString(b64)
		}
		if err != nil {
			return nil, fmt.Errorf("line %d: key %q is not base64", n, id)
		}
		switch len(key) {
		case 16, 24, 32:
		default:
			return nil, fmt.Errorf("line %d: key %q is %d bytes, want 16, 24 or 32 (AES)", n, id, len(key))
		}
		if _, dup := k.Keys[id]; dup {
			return nil, fmt.Errorf("line %d: key %q given twice", n, id)
		}
		k.Keys[id] = key
		if k.Current == "" {
			k.Current = id
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(k.Keys) == 0 {
		return nil, fmt.Errorf("no keys")
	}
	return k, nil
}
