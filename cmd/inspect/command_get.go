package main

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	kruntime "k8s.io/apimachinery/pkg/runtime"

	"github.com/boltinformer/boltinformer/internal/encryptionconfig"
	"github.com/boltinformer/boltinformer/store"
)

// getOptions are get's own flags, kubectl's.
type getOptions struct {
	namespace     string
	allNamespaces bool
	selector      string
	fieldSelector string
	indexes       []string
	sortBy        string
}

func (a *app) newGetCommand() *cobra.Command {
	var o getOptions
	var p *printFlags
	cmd := &cobra.Command{
		Use:     "get FILE INFORMER [NAME ...]",
		Aliases: []string{"list"},
		Short:   "Print cached objects, as kubectl get does",
		Long: `get prints objects of an informer, decoded: built-in types through
client-go's scheme, custom resources as stored (JSON). With NAMEs, those
objects (NAMESPACE/NAME, or NAME with -n NAMESPACE, or NAME alone for a
cluster-scoped object); without, every object, or those of one namespace
(-n), matching a label selector (-l) or a field selector (--field-selector,
any field by its path, e.g. spec.nodeName=node-1,status.phase!=Running), or
found under a value of a secondary index (--index NAME=VALUE, read from the
index bucket; repeat it to intersect). -A is every namespace (the default
here, as the file has no current namespace; it overrides -n, as in kubectl).
--sort-by sorts by a jsonpath. "list" is another name of this command.

INFORMER is the informer's name in the file ("v1/pods"), its last path
element ("pods"), or its resource as kubectl names it: plural, singular,
short name or kind ("po", "pod", "Pod"), or resource.group
("deployments.apps", "widgets.example.com").

A payload of a type this inspect does not know, and an encrypted payload
without --key-file, print as the record's envelope (key, uid,
resourceVersion, codec, key id, payload), with a warning; a --key-file
that does not open a payload is an error (after the output).`,
		Example: `  inspect get cache.db po -n kube-system coredns-7d9c8b6f5-x2x9z -o yaml
  inspect get cache.db pods -A --field-selector spec.nodeName=node-1 --sort-by .metadata.creationTimestamp
  inspect get cache.db pods -l 'app=web,tier!=db' -L app,tier -o wide
  inspect get cache.db pods -o jsonpath='{range .items[*]}{.metadata.name}{"\t"}{.status.podIP}{"\n"}{end}'
  inspect get cache.db secrets prod/db -o json --key-file /etc/agent/encryption.yaml`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := p.validate(); err != nil {
				return err
			}
			sel, err := newObjectSelector(o.selector, o.fieldSelector)
			if err != nil {
				return err
			}
			if len(args) > 2 && (!sel.empty() || len(o.indexes) > 0) {
				return errors.New("a NAME cannot be given with a selector (-l, --field-selector, --index)")
			}
			if o.allNamespaces {
				o.namespace = ""
			}
			keys, err := readKeyFile(a.keyFile)
			if err != nil {
				return err
			}
			return a.get(cmd, args[0], args[1], args[2:], &o, sel, keys, p)
		},
		ValidArgsFunction: a.completeObjectArgs,
	}
	cmd.Flags().StringVarP(&o.namespace, "namespace", "n", "", "only objects of this namespace (a NAME is taken in it)")
	cmd.Flags().BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "objects of every namespace (the default; overrides -n)")
	cmd.Flags().StringVarP(&o.selector, "selector", "l", "", "label selector, e.g. 'app=web,tier in (db,cache)'")
	cmd.Flags().StringVar(&o.fieldSelector, "field-selector", "", "field selector, any field by its path, e.g. 'spec.nodeName=node-1,status.phase!=Running'")
	cmd.Flags().StringArrayVar(&o.indexes, "index", nil, "only objects with this value in this index, as NAME=VALUE")
	cmd.Flags().StringVar(&o.sortBy, "sort-by", "", "sort by this jsonpath, e.g. .metadata.creationTimestamp (numbers and times as such)")
	p = addObjectPrintFlags(cmd)
	a.registerFlagCompletions(cmd)
	return cmd
}

func (a *app) get(cmd *cobra.Command, path, informer string, names []string, o *getOptions, sel *objectSelector, keys *encryptionconfig.Config, p *printFlags) error {
	return a.view(path, func(_ *store.DB, tx *store.Tx) error {
		inf, err := resolveInformer(tx, informer)
		if err != nil {
			return err
		}
		st := informerState(cmd, tx, inf)
		d := newDecoder(inf, st, keys)
		rv := ""
		if st != nil {
			rv = st.ResourceVersion
		}
		var objs []*object
		var missing []string
		if len(names) > 0 {
			objs, missing, err = getNamed(tx, inf, d, names, o.namespace)
		} else {
			objs, err = a.getSelected(cmd, path, tx, inf, d, o, sel)
		}
		if err != nil {
			return err
		}
		if o.sortBy != "" {
			if err := sortObjects(objs, o.sortBy); err != nil {
				return err
			}
		}
		if err := printObjects(cmd, objs, d, p, rv, len(names) == 1, o.namespace == "" && len(names) == 0, a.now()); err != nil {
			return err
		}
		if len(objs) == 0 && len(names) == 0 {
			where := ""
			if o.namespace != "" {
				where = fmt.Sprintf(" in %s namespace", o.namespace)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "No resources found%s.\n", where)
		}
		return objectsVerdict(cmd, path, objs, missing, keys)
	})
}

