package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/boltinformer/boltinformer/internal/encryptionconfig"
	"github.com/boltinformer/boltinformer/store"
)

type listOptions struct {
	namespace string
	selector  string
	indexes   []string
}

func (a *app) newListCommand() *cobra.Command {
	var o listOptions
	var p *printFlags
	cmd := &cobra.Command{
		Use:   "list FILE INFORMER",
		Short: "List the cached objects of an informer",
		Long: `list prints the objects of an informer, optionally only those of one
namespace (-n), matching a label selector (-l, kubectl's syntax), or found
under a value of one of its secondary indexes (--index NAME=VALUE, read from
the index bucket; repeat it to intersect).`,
		Example: `  inspect list cache.db v1/pods -n kube-system
  inspect list cache.db pods -l 'app=web,tier!=db' -o wide
  inspect list cache.db pods --index namespace=prod -o name`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := p.validate(); err != nil {
				return err
			}
			sel, err := labels.Parse(o.selector)
			if err != nil {
				return fmt.Errorf("-l %q: %w", o.selector, err)
			}
			keys, err := readKeyFile(a.keyFile)
			if err != nil {
				return err
			}
			return a.list(cmd, args[0], args[1], &o, sel, keys, p)
		},
	}
	cmd.Flags().StringVarP(&o.namespace, "namespace", "n", "", "only objects of this namespace")
	cmd.Flags().StringVarP(&o.selector, "selector", "l", "", "label selector, e.g. 'app=web,tier in (db,cache)'")
	cmd.Flags().StringArrayVar(&o.indexes, "index", nil, "only objects with this value in this index, as NAME=VALUE")
	p = addPrintFlags(cmd, formatTable, formatWide, formatName, formatJSON, formatYAML)
	return cmd
}

func (a *app) list(cmd *cobra.Command, path, informer string, o *listOptions, sel labels.Selector, keys *encryptionconfig.Config, p *printFlags) error {
	return a.view(path, func(_ *store.DB, tx *store.Tx) error {
		inf, err := resolveInformer(tx, informer)
		if err != nil {
			return err
		}
		objKeys, err := indexedKeys(tx, inf, o.indexes)
		if err != nil {
			return err
		}
		st := informerState(cmd, tx, inf)
		d := newDecoder(inf, st, keys)
		rv := ""
		if st != nil {
			rv = st.ResourceVersion
		}
		if err := keysWork(tx, inf, d); err != nil {
			return err
		}
		var objs []*object
		var lw *listWriter
		if !p.table() {
			lw = newListWriter(cmd.OutOrStdout(), p.output, rv)
		}
		var envelopes, failed, unlabelled int
		prefix := o.namespace + "/"
		dangling, err := scanObjects(tx, inf, objKeys, d, func(key string) bool {
			return o.namespace == "" || strings.HasPrefix(key, prefix)
		}, func(obj *object) error {
			if !sel.Empty() {
				if obj.obj == nil {
					unlabelled++
					return nil
				}
				m, err := meta.Accessor(obj.obj)
				if err != nil {
					unlabelled++
					return nil
				}
				if !sel.Matches(labels.Set(m.GetLabels())) {
					return nil
				}
			}
			switch {
			case obj.failed:
				failed++
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: object %q: payload does not decode: %s\n", obj.key, obj.reason)
			case obj.obj == nil:
				envelopes++
			}
			if lw != nil {
				return lw.add(obj)
			}
			objs = append(objs, obj)
			return nil
		})
		if err != nil {
			return err
		}
		switch {
		case lw != nil:
			err = lw.close()
		case len(objs) == 0:
			where := ""
			if o.namespace != "" {
				where = fmt.Sprintf(" in namespace %s", o.namespace)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "No objects found%s.\n", where)
		default:
			err = objectTable(objs, d.kind, o.namespace == "", p.wide(), a.now()).print(cmd.OutOrStdout(), p.noHeaders)
		}
		if err != nil {
			return err
		}
		if envelopes > 0 {
			fmt.Fprintf(cmd.ErrOrStderr(), "warning: %d object(s) printed as envelopes: their type is not one this inspect knows\n", envelopes)
		}
		if dangling > 0 {
			fmt.Fprintf(cmd.ErrOrStderr(), "warning: %d index entries point to missing objects; run inspect check %s\n", dangling, path)
		}
		if unlabelled > 0 {
			fmt.Fprintf(cmd.ErrOrStderr(), "warning: %d object(s) left out: -l needs their labels, and they do not decode\n", unlabelled)
		}
		if failed > 0 {
			return &exitError{code: exitCorrupt, msg: fmt.Sprintf("%d object(s) have payloads that do not decode; run inspect check %s", failed, path)}
		}
		return nil
	})
}

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
// returns how many keys have no object. A
// missing or wrong decryption key is an error, and so is a record that
// does not decode (ErrCorrupt); a payload that does not is fn's to judge.
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
		if o.keyErr != nil {
			return o.keyErr
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
