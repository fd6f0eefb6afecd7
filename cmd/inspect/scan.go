package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/boltinformer/boltinformer/store"
)

// indexedKeys returns the keys found under every NAME=VALUE of --index
// (their intersection, in key order), or nil when none was given.
func indexedKeys(tx *store.Tx, inf string, specs []string) ([]string, error) {
	var keys []string
	for i, spec := range specs {
		name, value, ok := strings.Cut(spec, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("--index %q: want NAME=VALUE", spec)
		}
		if !tx.HasIndex(inf, name) {
			return nil, fmt.Errorf("informer %q has no index %q (indexes: %s)", inf, name, orNone(strings.Join(tx.Indexes(inf), ", ")))
		}
		ks := tx.IndexKeys(inf, name, value)
		if ks == nil {
			ks = []string{}
		}
		if i == 0 {
			keys = ks
			continue
		}
		keys = slices.DeleteFunc(keys, func(k string) bool { _, found := slices.BinarySearch(ks, k); return !found })
	}
	return keys, nil
}

// scanObjects decodes the objects of inf whose keys pass filter: those of
// keys (nil: every object, in key order) and calls fn with each, and
// returns how many keys have no object. A record that does not decode is
// an error (ErrCorrupt); a payload that does not, or that a key is missing
// for (object.keyErr), is fn's to judge.
func scanObjects(tx *store.Tx, inf string, keys []string, d *decoder, filter func(string) bool, fn func(*object) error) (dangling int, err error) {
	each := func(key string, raw []byte) error {
		if !filter(key) {
			return nil
		}
		r, err := store.DecodeRecord(key, raw)
		if err != nil {
			return fmt.Errorf("informer %q object %q: %w", inf, key, err)
		}
		o, err := d.decode(key, r)
		if err != nil {
			return err
		}
		return fn(o)
	}
	if keys == nil {
		return 0, tx.ForEachRaw(inf, each)
	}
	for _, k := range keys {
		raw := tx.GetRaw(inf, k)
		if raw == nil {
			dangling++ // an index entry of a missing object
			continue
		}
		if err := each(k, raw); err != nil {
			return dangling, err
		}
	}
	return dangling, nil
}

// errStopScan ends a scan early.
var errStopScan = errors.New("stop")

// keysWork decodes the first record of inf, so that a missing or wrong
// decryption key fails a command before it prints anything.
func keysWork(tx *store.Tx, inf string, d *decoder) error {
	var err error
	_ = tx.ForEachRaw(inf, func(key string, raw []byte) error {
		if r, derr := store.DecodeRecord(key, raw); derr == nil {
			var o *object
			if o, err = d.decode(key, r); err == nil && o.keyErr != nil {
				err = o.keyErr
			}
		}
		return errStopScan
	})
	return err
}

// informerState is the informer's state record; a damaged one is a
// warning (objects then decode without the informer's kind).
func informerState(cmd *cobra.Command, tx *store.Tx, inf string) *store.State {
	st, err := tx.State(inf)
	if err != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "warning: %v\n", err)
	}
	return st
}
