package boltinformer

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/boltinformer/boltinformer/fresh"
)

// Health is one informer's health, for a /healthz handler.
type Health struct {
	Informer string `json:"informer"`
	// Synced is HasSynced.
	Synced bool `json:"synced"`
	// Start is "warm" or "cold", with StartReason.
	Start       string `json:"start"`
	StartReason string `json:"startReason"`
	// Objects in the cache.
	Objects int `json:"objects"`
	// Undecodable are objects of the file found not to decode after the
	// load: left out of the cache until the relist it triggers replaces
	// them (normally 0).
	Undecodable int `json:"undecodable,omitempty"`
	// DamageCopy is the copy of the cache file that holds the damaged or
	// undecodable records this start found (kept by it, or by an earlier
	// start over the same damage), "" when there is none.
	DamageCopy string `json:"damageCopy,omitempty"`
	// NotPersisted are objects in the cache that cannot be written to the
	// file (a transform returned a type the informer's scheme does not
	// know, or an encoding failed), with why for one of them: while there
	// are any, the informer commits nothing, so SavedResourceVersion stays
	// where the file holds every object (normally 0).
	NotPersisted      int    `json:"notPersisted,omitempty"`
	NotPersistedError string `json:"notPersistedError,omitempty"`
	// SavedResourceVersion is what a restart would resume from, committed
	// at LastCommit.
	SavedResourceVersion string    `json:"savedResourceVersion"`
	LastCommit           time.Time `json:"lastCommit,omitzero"`
	// AppliedResourceVersion is what the cache holds (ahead of disk by at
	// most one group commit).
	AppliedResourceVersion string `json:"appliedResourceVersion"`
	// LastWatchEvent is when the last watch event arrived.
	LastWatchEvent time.Time `json:"lastWatchEvent,omitzero"`
	// Resumed is true once the server accepted a warm start's resume (a
	// watch event, or a relist after a 410); false for a cold start, which
	// resumes nothing (Live says when its watch was accepted).
	Resumed bool `json:"resumed"`
	// Loaded, Fresh and Live are the moments of a start: the cache serves
	// (from the file, or the first list); it equals the server's state at
	// FreshResourceVersion; the server has accepted a watch (see
	// Informer.FreshChecker).
	Loaded bool `json:"loaded"`
	Fresh  bool `json:"fresh"`
	Live   bool `json:"live"`
	// LoadedAfter, FreshAfter and LiveAfter are the times from Run to
	// each moment reached (0 until then).
	LoadedAfter time.Duration `json:"loadedAfter,omitempty"`
	FreshAfter  time.Duration `json:"freshAfter,omitempty"`
	LiveAfter   time.Duration `json:"liveAfter,omitempty"`
	// FreshResourceVersion is the server's resourceVersion the cache was
	// found equal to ("" until fresh, or when freshness came from the
	// first watch event: see FreshFallback).
	FreshResourceVersion string `json:"freshResourceVersion,omitempty"`
	// CatchupPending counts the objects a warm start's resumed watch must
	// still bring (changed, created or deleted while the informer was
	// down) before the cache is fresh.
	CatchupPending int `json:"catchupPending,omitempty"`
	// FreshTarget is the server's resourceVersion R that a warm start not
	// yet fresh waits for its resumed watch to reach (read with one
	// object's metadata; "" when not known or fresh).
	FreshTarget string `json:"freshTarget,omitempty"`
	// CommitsHeld is true while a warm start with ReplayDownDeletes holds
	// its commits until it is fresh: the file stays at
	// SavedResourceVersion, so that a process killed before fresh replays
	// the same deletes at its next start (normally brief).
	CommitsHeld bool `json:"commitsHeld,omitempty"`
	// Stale is true when SyncAfterFresh's FreshTimeout made the informer
	// synced without being fresh (the server unreachable).
	Stale bool `json:"stale,omitempty"`
	// FreshFallback says why freshness is the first watch event rather
	// than a metadata list's diff, if it is.
	FreshFallback string `json:"freshFallback,omitempty"`
	// IndexErrorObjects counts the objects in the cache stored without
	// the values of some index because an index function failed on them
	// (known since the informer was built: a restart counts from zero).
	// Listers querying those indexes miss them; DB.Healthy reports them.
	IndexErrorObjects int `json:"indexErrorObjects,omitempty"`
	// ApplyError is the last *ApplyError the informer reported ("" if
	// none), even if its objects have been written since.
	ApplyError string `json:"applyError,omitempty"`
	// CommitError is the last commit's error ("" if it succeeded).
	CommitError string `json:"commitError,omitempty"`
	// WatchError is the last list/watch error seen ("" if none).
	WatchError string `json:"watchError,omitempty"`
}

