package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/boltinformer/boltinformer/internal/encryptionconfig"
	"github.com/boltinformer/boltinformer/store"
)

func (a *app) newGetCommand() *cobra.Command {
	var p *printFlags
	cmd := &cobra.Command{
		Use:   "get FILE INFORMER NAMESPACE/NAME",
		Short: "Print one cached object",
		Long: `get prints one object of an informer, decoded: built-in types through
client-go's scheme, custom resources as stored (JSON). A payload of a type
this inspect does not know is printed as its envelope (key, uid,
resourceVersion, codec, payload). Cluster-scoped objects are named by NAME
alone. INFORMER is the informer's name in the file, or its last path element
when that is unique ("pods" for "v1/pods").`,
		Example: `  inspect get cache.db v1/pods kube-system/coredns-7d9c8b6f5-x2x9z -o yaml
  inspect get cache.db v1/secrets prod/db -o json --key-file /etc/agent/keys`,
		Args: cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := p.validate(); err != nil {
				return err
			}
			keys, err := readKeyFile(a.keyFile)
			if err != nil {
				return err
			}
			return a.get(cmd, args[0], args[1], args[2], keys, p)
		},
	}
	p = addPrintFlags(cmd, formatTable, formatWide, formatName, formatJSON, formatYAML)
	return cmd
}

func (a *app) get(cmd *cobra.Command, path, informer, key string, keys *encryptionconfig.Config, p *printFlags) error {
	return a.view(path, func(_ *store.DB, tx *store.Tx) error {
		inf, err := resolveInformer(tx, informer)
		if err != nil {
			return err
		}
		r, err := tx.Get(inf, key)
		if err != nil {
			return err
		}
		if r == nil {
			return fmt.Errorf("informer %q has no object %q", inf, key)
		}
		d := newDecoder(inf, informerState(cmd, tx, inf), keys)
		o, err := d.decode(key, r)
		if err != nil {
			return err
		}
		if o.keyErr != nil {
			return o.keyErr
		}
		if err := printObject(cmd.OutOrStdout(), p, o, d, a); err != nil {
			return err
		}
		return undecodedError(cmd, o)
	})
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

func printObject(w io.Writer, p *printFlags, o *object, d *decoder, a *app) error {
	switch p.output {
	case formatJSON, formatYAML:
		return writeValue(w, p.output, o.printable())
	case formatName:
		_, err := fmt.Fprintln(w, objectName(o))
		return err
	}
	return objectTable([]*object{o}, d.kind, false, p.wide(), a.now()).print(w, p.noHeaders)
}

// undecodedError warns of a record printed as its envelope; a payload
// that should have decoded and did not is an error (a damaged payload).
func undecodedError(cmd *cobra.Command, o *object) error {
	if o.obj != nil {
		return nil
	}
	if o.failed {
		return &exitError{code: exitCorrupt, msg: fmt.Sprintf("object %q: payload does not decode: %s", o.key, o.reason)}
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "warning: object %q printed as its envelope: %s\n", o.key, o.reason)
	return nil
}
