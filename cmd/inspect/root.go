package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/boltinformer/boltinformer/store"
)

// Exit codes (README.md).
const (
	exitOK      = 0
	exitFailure = 1 // usage, missing file or object, undecodable payload, ...
	exitCorrupt = 2 // the file is damaged, or check found problems
	exitLocked  = 3 // another process holds the file past --timeout
)

// defaultTimeout is how long commands wait for the file lock.
const defaultTimeout = time.Second

// app is what the commands share: the global flags and the test hooks.
type app struct {
	timeout time.Duration
	keyFile string
	// now is the clock of AGE columns (test hook).
	now func() time.Time
	// pause, when set, is called at points of the long commands ("export"
	// after the first object, "compact" before the copy starts), with
	// their partial output in place (test hook: the interrupt tests).
	pause func(point string)

	// tempsMu guards temps, the temporary files of running commands that
	// an interrupt removes (mainWithSignals). Nothing is locked with it.
	tempsMu sync.Mutex
	temps   map[string]bool
}

// newRootCommand returns the inspect command with every verb.
func (a *app) newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "inspect",
		Short: "Inspect a boltinformer cache file offline",
		Long: `inspect looks into a boltinformer cache file without a cluster and without
changing it: it opens the file read-only, with a shared lock that it gives up
after --timeout if a running agent holds the file. Only drop changes the
file (and compact writes a new one).`,
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.PersistentFlags().DurationVar(&a.timeout, "timeout", defaultTimeout,
		"how long to wait for the file lock held by a running agent (0: do not wait)")
	root.PersistentFlags().StringVar(&a.keyFile, "key-file", "",
		"decryption keys for encrypted payloads: a Kubernetes EncryptionConfiguration (aesgcm providers with named keys), as the agent reads")
	addOutputFlags(root)
	_ = root.RegisterFlagCompletionFunc(flagOutput, completeOutput)
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error { return checkOutputFlags(cmd) }
	root.AddCommand(
		a.newLsCommand(),
		a.newGetCommand(),
		a.newIndexCommand(),
		a.newCheckCommand(),
		a.newExportCommand(),
		a.newStatsCommand(),
		a.newCompactCommand(),
		a.newDropCommand(),
		a.newServeCommand(),
		a.newDiffCommand(),
	)
	return root
}

// execute runs the command line args and returns the exit code, printing
// errors to stderr.
func (a *app) execute(args []string, stdout, stderr io.Writer) int {
	root := a.newRootCommand()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) && ee.msg == "" && ee.err == nil {
		return ee.code // a status without a message (diff's "differ")
	}
	fmt.Fprintf(stderr, "inspect: %v\n", err)
	if errors.As(err, &ee) {
		return ee.code
	}
	if errors.Is(err, store.ErrCorrupt) {
		return exitCorrupt
	}
	return exitFailure
}

// exitError is an error with its own message and exit code; it unwraps to
// its cause.
type exitError struct {
	code int
	msg  string
	err  error
}

func (e *exitError) Error() string { return e.msg }
func (e *exitError) Unwrap() error { return e.err }

// open opens path read-only, turning the store's typed errors into
// messages for an operator.
func (a *app) open(path string) (*store.DB, error) {
	timeout := a.timeout
	if timeout <= 0 {
		timeout = -1 // try once
	}
	db, err := store.Open(path, &store.Options{ReadOnly: true, Timeout: timeout})
	if err != nil {
		return nil, openError(path, a.timeout, err)
	}
	return db, nil
}

func openError(path string, timeout time.Duration, err error) error {
	var verr *store.VersionError
	switch {
	case errors.Is(err, store.ErrLocked):
		return &exitError{code: exitLocked, err: err, msg: fmt.Sprintf(
			"%s is locked by another process (a running agent?): no shared lock within %s; "+
				"stop the agent or retry with a longer --timeout", path, timeout)}
	case errors.Is(err, fs.ErrNotExist):
		return &exitError{code: exitFailure, err: err, msg: fmt.Sprintf("%s: no such file", path)}
	case errors.As(err, &verr) && verr.Found < verr.Supported:
		return &exitError{code: exitFailure, err: err, msg: fmt.Sprintf(
			"%s: format version %d, older than the version %d this inspect reads; "+
				"the agent migrates it when it next opens the file (inspect does not)", path, verr.Found, verr.Supported)}
	case errors.As(err, &verr):
		return &exitError{code: exitFailure, err: err, msg: fmt.Sprintf(
			"%s: format version %d, this inspect reads version %d", path, verr.Found, verr.Supported)}
	case errors.Is(err, store.ErrForeign):
		return &exitError{code: exitFailure, err: err, msg: fmt.Sprintf(
			"%s is not a boltinformer cache file: %v", path, err)}
	case errors.Is(err, store.ErrCorrupt):
		return &exitError{code: exitCorrupt, err: err, msg: fmt.Sprintf(
			"%s is damaged and cannot be read: %v", path, err)}
	}
	return err
}

// view opens path and runs fn in one read transaction.
func (a *app) view(path string, fn func(db *store.DB, tx *store.Tx) error) error {
	db, err := a.open(path)
	if err != nil {
		return err
	}
	defer db.Close()
	return db.View(func(tx *store.Tx) error { return fn(db, tx) })
}
