package main

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/boltinformer/boltinformer/store"
)

func (a *app) newDropCommand() *cobra.Command {
	var unusedFor time.Duration
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "drop FILE (INFORMER... | --unused-for DURATION)",
		Short: "Remove informers from the file (writes FILE)",
		Long: `drop removes informers from FILE itself: those named, or with --unused-for
every informer whose last commit is older than that. Their objects, indexes
and state go in one transaction: after a crash the file holds all of them or
none. It is the way out for the informers a program no longer builds (a
namespace dropped from a controller-runtime cache, a changed selector, a kind
no longer watched), whose data would otherwise stay in the file for good.
An informer the program still builds starts cold after it.

drop writes FILE: stop the agent first (its lock makes drop fail after
--timeout, exit status 3). --dry-run prints what it would drop and writes
nothing. The file does not shrink: bbolt reuses the freed pages, and
inspect compact gives them back.`,
		Example: `  inspect drop cache.db --unused-for 720h --dry-run
  inspect drop cache.db controller-runtime/typed/core/v1/configmaps/team-a`,
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: a.completeDropArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case len(args) == 1 && unusedFor <= 0:
				return errors.New("drop: name the informers to drop, or give --unused-for")
			case len(args) > 1 && unusedFor > 0:
				return errors.New("drop: name informers or give --unused-for, not both")
			}
			return a.drop(cmd, args[0], args[1:], unusedFor, dryRun)
		},
	}
	cmd.Flags().DurationVar(&unusedFor, "unused-for", 0, "drop every informer whose last commit is older than this (e.g. 720h)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print what would be dropped, and write nothing")
	return cmd
}

// completeDropArgs completes FILE, then any number of INFORMERs.
func (a *app) completeDropArgs(_ *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) == 0 {
		return nil, cobra.ShellCompDirectiveDefault
	}
	var out []string
	for _, c := range a.informerCandidates(args[0], toComplete) {
		if !contains(args[1:], c) {
			out = append(out, c)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

func (a *app) drop(cmd *cobra.Command, path string, args []string, unusedFor time.Duration, dryRun bool) error {
	// What to drop, read through a read-only open: a missing file, a
	// damaged one or an older format version is reported as by every
	// other command, and nothing is written.
	var drop []informerInfo
	err := a.view(path, func(_ *store.DB, tx *store.Tx) error {
		now := a.now()
		if unusedFor > 0 {
			for _, name := range tx.Informers() {
				info := describeInformer(tx, name)
				if info.LastCommit != nil && now.Sub(*info.LastCommit) > unusedFor {
					drop = append(drop, info)
				}
			}
			return nil
		}
		for _, arg := range args {
			name, err := resolveInformer(tx, arg)
			if err != nil {
				return err
			}
			if !slices.ContainsFunc(drop, func(i informerInfo) bool { return i.Name == name }) {
				drop = append(drop, describeInformer(tx, name))
			}
		}
		return nil
	})
	if err != nil {
		return dropOpenError(path, a.timeout, err)
	}
	out := cmd.OutOrStdout()
	if len(drop) == 0 {
		fmt.Fprintf(out, "no informer of %s has gone without a commit for %s\n", path, unusedFor)
		return nil
	}
	verb := "dropped"
	if dryRun {
		verb = "would drop"
	} else {
		names := make([]string, len(drop))
		for i, d := range drop {
			names[i] = d.Name
		}
		if err := a.deleteInformers(path, names); err != nil {
			return err
		}
	}
	now := a.now()
	for _, d := range drop {
		last := "no last commit"
		if d.LastCommit != nil {
			last = "last commit " + age(now, *d.LastCommit) + " ago"
		}
		fmt.Fprintf(out, "%s %s (%d objects, %s, %s)\n", verb, d.Name, d.Objects, formatBytes(d.Bytes), last)
	}
	return nil
}

// deleteInformers opens path read-write (the agent's lock is waited for
// as long as --timeout) and removes the informers in one transaction.
func (a *app) deleteInformers(path string, names []string) error {
	timeout := a.timeout
	if timeout <= 0 {
		timeout = -1 // try once
	}
	db, err := store.Open(path, &store.Options{Timeout: timeout})
	if err != nil {
		return dropOpenError(path, a.timeout, err)
	}
	if err := db.DeleteInformers(names...); err != nil {
		_ = db.Close()
		return fmt.Errorf("drop: %w", err)
	}
	return db.Close()
}

// dropOpenError is openError, with the lock of a running agent said as
// drop needs it said: nothing is written while it runs.
func dropOpenError(path string, timeout time.Duration, err error) error {
	if errors.Is(err, store.ErrLocked) {
		return &exitError{code: exitLocked, err: err, msg: fmt.Sprintf(
			"%s is locked by another process (a running agent?) past --timeout %s: stop the agent to drop informers; "+
				"nothing was dropped", path, timeout)}
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return err // openError's already
	}
	return openError(path, timeout, err)
}
