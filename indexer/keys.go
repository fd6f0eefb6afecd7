package indexer

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/boltinformer/boltinformer/internal/codec"
	"github.com/boltinformer/boltinformer/store"
)

// resealChunk is how many records one reseal transaction rewrites.
const resealChunk = 1024

// keyringError is the configuration error of a load whose probe of key,
// sealed with keyID, did not open: the file is not touched.
func (x *Indexer) keyringError(key, keyID string, err error) error {
	var why string
	switch {
	case x.keyring == nil:
		why = fmt.Sprintf("object %q is sealed with key id %q and no keyring was given "+
			"(to stop encrypting this informer, give its keys once with Current \"\": the payloads are rewritten in plaintext)", key, keyID)
	case x.keyring.Keys[keyID] == nil:
		why = fmt.Sprintf("object %q is sealed with key id %q, which the keyring does not have (it has %s)",
			key, keyID, strings.Join(x.keyring.IDs(), ", "))
	default:
		why = fmt.Sprintf("object %q does not open with the keyring's key %q: wrong key", key, keyID)
	}
	return fmt.Errorf("indexer %q: load %s: %w: %s (%v)", x.name, x.db.Path(), ErrEncryptionKey, why, codecCause(err))
}

// codecCause returns the codec's error within err, a decoding error that
// the load wrapped as record damage (store.ErrCorrupt): a configuration
// error's message gives the codec's reason, and does not call the file
// corrupt. It returns err when it finds none.
func codecCause(err error) error {
	for e := err; e != nil && errors.Is(e, store.ErrCorrupt); {
		switch u := e.(type) {
		case interface{ Unwrap() []error }:
			next := error(nil)
			for _, inner := range u.Unwrap() {
				if !errors.Is(inner, store.ErrCorrupt) && (errors.Is(inner, codec.ErrWrongKey) || errors.Is(inner, codec.ErrEncrypted)) {
					return inner
				}
				if errors.Is(inner, store.ErrCorrupt) && inner != store.ErrCorrupt {
					next = inner
				}
			}
			e = next
		case interface{ Unwrap() error }:
			e = u.Unwrap()
		default:
			e = nil
		}
	}
	return err
}

// reseal rewrites in the file the payloads of the loaded records of keys,
// whose encryption key id is not the codec's current one: plaintext
// records of an informer now given a keyring are sealed, records of a
// rotated-out key are sealed with the current key, and with a
// decrypt-only keyring (Current "") sealed records are stored in
// plaintext. The objects do not change, so memory needs no update. A
// record that does not open although its key id's probe did is left as it
// is: the lazy decode finds it undecodable and the informer relists. A
// crash between two chunks leaves records of both key ids, which the next
// load reseals.
func (x *Indexer) reseal(keys []string) error {
	from := map[string]int{}
	var done, bad int
	for start := 0; start < len(keys); start += resealChunk {
		chunk := keys[start:min(start+resealChunk, len(keys))]
		n, err := x.db.RewritePayloads(x.name, chunk, func(key string, r *store.Record) (bool, error) {
			id := r.KeyID
			changed, err := x.codec.Reseal(key, r)
			if err != nil {
				if bad++; bad == 1 {
					x.logger.Error(err, "A record of the cache file does not open: left as it is", "key", key)
				}
				return false, nil
			}
			if changed {
				from[id]++
			}
			return changed, nil
		})
		if err != nil {
			return fmt.Errorf("indexer %q: reseal: %w", x.name, err)
		}
		done += n
	}
	ids := make([]string, 0, len(from))
	for id, n := range from {
		if id == "" {
			id = "<plaintext>"
		}
		ids = append(ids, fmt.Sprintf("%s: %d", id, n))
	}
	sort.Strings(ids)
	to := x.codec.KeyID()
	if to == "" {
		to = "<plaintext>"
	}
	x.resealed = done
	if bad > 1 {
		x.logger.Error(nil, "More records of the cache file do not open: left as they are", "count", bad-1)
	}
	if done == 0 {
		return nil
	}
	x.logger.Info("Rewrote the payloads of the cache file's records for the keyring: the old bytes stay in the file's free pages until they are reused (compact the file to drop them)",
		"records", done, "from", strings.Join(ids, ", "), "to", to)
	return nil
}

// Resealed returns how many records the load rewrote for the keyring
// (Options.Keyring).
func (x *Indexer) Resealed() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.resealed
}
