package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
	bolt "go.etcd.io/bbolt"

	"github.com/boltinformer/boltinformer/internal/safefile"
)

func (a *app) newCompactCommand() *cobra.Command {
	var txMaxSize int64
	var progress string
	cmd := &cobra.Command{
		Use:   "compact FILE OUT",
		Short: "Write a compacted copy of the file to OUT",
		Long: `compact copies every bucket and key of FILE into a new file OUT (bbolt's
Compact), which leaves out the free pages: the copy can be much smaller.
FILE is not changed; OUT must not exist. The copy is written to a temporary
file next to OUT and becomes OUT only once it checks (inspect check's store
part). To use it, stop the agent and move OUT over FILE.`,
		Example: `  inspect compact /var/lib/agent/cache.db /var/lib/agent/cache.compact.db`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkProgressFlag(progress); err != nil {
				return err
			}
			return a.compact(cmd, args[0], args[1], txMaxSize, progress)
		},
	}
	cmd.Flags().Int64Var(&txMaxSize, "tx-max-size", 64<<20, "commit the copy every this many bytes")
	addProgressFlag(cmd, &progress, "when stderr is a terminal")
	return cmd
}

func (a *app) compact(cmd *cobra.Command, path, out string, txMaxSize int64, progressMode string) (err error) {
	if same, err := sameFile(path, out); err == nil && same {
		return fmt.Errorf("compact: OUT %s is FILE: compact never works in place", out)
	}
	if _, err := os.Lstat(out); err == nil {
		return fmt.Errorf("compact: %s exists: give a new file", out)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("compact: %w", err)
	}
	db, err := a.open(path)
	if err != nil {
		return err
	}
	defer db.Close()
	// The copy is written to a temporary file next to OUT, which becomes
	// OUT only once it checks: a copy cut short (an interrupt, a crash, a
	// full disk) is a valid bbolt file holding part of the buckets, and
	// must never be found as OUT.
	tmp, err := a.createTemp(filepath.Dir(out), "."+filepath.Base(out)+".tmp-*")
	if err != nil {
		return fmt.Errorf("compact: %w", err)
	}
	tmpPath := tmp.Name()
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("compact: %w", err)
	}
	defer func() {
		_ = os.Remove(tmpPath) // OUT, once linked, is another name for it
		a.forgetTemp(tmpPath)
	}()
	if a.pause != nil {
		a.pause("compact")
	}
	err = db.Bolt(func(src *bolt.DB) error {
		dst, err := bolt.Open(tmpPath, 0o600, &bolt.Options{Timeout: a.timeout})
		if err != nil {
			return err
		}
		var keys int64
		_ = src.View(func(tx *bolt.Tx) error {
			return tx.ForEach(func(_ []byte, b *bolt.Bucket) error {
				keys += int64(b.Stats().KeyN)
				return nil
			})
		})
		bar := newProgress(cmd.ErrOrStderr(), nil, progressMode, keys, "compact")
		err = compactCopy(dst, src, txMaxSize, func() { bar.add(1) })
		bar.done()
		if err != nil {
			_ = dst.Close()
			return err
		}
		if err := dst.Close(); err != nil {
			return err
		}
		return safefile.SyncDir(filepath.Dir(out)) // the new name, durable
	})
	if err != nil {
		return fmt.Errorf("compact %s to %s: %w", path, out, err)
	}
	// Prove the copy before anyone swaps it in.
	cp, err := a.open(tmpPath)
	if err != nil {
		return fmt.Errorf("compact: the copy does not open: %w", err)
	}
	probs, err := cp.Check(nil)
	_ = cp.Close()
	if err == nil && len(probs) > 0 {
		err = probs[0]
	}
	if err != nil {
		return fmt.Errorf("compact: the copy does not check (run inspect check %s: is it damaged?): %w", path, err)
	}
	// A link never replaces a file: OUT made meanwhile is kept.
	if err := os.Link(tmpPath, out); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("compact: %s exists: give a new file", out)
		}
		return fmt.Errorf("compact: %w", err)
	}
	before, err := db.Size()
	if err != nil {
		return err
	}
	fi, err := os.Stat(out)
	if err != nil {
		return err
	}
	gain := 0.0
	if fi.Size() > 0 {
		gain = float64(before) / float64(fi.Size())
	}
	fmt.Fprintf(cmd.OutOrStdout(), "compacted %s (%s) to %s (%s, %.0f%% of the original)\n", path, formatBytes(before), out, formatBytes(fi.Size()), 100/gain)
	return nil
}

// compactCopy copies every bucket, nested bucket (with its sequence) and
// key of src into dst, as bbolt's Compact does (which has no progress
// hook): in key order, buckets filled to 100%, a commit every txMaxSize
// bytes of keys and values (0: one transaction). onKey is called after
// each key or nested bucket is copied: as many calls as the top-level
// buckets' Stats().KeyN add up to.
func compactCopy(dst, src *bolt.DB, txMaxSize int64, onKey func()) (err error) {
	tx, err := dst.Begin(true)
	if err != nil {
		return err
	}
	defer func() {
		if tx != nil {
			_ = tx.Rollback()
		}
	}()
	var size int64
	// bucket is the destination bucket at path, in the current transaction.
	bucket := func(path [][]byte) *bolt.Bucket {
		b := tx.Bucket(path[0])
		for _, name := range path[1:] {
			b = b.Bucket(name)
		}
		return b
	}
	var walk func(path [][]byte, b *bolt.Bucket) error
	walk = func(path [][]byte, b *bolt.Bucket) error {
		return b.ForEach(func(k, v []byte) error {
			if sz := int64(len(k) + len(v)); txMaxSize != 0 && size+sz > txMaxSize {
				if err := tx.Commit(); err != nil {
					tx = nil
					return err
				}
				if tx, err = dst.Begin(true); err != nil {
					return err
				}
				size = sz
			} else {
				size += sz
			}
			parent := bucket(path)
			parent.FillPercent = 1.0
			if v != nil {
				if err := parent.Put(k, v); err != nil {
					return err
				}
				onKey()
				return nil
			}
			nested := b.Bucket(k)
			created, err := parent.CreateBucket(k)
			if err != nil {
				return err
			}
			if err := created.SetSequence(nested.Sequence()); err != nil {
				return err
			}
			onKey()
			return walk(append(path[:len(path):len(path)], k), nested)
		})
	}
	err = src.View(func(stx *bolt.Tx) error {
		return stx.ForEach(func(name []byte, b *bolt.Bucket) error {
			created, err := tx.CreateBucket(name)
			if err != nil {
				return err
			}
			if err := created.SetSequence(b.Sequence()); err != nil {
				return err
			}
			return walk([][]byte{name}, b)
		})
	})
	if err != nil {
		return err
	}
	err = tx.Commit()
	tx = nil
	return err
}