// getNamed reads the named objects; names not found are returned apart.
func getNamed(tx *store.Tx, inf string, d *decoder, names []string, namespace string) (objs []*object, missing []string, err error) {
	for _, name := range names {
		key := name
		if !strings.Contains(name, "/") && namespace != "" {
			key = namespace + "/" + name
		}
		r, err := tx.Get(inf, key)
		if err != nil {
			return nil, nil, err
		}
		if r == nil {
			missing = append(missing, notFound(tx, inf, key, namespace))
			continue
		}
		obj, err := d.decode(key, r)
		if err != nil {
			return nil, nil, err
		}
		objs = append(objs, obj)
	}
	return objs, missing, nil
}

// notFound says that inf has no object key, and where an object of that
// name is when the name was given without its namespace.
func notFound(tx *store.Tx, inf, key, namespace string) string {
	msg := fmt.Sprintf("informer %q has no object %q", inf, key)
	if namespace != "" || strings.Contains(key, "/") {
		return msg
	}
	var in []string
	_ = tx.ForEachRaw(inf, func(k string, _ []byte) error {
		if ns, name, ok := strings.Cut(k, "/"); ok && name == key {
			in = append(in, ns)
		}
		return nil
	})
	if len(in) > 0 {
		sort.Strings(in)
		msg += fmt.Sprintf(" (its objects are namespaced: give -n NAMESPACE or NAMESPACE/NAME; %q is in namespace %s)", key, strings.Join(in, ", "))
	}
	return msg
}

// getSelected reads the objects that the namespace, the selectors and
// the indexes select, warning of what could not be judged.
func (a *app) getSelected(cmd *cobra.Command, path string, tx *store.Tx, inf string, d *decoder, o *getOptions, sel *objectSelector) ([]*object, error) {
	objKeys, err := indexedKeys(tx, inf, o.indexes)
	if err != nil {
		return nil, err
	}
	var objs []*object
	var unjudged int
	prefix := o.namespace + "/"
	dangling, err := scanObjects(tx, inf, objKeys, d, func(key string) bool {
		return o.namespace == "" || strings.HasPrefix(key, prefix)
	}, func(obj *object) error {
		if !sel.empty() {
			match, judged := sel.matches(obj)
			if !judged {
				unjudged++
			}
			if !match {
				return nil
			}
		}
		objs = append(objs, obj)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if dangling > 0 {
		fmt.Fprintf(cmd.ErrOrStderr(), "warning: %d index entries point to missing objects; run inspect check %s\n", dangling, path)
	}
	if unjudged > 0 {
		fmt.Fprintf(cmd.ErrOrStderr(), "warning: %d object(s) left out: the selector needs fields they do not have, as they do not decode\n", unjudged)
	}
	return objs, nil
}

// printObjects prints objs: a table, or with cli-runtime's printers one
// object (single: one NAME was asked for) or a List of them at the
// informer's resourceVersion.
func printObjects(cmd *cobra.Command, objs []*object, d *decoder, p *printFlags, rv string, single, allNamespaces bool, now time.Time) error {
	out := cmd.OutOrStdout()
	if p.table() {
		// A NAMESPACE column when listing every namespace (kubectl's -A),
		// or for named objects of several namespaces.
		namespaces := map[string]bool{}
		for _, o := range objs {
			if ns, _ := o.namespaceName(); ns != "" {
				namespaces[ns] = true
			}
		}
		withNamespace := len(namespaces) > 1 || (allNamespaces && len(namespaces) > 0)
		return printTable(out, objectTable(objs, d.kind, now), p, withNamespace)
	}
	pr, err := p.resourcePrinter()
	if err != nil {
		return err
	}
	var obj kruntime.Object
	if single && len(objs) == 1 {
		obj = objs[0].printable()
	} else {
		items := make([]kruntime.Object, len(objs))
		for i, o := range objs {
			items[i] = o.printable()
		}
		obj = newList(rv, items)
	}
	if err := pr.PrintObj(obj, out); err != nil {
		// A template's error goes on to print the whole object (a
		// decrypted Secret too): its first sentence says enough.
		msg, _, _ := strings.Cut(err.Error(), " Printing more information")
		return errors.New(msg)
	}
	return nil
}

// objectsVerdict warns of objects printed as envelopes and returns the
// command's error: names not found, a --key-file that did not open a
// payload (1), payloads that do not decode (2).
func objectsVerdict(cmd *cobra.Command, path string, objs []*object, missing []string, keys *encryptionconfig.Config) error {
	var unknown, encrypted, failed int
	var keyErrs []string
	for _, o := range objs {
		switch {
		case o.keyErr != nil && keys != nil:
			keyErrs = append(keyErrs, o.keyErr.Error())
		case o.keyErr != nil:
			encrypted++
		case o.failed:
			failed++
			fmt.Fprintf(cmd.ErrOrStderr(), "warning: object %q: payload does not decode: %s\n", o.key, o.reason)
		case o.obj == nil:
			unknown++
		}
	}
	w := cmd.ErrOrStderr()
	if len(objs) == 1 && unknown+encrypted == 1 {
		fmt.Fprintf(w, "warning: object %q printed as its envelope: %s\n", objs[0].key, objs[0].reason)
	} else {
		if unknown > 0 {
			fmt.Fprintf(w, "warning: %d object(s) printed as envelopes: their type is not one this inspect knows\n", unknown)
		}
		if encrypted > 0 {
			fmt.Fprintf(w, "warning: %d object(s) printed as envelopes: they are encrypted; pass --key-file FILE (an EncryptionConfiguration) to decode them\n", encrypted)
		}
	}
	switch {
	case failed > 0:
		return &exitError{code: exitCorrupt, msg: fmt.Sprintf("%d object(s) have payloads that do not decode; run inspect check %s", failed, path)}
	case len(missing)+len(keyErrs) > 0:
		msgs := append(missing, keyErrs...)
		return &exitError{code: exitFailure, msg: strings.Join(msgs, "\ninspect: ")}
	}
	return nil
}
