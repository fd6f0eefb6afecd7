package boltinformer

import "github.com/boltinformer/boltinformer/recovery"

// Decision is the warm-or-cold decision an informer took when it was
// built (Informer.Decision).
type Decision struct {
	// Warm is true when the informer resumed from its saved state: its
	// listers served the file's objects at once, and its watch resumed
	// from the saved resourceVersion.
	Warm bool
	// Reason says why, in a few words: one of the Reason constants (also
	// the label of the boltinformer_starts_total metric).
	Reason string
	// Detail says what differed, for logs.
	Detail string
}

// The reasons of a Decision.
const (
	// ReasonResumable: a warm start; the file's state matches.
	ReasonResumable = recovery.ReasonResumable
	// ReasonResealed: a warm start that first rewrote records sealed with
	// another key id than the Keyring's current one (or not sealed).
	ReasonResealed = recovery.ReasonResealed
	// ReasonNoState: a cold start; the file has no state for the informer.
	ReasonNoState = recovery.ReasonNoState
	// ReasonNotSynced: a cold start; the saved state never completed a
	// list.
	ReasonNotSynced = recovery.ReasonNotSynced
	// ReasonCluster: a cold start; the file was saved for another cluster
	// (InformerOptions.ClusterID).
	ReasonCluster = recovery.ReasonCluster
	// ReasonResource: a cold start; the file was saved for another
	// resource (InformerOptions.Resource).
	ReasonResource = recovery.ReasonResource
	// ReasonListOptions: a cold start; the file was saved with another
	// namespace or selectors (InformerOptions.ListOptions).
	ReasonListOptions = recovery.ReasonListOptions
	// ReasonTransform: a cold start; the file was saved with another
	// transform (InformerOptions.TransformID).
	ReasonTransform = recovery.ReasonTransform
	// ReasonCorrupt: a cold start; a record of the informer was damaged
	// (a copy of the file is kept, see Decision.Detail).
	ReasonCorrupt = recovery.ReasonCorrupt
)
