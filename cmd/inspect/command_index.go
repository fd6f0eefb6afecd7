package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/boltinformer/boltinformer/store"
)

// wideKeys is how many object keys a wide index table shows per value.
const wideKeys = 3

func (a *app) newIndexCommand() *cobra.Command {
	var p *printFlags
	cmd := &cobra.Command{
		Use:   "index FILE INFORMER [INDEX]",
		Short: "Print the values of a secondary index with their object counts",
		Long: `index prints the values of an informer's index bucket, each with the number
of objects that have it (-o wide and json/yaml add the object keys). Without
INDEX it lists the informer's indexes.`,
		Example: `  inspect index cache.db v1/pods namespace
  inspect index cache.db v1/pods`,
		Args:              cobra.RangeArgs(2, 3),
		ValidArgsFunction: a.completeIndexArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := p.validate(); err != nil {
				return err
			}
			if len(args) == 2 {
				return a.indexes(cmd, args[0], args[1], p)
			}
			return a.index(cmd, args[0], args[1], args[2], p)
		},
	}
	p = addPrintFlags(cmd, formatTable, formatWide, formatName, formatJSON, formatYAML)
	return cmd
}

// indexValue is one value of an index.
type indexValue struct {
	Value   string   `json:"value"`
	Objects int      `json:"objects"`
	Keys    []string `json:"keys"`
}

// indexInfo is one index bucket.
type indexInfo struct {
	Informer string       `json:"informer"`
	Index    string       `json:"index"`
	Entries  int          `json:"entries"`
	Values   []indexValue `json:"values,omitempty"`
	Distinct int          `json:"distinctValues"`
}

func readIndex(tx *store.Tx, inf, name string, withValues bool) (indexInfo, error) {
	ii := indexInfo{Informer: inf, Index: name}
	err := tx.ForEachIndexEntry(inf, name, func(value, key string) error {
		ii.Entries++
		if n := len(ii.Values); n == 0 || ii.Values[n-1].Value != value {
			ii.Values = append(ii.Values, indexValue{Value: value})
		}
		v := &ii.Values[len(ii.Values)-1]
		v.Objects++
		v.Keys = append(v.Keys, key)
		return nil
	})
	ii.Distinct = len(ii.Values)
	if !withValues {
		ii.Values = nil
	}
	return ii, err
}

func (a *app) index(cmd *cobra.Command, path, informer, name string, p *printFlags) error {
	return a.view(path, func(_ *store.DB, tx *store.Tx) error {
		inf, err := resolveInformer(tx, informer)
		if err != nil {
			return err
		}
		if !tx.HasIndex(inf, name) {
			return fmt.Errorf("informer %q has no index %q (indexes: %s)", inf, name, orNone(strings.Join(tx.Indexes(inf), ", ")))
		}
		ii, err := readIndex(tx, inf, name, true)
		if err != nil {
			return err
		}
		out := cmd.OutOrStdout()
		switch p.output {
		case formatJSON, formatYAML:
			if ii.Values == nil {
				ii.Values = []indexValue{}
			}
			return writeValue(out, p.output, ii)
		case formatName:
			for _, v := range ii.Values {
				fmt.Fprintln(out, v.Value)
			}
			return nil
		}
		if len(ii.Values) == 0 {
			fmt.Fprintf(cmd.ErrOrStderr(), "Index %q is empty.\n", name)
			return nil
		}
		t := &table{headers: []string{"VALUE", "OBJECTS"}}
		if p.wide() {
			t.headers = append(t.headers, "KEYS")
		}
		for _, v := range ii.Values {
			row := []string{v.Value, strconv.Itoa(v.Objects)}
			if p.wide() {
				keys := v.Keys
				more := ""
				if len(keys) > wideKeys {
					keys, more = keys[:wideKeys], fmt.Sprintf(" + %d more", len(v.Keys)-wideKeys)
				}
				row = append(row, strings.Join(keys, ",")+more)
			}
			t.add(row...)
		}
		return t.print(out, p.noHeaders)
	})
}

func (a *app) indexes(cmd *cobra.Command, path, informer string, p *printFlags) error {
	return a.view(path, func(_ *store.DB, tx *store.Tx) error {
		inf, err := resolveInformer(tx, informer)
		if err != nil {
			return err
		}
		all := []indexInfo{}
		for _, name := range tx.Indexes(inf) {
			ii, err := readIndex(tx, inf, name, false)
			if err != nil {
				return err
			}
			all = append(all, ii)
		}
		out := cmd.OutOrStdout()
		switch p.output {
		case formatJSON, formatYAML:
			return writeValue(out, p.output, all)
		case formatName:
			for _, ii := range all {
				fmt.Fprintln(out, ii.Index)
			}
			return nil
		}
		if len(all) == 0 {
			fmt.Fprintf(cmd.ErrOrStderr(), "Informer %q has no indexes.\n", inf)
			return nil
		}
		t := &table{headers: []string{"INDEX", "VALUES", "ENTRIES"}}
		for _, ii := range all {
			t.add(ii.Index, strconv.Itoa(ii.Distinct), strconv.Itoa(ii.Entries))
		}
		return t.print(out, p.noHeaders)
	})
}

// completeIndexArgs completes FILE, INFORMER and INDEX.
func (a *app) completeIndexArgs(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	if len(args) != 2 {
		return a.completeInformerArg(cmd, args, toComplete)
	}
	var out []string
	a.completionView(args[0], func(tx *store.Tx) {
		if inf, err := resolveInformer(tx, args[1]); err == nil {
			for _, idx := range tx.Indexes(inf) {
				if strings.HasPrefix(idx, toComplete) {
					out = append(out, idx)
				}
			}
		}
	})
	return out, cobra.ShellCompDirectiveNoFileComp
}
