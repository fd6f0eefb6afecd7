package boltinformer

import (
	"fmt"
	"strings"
	"sync"

	"github.com/boltinformer/boltinformer/indexer"
)

// What the informer does when the cache cannot apply an object as
// received (docs/ARCHITECTURE.md, "Where the code differs"):
//
//   - An index function fails on it: the indexer stores it without values
//     in that index (indexer.ErrIndexFunc) and its notification is
//     delivered, as for any object stored: the handlers, the listers and
//     the file agree.
//   - The indexer refuses it (indexer.Refused): it is not stored, so it is
//     not delivered either; the old object, if any, stays.
//
// Either way the informer reports it: an *ApplyError per popped batch (or
// list) to the watch error handler (or the log, without one), the
// counters boltinformer_index_errors_total and
// boltinformer_refused_objects_total, and Health (IndexErrorObjects,
// ApplyError); DB.Healthy fails while the cache holds objects without
// some index values. (The indexer refuses no object the informer gives
// it today: an object it cannot persist is kept in memory and reported
// as not persisted. A refusal is handled all the same.)

// maxApplyErrors bounds the errors an ApplyError carries.
const maxApplyErrors = 10

// ApplyError is what an informer reports when it could not apply objects
// of one watch batch or list as received. It wraps ErrApply and the errors
// it carries (ErrIndexFunc for index function failures).
type ApplyError struct {
	// Informer is the informer's name.
	Informer string
	// IndexFailures counts the objects stored without the values of some
	// index because an index function failed on them (each was
	// delivered to the handlers).
	IndexFailures int
	// Refusals counts the objects the cache refused: not stored, not
	// delivered.
	Refusals int
	// Errors are the first of those errors (at most 10 of each kind): an
	// *IndexFuncError for each index function failure, or the indexer's
	// refusal.
	Errors []error
}

// IndexFuncError is one index function's failure on one object, which was
// stored without values in that index (and delivered): what an
// ApplyError carries for each. It wraps ErrIndexFunc and the function's
// error.
type IndexFuncError struct {
	// Key is the object's key, Index the index's name.
	Key, Index string
	// Err is the index function's error.
	Err error
}

// Error says what failed, in client-go's words (its indexer panics with
// them), and what was done.
func (e *IndexFuncError) Error() string {
	return (&indexer.IndexFuncError{Key: e.Key, Index: e.Index, Err: e.Err}).Error()
}

// Unwrap returns ErrIndexFunc and the index function's error.
func (e *IndexFuncError) Unwrap() []error { return []error{ErrIndexFunc, e.Err} }

// Error summarizes the failures and gives the first error.
func (e *ApplyError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "boltinformer: informer %q: objects not applied as received:", e.Informer)
	if e.IndexFailures > 0 {
		fmt.Fprintf(&b, " %d stored without values for some indexes (an index function failed; delivered)", e.IndexFailures)
	}
	if e.Refusals > 0 {
		if e.IndexFailures > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, " %d refused (not stored, not delivered)", e.Refusals)
	}
	if len(e.Errors) > 0 {
		fmt.Fprintf(&b, "; first: %v", e.Errors[0])
	}
	return b.String()
}

// Unwrap returns ErrApply and the errors carried.
func (e *ApplyError) Unwrap() []error { return append([]error{ErrApply}, e.Errors...) }

// applyErrors collects what one popped batch (or list) could not apply as
// received. It belongs to the informer loop call that made it.
type applyErrors struct {
	indexed map[string]struct{} // keys stored without some index values
	refused int
	errs    []error
	nIdx    int // IndexFuncErrors kept in errs
	nRef    int // refusals kept in errs
}

// add collects the index function errors and the refusal err holds.
func (a *applyErrors) add(err error) {
	if err == nil {
		return
	}
	for _, ie := range indexer.IndexFuncErrors(err) {
		if a.indexed == nil {
			a.indexed = map[string]struct{}{}
		}
		a.indexed[ie.Key] = struct{}{}
		if a.nIdx < maxApplyErrors {
			a.errs = append(a.errs, &IndexFuncError{Key: ie.Key, Index: ie.Index, Err: ie.Err})
			a.nIdx++
		}
	}
}

// addRefused counts one object refused, with err.
func (a *applyErrors) addRefused(err error) {
	a.refused++
	if a.nRef < maxApplyErrors {
		a.errs = append(a.errs, err)
		a.nRef++
	}
}

func (a *applyErrors) empty() bool { return len(a.indexed) == 0 && a.refused == 0 }

// applyState is the last ApplyError, for Health.
type applyState struct {
	// mu guards last.
	mu   sync.Mutex
	last error
}

// lastApplyError returns the last ApplyError reported, or nil.
func (s *Informer) lastApplyError() error {
	s.apply.mu.Lock()
	defer s.apply.mu.Unlock()
	return s.apply.last
}

// reportApply reports what a could not apply: counters, Health, and the
// watch error handler (the log without one). The loop calls it after
// releasing blockDeltas, so a handler may call back into the informer;
// like client-go's watch error handler it runs on the loop's goroutine.
func (s *Informer) reportApply(a *applyErrors) {
	if a.empty() {
		return
	}
	err := &ApplyError{Informer: s.name, IndexFailures: len(a.indexed), Refusals: a.refused, Errors: a.errs}
	s.counters.indexErrors.Add(int64(err.IndexFailures))
	s.counters.refused.Add(int64(err.Refusals))
	s.apply.mu.Lock()
	s.apply.last = err
	s.apply.mu.Unlock()
	if s.watchErrorHandler == nil {
		s.logger.Error(err, "Objects not applied as received")
		return
	}
	s.watchErrorHandler(s.runCtx, s.controller.currentReflector(), err)
}
