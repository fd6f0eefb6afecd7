package main

import (
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/boltinformer/boltinformer/store"
)

// Shell completion (cobra's: inspect completion bash|zsh|fish|powershell
// prints the script). FILE completes as a file name; INFORMER and NAME
// complete from the file itself, opened read-only as every command does
// (a running agent's lock gives no candidates after --timeout).

// completeInformerArg completes FILE, then INFORMER (export, index).
func (a *app) completeInformerArg(_ *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	switch len(args) {
	case 0:
		return nil, cobra.ShellCompDirectiveDefault
	case 1:
		return a.informerCandidates(args[0], toComplete), cobra.ShellCompDirectiveNoFileComp
	}
	return nil, cobra.ShellCompDirectiveNoFileComp
}

// completeObjectArgs completes get's FILE, INFORMER and NAMEs: the keys
// of the informer's objects, or their names in -n's namespace.
func (a *app) completeObjectArgs(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) < 2 {
		return a.completeInformerArg(cmd, args, toComplete)
	}
	ns, _ := cmd.Flags().GetString("namespace")
	var out []string
	a.completionView(args[0], func(tx *store.Tx) {
		inf, err := resolveInformer(tx, args[1])
		if err != nil {
			return
		}
		_ = tx.ForEachRaw(inf, func(key string, _ []byte) error {
			cand := key
			if ns != "" {
				var ok bool
				if cand, ok = strings.CutPrefix(key, ns+"/"); !ok {
					return nil
				}
			}
			if strings.HasPrefix(cand, toComplete) && !contains(args[2:], cand) {
				out = append(out, cand)
			}
			return nil
		})
	})
	return out, cobra.ShellCompDirectiveNoFileComp
}

// informerCandidates are the informers of the file at path: each by its
// last path element when that is unique, else by its name.
func (a *app) informerCandidates(path, toComplete string) []string {
	var out []string
	a.completionView(path, func(tx *store.Tx) {
		names := tx.Informers()
		last := map[string]int{}
		for _, n := range names {
			last[n[strings.LastIndexByte(n, '/')+1:]]++
		}
		for _, n := range names {
			cand := n
			if l := n[strings.LastIndexByte(n, '/')+1:]; last[l] == 1 {
				cand = l
			}
			if strings.HasPrefix(cand, toComplete) || strings.HasPrefix(n, toComplete) {
				out = append(out, cand)
			}
		}
	})
	sort.Strings(out)
	return out
}

// registerFlagCompletions completes get's -n (the namespaces of the
// informer's objects), --index (its index names) and -o.
func (a *app) registerFlagCompletions(cmd *cobra.Command) {
	_ = cmd.RegisterFlagCompletionFunc("namespace", func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if len(args) < 2 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		seen := map[string]bool{}
		a.completionView(args[0], func(tx *store.Tx) {
			inf, err := resolveInformer(tx, args[1])
			if err != nil {
				return
			}
			_ = tx.ForEachRaw(inf, func(key string, _ []byte) error {
				if ns, _, ok := strings.Cut(key, "/"); ok && strings.HasPrefix(ns, toComplete) {
					seen[ns] = true
				}
				return nil
			})
		})
		return sortedKeys(seen), cobra.ShellCompDirectiveNoFileComp
	})
	_ = cmd.RegisterFlagCompletionFunc("index", func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if len(args) < 2 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []string
		a.completionView(args[0], func(tx *store.Tx) {
			if inf, err := resolveInformer(tx, args[1]); err == nil {
				for _, idx := range tx.Indexes(inf) {
					if strings.HasPrefix(idx+"=", toComplete) {
						out = append(out, idx+"=")
					}
				}
			}
		})
		return out, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
	})
}

// completeOutput completes -o with the command's formats.
func completeOutput(cmd *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	var out []string
	for _, f := range strings.Split(cmd.Annotations[formatsAnnotation], ",") {
		f = strings.TrimSuffix(f, "...")
		if f != "" && strings.HasPrefix(f, toComplete) {
			out = append(out, f)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
}

// registerDiffCompletions completes diff's --informer (the informers of
// FILE, but those already given) and -n (the namespaces of FILE's objects,
// in the --informer informers when given).
func (a *app) registerDiffCompletions(cmd *cobra.Command) {
	_ = cmd.RegisterFlagCompletionFunc("informer", func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if len(args) < 1 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		given, _ := cmd.Flags().GetStringArray("informer")
		var out []string
		for _, cand := range a.informerCandidates(args[0], toComplete) {
			if !contains(given, cand) {
				out = append(out, cand)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	})
	_ = cmd.RegisterFlagCompletionFunc("namespace", func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if len(args) < 1 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		given, _ := cmd.Flags().GetStringArray("informer")
		seen := map[string]bool{}
		a.completionView(args[0], func(tx *store.Tx) {
			infs := tx.Informers()
			if len(given) > 0 {
				infs = nil
				for _, g := range given {
					if inf, err := resolveInformer(tx, g); err == nil {
						infs = append(infs, inf)
					}
				}
			}
			for _, inf := range infs {
				_ = tx.ForEachRaw(inf, func(key string, _ []byte) error {
					if ns, _, ok := strings.Cut(key, "/"); ok && strings.HasPrefix(ns, toComplete) {
						seen[ns] = true
					}
					return nil
				})
			}
		})
		return sortedKeys(seen), cobra.ShellCompDirectiveNoFileComp
	})
}

// completionView runs fn over the file at path, or does nothing when it
// does not open (completion has no place for errors).
func (a *app) completionView(path string, fn func(tx *store.Tx)) {
	_ = a.view(path, func(_ *store.DB, tx *store.Tx) error {
		fn(tx)
		return nil
	})
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