// Health returns the informer's health.
func (s *Informer) Health() Health {
	h := Health{Informer: s.name, Synced: s.HasSynced(), Start: "cold", StartReason: s.decision.Reason, Objects: s.indexer.Len(),
		Undecodable: s.indexer.Undecodable()}
	if s.decision.Warm {
		h.Start = "warm"
	}
	if p := s.damageCopy.Load(); p != nil {
		h.DamageCopy = *p
	}
	if n, err := s.indexer.Unpersisted(); n > 0 {
		h.NotPersisted, h.NotPersistedError = n, err.Error()
	}
	st := s.indexer.SavedState()
	h.SavedResourceVersion, h.LastCommit = st.ResourceVersion, st.LastCommit
	h.AppliedResourceVersion = s.indexer.ResourceVersion()
	ws := s.WatchStats()
	h.LastWatchEvent, h.Resumed = ws.LastEvent, ws.Resumed
	if ws.LastError != nil {
		h.WatchError = ws.LastError.Error()
	}
	if err := s.indexer.CommitError(); err != nil {
		h.CommitError = err.Error()
	}
	h.IndexErrorObjects = s.indexer.IndexErrors()
	if err := s.lastApplyError(); err != nil {
		h.ApplyError = err.Error()
	}
	fst := s.fr.Status()
	h.Loaded, h.Fresh, h.Live = s.loaded.reached(), fst.Fresh, s.live.reached()
	if run := s.runStarted.Load(); run != 0 {
		for _, m := range []struct {
			at    int64
			after *time.Duration
		}{{s.loaded.at.Load(), &h.LoadedAfter}, {atNano(fst), &h.FreshAfter}, {s.live.at.Load(), &h.LiveAfter}} {
			if m.at != 0 {
				*m.after = time.Duration(m.at - run)
			}
		}
	}
	if h.Fresh {
		h.FreshResourceVersion = fst.ResourceVersion
	} else {
		h.CatchupPending = fst.Pending
		h.FreshTarget = fst.Target
	}
	h.Stale = s.stale.Load() && !h.Fresh
	h.CommitsHeld = s.indexer.Held()
	h.FreshFallback = fst.Fallback
	return h
}

// atNano is when the informer was fresh, in UnixNano (0: not yet).
func atNano(st fresh.Status) int64 {
	if !st.Fresh {
		return 0
	}
	return st.At.UnixNano()
}

// ErrUnhealthy is wrapped by DB.Healthy's errors.
var ErrUnhealthy = errors.New("boltinformer: unhealthy")

// Health returns every informer's health, by name.
func (db *DB) Health() []Health {
	infs := db.snapshotInformers()
	out := make([]Health, len(infs))
	for i, inf := range infs {
		out[i] = inf.Health()
	}
	return out
}

// Healthy returns nil when every informer has synced, holds every object
// it received with all its index values (see Health.IndexErrorObjects),
// holds no object it cannot persist (Health.NotPersisted) and the last
// group commit succeeded, else an error
// wrapping ErrUnhealthy that says why. A lost uplink alone is not
// unhealthy: the cache still serves.
func (db *DB) Healthy() error {
	var errs []error
	if err := db.committer.LastError(); err != nil {
		errs = append(errs, fmt.Errorf("%w: last commit failed: %w", ErrUnhealthy, err))
	}
	for _, h := range db.Health() {
		if !h.Synced {
			errs = append(errs, fmt.Errorf("%w: informer %q has not synced", ErrUnhealthy, h.Informer))
		}
		if h.IndexErrorObjects > 0 {
			why := ""
			if h.ApplyError != "" {
				// After a restart the warm load's check finds them again,
				// with no watch batch's error to quote.
				why = ": " + h.ApplyError
			}
			errs = append(errs, fmt.Errorf("%w: informer %q: %d objects stored without some index values (index functions failed)%s",
				ErrUnhealthy, h.Informer, h.IndexErrorObjects, why))
		}
		if h.NotPersisted > 0 {
			errs = append(errs, fmt.Errorf("%w: informer %q holds %d object(s) it cannot persist, and commits nothing until they are gone: %s",
				ErrUnhealthy, h.Informer, h.NotPersisted, h.NotPersistedError))
		}
	}
	return errors.Join(errs...)
}

// HealthHandler serves Healthy as an HTTP health check: 200 or 503, with
// every informer's Health as JSON.
func (db *DB) HealthHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		body := struct {
			Healthy   bool     `json:"healthy"`
			Error     string   `json:"error,omitempty"`
			Informers []Health `json:"informers"`
		}{Healthy: true, Informers: db.Health()}
		if err := db.Healthy(); err != nil {
			body.Healthy, body.Error = false, err.Error()
		}
		w.Header().Set("Content-Type", "application/json")
		if !body.Healthy {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(body)
	})
}
