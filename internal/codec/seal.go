package codec

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"fmt"
	"sort"
)

// Keyring holds the AES keys for encryption at rest. Current names the key
// new payloads are sealed with; older keys stay to open old records, so keys
// can rotate: records name the key id they were sealed with.
//
// Current "" seals nothing: the keys only open the records sealed with
// them (what turns encryption off: the informer rewrites those records in
// plaintext when it loads them).
type Keyring struct {
	// Current is the id of the key used to seal; "" to store plaintext.
	Current string
	// Keys maps key ids to AES keys of 16, 24 or 32 bytes.
	Keys map[string][]byte
}

// Validate reports whether the keyring can be used: at least one key,
// every key id non-empty and every key a valid AES key, and Current ("" or
// the id of one of them).
func (k *Keyring) Validate() error {
	_, err := newSealer(k)
	return err
}

// IDs returns the keyring's key ids, sorted.
func (k *Keyring) IDs() []string {
	if k == nil {
		return nil
	}
	ids := make([]string, 0, len(k.Keys))
	for id := range k.Keys {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// sealer is a Keyring with its ciphers built.
type sealer struct {
	current string // "": open only
	aeads   map[string]cipher.AEAD
}

func newSealer(k *Keyring) (*sealer, error) {
	if k == nil {
		return nil, nil
	}
	if len(k.Keys) == 0 {
		return nil, fmt.Errorf("codec: keyring: no keys")
	}
	s := &sealer{current: k.Current, aeads: map[string]cipher.AEAD{}}
	for id, key := range k.Keys {
		if id == "" {
			return nil, fmt.Errorf("codec: keyring: empty key id")
		}
		block, err := aes.NewCipher(key)
		if err != nil {
			return nil, fmt.Errorf("codec: keyring: key %q: %w", id, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("codec: keyring: key %q: %w", id, err)
		}
		s.aeads[id] = aead
	}
	if _, ok := s.aeads[s.current]; !ok && s.current != "" {
		return nil, fmt.Errorf("codec: keyring: current key %q is not in the keyring", s.current)
	}
	return s, nil
}

// seal returns nonce || ciphertext, authenticated with aad.
func (s *sealer) seal(plain, aad []byte) ([]byte, string, error) {
	aead := s.aeads[s.current]
	out := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plain)+aead.Overhead())
	if _, err := rand.Read(out); err != nil {
		return nil, "", fmt.Errorf("codec: nonce: %w", err)
	}
	return aead.Seal(out, out, plain, aad), s.current, nil
}

func (s *sealer) open(keyID string, sealed, aad []byte) ([]byte, error) {
	if s == nil {
		return nil, fmt.Errorf("%w (key id %q)", ErrEncrypted, keyID)
	}
	aead, ok := s.aeads[keyID]
	if !ok {
		return nil, fmt.Errorf("%w: key id %q is not in the keyring", ErrWrongKey, keyID)
	}
	if len(sealed) < aead.NonceSize() {
		return nil, fmt.Errorf("%w: sealed payload of %d bytes is too short", ErrWrongKey, len(sealed))
	}
	plain, err := aead.Open(nil, sealed[:aead.NonceSize()], sealed[aead.NonceSize():], aad)
	if err != nil {
		return nil, fmt.Errorf("%w: key id %q: %v", ErrWrongKey, keyID, err)
	}
	return plain, nil
}
