package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/boltinformer/boltinformer/internal/encryptionconfig"
	"github.com/boltinformer/boltinformer/internal/safefile"
	"github.com/boltinformer/boltinformer/store"
)

type exportOptions struct {
	outputFile        string
	progress          string
	showManagedFields bool
}

func (a *app) newExportCommand() *cobra.Command {
	var o exportOptions
	var p *printFlags
	cmd := &cobra.Command{
		Use:   "export FILE [INFORMER]",
		Short: "Write the cached objects as a kubectl-style List",
		Long: `export writes the objects of one informer, or of all of them, as a List
(apiVersion: v1, kind: List, items: ...) in JSON or YAML, or as JSON lines
(one object per line, no List), to stdout or to --output-file. Objects carry
their apiVersion and kind, so the output can be read by kubectl (e.g.
kubectl apply --dry-run=client -f). A progress bar goes to stderr when it is
a terminal and the export does not go to it (--progress=auto: not drawn amid
the objects on the screen) or always (--progress=always).`,
		Example: `  inspect export cache.db -o yaml > cache.yaml
  inspect export cache.db v1/pods -o jsonl --output-file pods.jsonl`,
		Args:              cobra.RangeArgs(1, 2),
		ValidArgsFunction: a.completeInformerArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := p.validate(); err != nil {
				return err
			}
			if err := checkProgressFlag(o.progress); err != nil {
				return err
			}
			keys, err := readKeyFile(a.keyFile)
			if err != nil {
				return err
			}
			informer := ""
			if len(args) == 2 {
				informer = args[1]
			}
			return a.export(cmd, args[0], informer, &o, keys, p)
		},
	}
	p = addPrintFlags(cmd, formatJSON, formatYAML, formatJSONL)
	cmd.Flags().StringVar(&o.outputFile, "output-file", "", "write to this file instead of stdout")
	addProgressFlag(cmd, &o.progress, "when stderr is a terminal and the export does not go to it")
	addManagedFieldsFlag(cmd, &o.showManagedFields)
	return cmd
}

func (a *app) export(cmd *cobra.Command, path, informer string, o *exportOptions, keys *encryptionconfig.Config, p *printFlags) (err error) {
	db, err := a.open(path)
	if err != nil {
		return err
	}
	defer db.Close()
	out := cmd.OutOrStdout()
	if o.outputFile != "" {
		f, cerr := a.createOutput(path, o.outputFile)
		if cerr != nil {
			return cerr
		}
		defer func() {
			if err == nil {
				err = f.Sync() // the data before the name: never an empty file named as complete
			}
			if cerr := f.Close(); err == nil && cerr != nil {
				err = cerr
			}
			if err == nil {
				err = os.Rename(f.Name(), o.outputFile)
				if err == nil {
					err = safefile.SyncDir(filepath.Dir(o.outputFile))
				}
			}
			if err != nil {
				_ = os.Remove(f.Name()) // no partial export that looks complete
			}
			a.forgetTemp(f.Name())
		}()
		out = f
	}
	return db.View(func(tx *store.Tx) error {
		infs := tx.Informers()
		rv := ""
		if informer != "" {
			inf, err := resolveInformer(tx, informer)
			if err != nil {
				return err
			}
			infs = []string{inf}
			if st, _ := tx.State(inf); st != nil {
				rv = st.ResourceVersion // a List of one informer is as of its resourceVersion
			}
		}
		var total int64
		decoders := map[string]*decoder{}
		for _, inf := range infs {
			st := informerState(cmd, tx, inf)
			if st != nil {
				total += st.Objects
			}
			decoders[inf] = newDecoder(inf, st, keys)
			if err := keysWork(tx, inf, decoders[inf]); err != nil {
				return err
			}
		}
		bar := newProgress(cmd.ErrOrStderr(), out, o.progress, total, "export")
		lw := newListWriter(out, p.output, rv, o.showManagedFields)
		var envelopes, failed int
		for _, inf := range infs {
			_, err := scanObjects(tx, inf, nil, decoders[inf], func(string) bool { return true }, func(obj *object) error {
				if obj.keyErr != nil {
					return obj.keyErr // an export is whole, or fails
				}
				switch {
				case obj.failed:
					failed++
					fmt.Fprintf(cmd.ErrOrStderr(), "warning: informer %q object %q: payload does not decode: %s\n", inf, obj.key, obj.reason)
				case obj.obj == nil:
					envelopes++
				}
				bar.add(1)
				if err := lw.add(obj); err != nil {
					return err
				}
				if a.pause != nil && lw.n == 1 {
					a.pause("export")
				}
				return nil
			})
			if err != nil {
				bar.done()
				return err
			}
		}
		bar.done()
		if err := lw.close(); err != nil {
			return err
		}
		if envelopes > 0 {
			fmt.Fprintf(cmd.ErrOrStderr(), "warning: %d object(s) exported as envelopes (kind %s): their type is not one this inspect knows\n", envelopes, envelopeKind)
		}
		if failed > 0 {
			return &exitError{code: exitCorrupt, msg: fmt.Sprintf("%d object(s) have payloads that do not decode; run inspect check %s", failed, path)}
		}
		return nil
	})
}

// createOutput creates a temporary file next to the --output-file, which
// replaces it once the export is complete. It refuses the cache file.
func (a *app) createOutput(cache, out string) (*os.File, error) {
	if same, err := sameFile(cache, out); err != nil || same {
		if err == nil {
			err = errors.New("it is the cache file")
		}
		return nil, fmt.Errorf("--output-file %s: %w", out, err)
	}
	f, err := a.createTemp(filepath.Dir(out), "."+filepath.Base(out)+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("--output-file: %w", err)
	}
	return f, nil
}

// sameFile reports whether a and b name the same file (b may not exist).
func sameFile(a, b string) (bool, error) {
	aa, err1 := filepath.Abs(a)
	bb, err2 := filepath.Abs(b)
	if err := errors.Join(err1, err2); err != nil {
		return false, err
	}
	if aa == bb {
		return true, nil
	}
	fa, err := os.Stat(a)
	if err != nil {
		return false, err
	}
	fb, err := os.Stat(b)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return os.SameFile(fa, fb), nil
}
