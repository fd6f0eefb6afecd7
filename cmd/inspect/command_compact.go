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
			return a.compact(cmd, args[0], args[1], txMaxSize)
		},
	}
	cmd.Flags().Int64Var(&txMaxSize, "tx-max-size", 64<<20, "commit the copy every this many bytes")
	return cmd
}

func (a *app) compact(cmd *cobra.Command, path, out string, txMaxSize int64) (err error) {
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
		if err := bolt.Compact(dst, src, txMaxSize); err != nil {
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
