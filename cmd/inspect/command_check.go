package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/boltinformer/boltinformer/internal/encryptionconfig"
	"github.com/boltinformer/boltinformer/store"
)

func (a *app) newCheckCommand() *cobra.Command {
	var p *printFlags
	var maxProblems int
	var progress string
	cmd := &cobra.Command{
		Use:   "check FILE",
		Short: "Verify the file: bbolt pages, records, indexes, counts and payloads",
		Long: `check verifies the whole file: bbolt's page consistency check; every state
record and object record decodes and its checksum matches; every index entry
points to an object with that value and every object's values have entries;
each state's object count is right and every record's type is one its state
names (store.DB.Check); and every payload decodes, is of the kind its record
says, and has the uid and resourceVersion of its envelope. Encrypted
payloads are decrypted with --key-file, or left out (their checksum is still
verified). It exits with status 2 when it finds a problem, and prints them.
An encrypted payload that does not decrypt with the keys of --key-file is not
a problem of the file (its checksum, which covers the sealed bytes, holds):
check reports it as a key error and exits with status 1, like the other
commands do for a wrong key.`,
		Example: `  inspect check cache.db
  inspect check cache.db --key-file /etc/agent/keys -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := p.validate(); err != nil {
				return err
			}
			keys, err := readKeyFile(a.keyFile)
			if err != nil {
				return err
			}
			if err := checkProgressFlag(progress); err != nil {
				return err
			}
			return a.check(cmd, args[0], keys, maxProblems, progress, p)
		},
	}
	p = addPrintFlags(cmd, formatTable, formatJSON, formatYAML)
	cmd.Flags().IntVar(&maxProblems, "max-problems", 1000, "stop after this many problems")
	addProgressFlag(cmd, &progress, "when stderr is a terminal")
	return cmd
}

type checkReport struct {
	File string `json:"file"`
	// OK is true when there are no problems and no key errors.
	OK        bool            `json:"ok"`
	Informers []checkInformer `json:"informers"`
	Problems  []checkProblem  `json:"problems"`
	// KeyErrors are payloads that do not decrypt with --key-file (a wrong
	// or missing key, not damage); at most --max-problems are listed.
	KeyErrors []checkProblem `json:"keyErrors"`
}

type checkInformer struct {
	Name    string `json:"name"`
	Objects int    `json:"objects"`
	Indexes int    `json:"indexes"`
	// Decoded payloads; Envelopes are of types this inspect does not
	// know; Encrypted were not decrypted (no --key-file).
	Decoded   int `json:"decoded"`
	Envelopes int `json:"envelopes"`
	Encrypted int `json:"encrypted"`
	// KeyErrors did not decrypt with --key-file.
	KeyErrors int `json:"keyErrors"`
	Problems  int `json:"problems"`
}

type checkProblem struct {
	Informer string `json:"informer,omitempty"`
	Message  string `json:"message"`
}

func (a *app) check(cmd *cobra.Command, path string, keys *encryptionconfig.Config, maxProblems int, progressMode string, p *printFlags) error {
	rep := &checkReport{File: path, Informers: []checkInformer{}, Problems: []checkProblem{}, KeyErrors: []checkProblem{}}
	db, err := a.open(path)
	if err != nil {
		if !errors.Is(err, store.ErrCorrupt) {
			return err
		}
		rep.Problems = append(rep.Problems, checkProblem{Message: err.Error()})
		return a.printCheck(cmd, rep, p)
	}
	defer db.Close()
	if maxProblems <= 0 {
		maxProblems = 1000
	}
	// The bar counts each object twice: the store's check of its record,
	// then the decoding of its payload.
	var objects int64
	_ = db.View(func(tx *store.Tx) error {
		objects = countObjects(tx)
		return nil
	})
	bar := newProgress(cmd.ErrOrStderr(), nil, progressMode, 2*objects, "check: records")
	probs, err := db.Check(&store.CheckOptions{MaxProblems: maxProblems, OnObject: func() { bar.add(1) }})
	for _, pr := range probs {
		// Every problem is corruption: say what, not that.
		msg := strings.ReplaceAll(pr.Err.Error(), store.ErrCorrupt.Error()+": ", "")
		rep.Problems = append(rep.Problems, checkProblem{Informer: pr.Informer, Message: msg})
	}
	if err != nil {
		bar.done()
		rep.Problems = append(rep.Problems, checkProblem{Message: err.Error()})
		return a.printCheck(cmd, rep, p)
	}
	bar.describe("check: payloads")
	err = db.View(func(tx *store.Tx) error {
		for _, inf := range tx.Informers() {
			if len(rep.Problems) >= maxProblems {
				break
			}
			rep.Informers = append(rep.Informers, checkPayloads(tx, inf, keys, rep, maxProblems, func() { bar.add(1) }))
		}
		return nil
	})
	bar.done()
	if err != nil {
		rep.Problems = append(rep.Problems, checkProblem{Message: err.Error()})
	}
	for i := range rep.Informers {
		for _, pr := range rep.Problems {
			if pr.Informer == rep.Informers[i].Name {
				rep.Informers[i].Problems++
			}
		}
	}
	return a.printCheck(cmd, rep, p)
}

// checkPayloads decodes every payload of inf, adding problems to rep.
func checkPayloads(tx *store.Tx, inf string, keys *encryptionconfig.Config, rep *checkReport, maxProblems int, onObject func()) checkInformer {
	ci := checkInformer{Name: inf, Indexes: len(tx.Indexes(inf))}
	problem := func(format string, args ...any) {
		rep.Problems = append(rep.Problems, checkProblem{Informer: inf, Message: fmt.Sprintf(format, args...)})
	}
	st, _ := tx.State(inf) // a damaged state is one of db.Check's problems
	d := newDecoder(inf, st, keys)
	_ = tx.ForEachRaw(inf, func(key string, raw []byte) error {
		ci.Objects++
		onObject()
		r, err := store.DecodeRecord(key, raw)
		if err != nil {
			return nil // one of db.Check's problems
		}
		o, err := d.decode(key, r)
		switch {
		case err == nil && o.keyErr != nil && keys == nil:
			ci.Encrypted++
		case err == nil && o.keyErr != nil:
			err = o.keyErr
			// The record's checksum covers the sealed payload and
			// db.Check verified it: the key is wrong, not the file.
			ci.KeyErrors++
			if len(rep.KeyErrors) < maxProblems {
				rep.KeyErrors = append(rep.KeyErrors, checkProblem{Informer: inf,
					Message: strings.TrimPrefix(err.Error(), fmt.Sprintf("informer %q: ", inf))})
			}
		case err != nil:
			problem("%s", strings.TrimPrefix(err.Error(), fmt.Sprintf("informer %q: ", inf)))
		case o.failed:
			problem("object %q: payload does not decode: %s", key, o.reason)
		case o.obj == nil:
			ci.Envelopes++
		default:
			ci.Decoded++
			if m, err := meta.Accessor(o.obj); err == nil && (string(m.GetUID()) != r.UID || m.GetResourceVersion() != r.ResourceVersion) {
				problem("object %q: payload has uid %q resourceVersion %q, envelope uid %q resourceVersion %q",
					key, m.GetUID(), m.GetResourceVersion(), r.UID, r.ResourceVersion)
			}
		}
		if len(rep.Problems) >= maxProblems {
			return errors.New("stop")
		}
		return nil
	})
	return ci
}

func (a *app) printCheck(cmd *cobra.Command, rep *checkReport, p *printFlags) error {
	keyErrors := 0
	for _, ci := range rep.Informers {
		keyErrors += ci.KeyErrors
	}
	rep.OK = len(rep.Problems) == 0 && keyErrors == 0
	out := cmd.OutOrStdout()
	if p.table() {
		t := &table{headers: []string{"INFORMER", "OBJECTS", "INDEXES", "DECODED", "PROBLEMS", "NOTES"}}
		objects := 0
		for _, ci := range rep.Informers {
			objects += ci.Objects
			var notes []string
			if ci.Encrypted > 0 {
				notes = append(notes, fmt.Sprintf("%d encrypted, not decoded (no --key-file)", ci.Encrypted))
			}
			if ci.Envelopes > 0 {
				notes = append(notes, fmt.Sprintf("%d of an unknown type, not decoded", ci.Envelopes))
			}
			if ci.KeyErrors > 0 {
				notes = append(notes, fmt.Sprintf("%d do not decrypt with --key-file", ci.KeyErrors))
			}
			if len(notes) == 0 {
				notes = []string{"-"}
			}
			t.add(ci.Name, strconv.Itoa(ci.Objects), strconv.Itoa(ci.Indexes), strconv.Itoa(ci.Decoded), strconv.Itoa(ci.Problems), strings.Join(notes, "; "))
		}
		if len(rep.Informers) > 0 {
			if err := t.print(out, p.noHeaders); err != nil {
				return err
			}
		}
		for _, pr := range rep.Problems {
			if pr.Informer != "" {
				fmt.Fprintf(out, "problem: informer %q: %s\n", pr.Informer, pr.Message)
			} else {
				fmt.Fprintf(out, "problem: %s\n", pr.Message)
			}
		}
		for _, ke := range rep.KeyErrors {
			fmt.Fprintf(out, "key error: informer %q: %s\n", ke.Informer, ke.Message)
		}
		if rep.OK {
			fmt.Fprintf(out, "ok: %d informer(s), %d object(s), no problems\n", len(rep.Informers), objects)
		}
	} else if err := writeValue(out, p.output, rep); err != nil {
		return err
	}
	switch {
	case len(rep.Problems) > 0:
		msg := fmt.Sprintf("check found %d problem(s) in %s", len(rep.Problems), rep.File)
		if keyErrors > 0 {
			msg += fmt.Sprintf(", and %d object(s) that do not decrypt with --key-file", keyErrors)
		}
		return &exitError{code: exitCorrupt, msg: msg}
	case keyErrors > 0:
		// A wrong key is the caller's error, not damage: status 1, as
		// for every other command (README.md, exit status).
		return &exitError{code: exitFailure, msg: fmt.Sprintf(
			"check: %d object(s) in %s do not decrypt with --key-file (a wrong or missing key); no problems found in the file",
			keyErrors, rep.File)}
	}
	return nil
}

// countObjects is the number of object records of every informer (bbolt's
// key counts, without reading the records).
func countObjects(tx *store.Tx) int64 {
	var n int64
	for _, inf := range tx.Informers() {
		if b := informerBucket(tx, inf); b != nil {
			if objs := b.Bucket(bucketObjects); objs != nil {
				n += int64(objs.Stats().KeyN)
			}
		}
	}
	return n
}
