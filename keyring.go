package boltinformer

import "github.com/boltinformer/boltinformer/internal/codec"

// Keyring holds the AES keys that encrypt an informer's payloads at rest
// (InformerOptions.Keyring, FactoryOptions.Keyrings): AES-GCM, each record
// naming the id of the key it was sealed with, so that keys can rotate.
//
// Current "" seals nothing: the keys only open the records sealed with
// them, and a warm start rewrites those records in plaintext (how to stop
// encrypting). A key id that is dropped from the keyring while records
// still name it makes NewInformer fail with ErrEncryptionKey: keep an old
// key until one start with the new Current has rewritten its records.
type Keyring struct {
	// Current is the id of the key new payloads are sealed with; "" stores
	// plaintext.
	Current string
	// Keys maps key ids (non-empty) to AES keys of 16, 24 or 32 bytes
	// (AES-128, -192, -256).
	Keys map[string][]byte
}

// Validate reports whether the keyring can be used: at least one key,
// every key id non-empty and every key a valid AES key, and Current ""
// or the id of one of them.
func (k *Keyring) Validate() error { return k.codec().Validate() }

// IDs returns the keyring's key ids, sorted.
func (k *Keyring) IDs() []string { return k.codec().IDs() }

// codec returns k as the codec's keyring (the same fields).
func (k *Keyring) codec() *codec.Keyring { return (*codec.Keyring)(k) }
