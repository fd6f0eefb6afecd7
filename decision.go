package boltinformer

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
	ReasonResumable = "resumable"
	// ReasonResealed: a warm start that first rewrote records sealed with
	// another key id than the Keyring's current one (or not sealed).
	ReasonResealed = "resealed"
	// ReasonNoState: a cold start; the file has no state for the informer.
	ReasonNoState = "no-state"
	// ReasonNotSynced: a cold start; the saved state never completed a
	// list.
	ReasonNotSynced = "not-synced"
	// ReasonCluster: a cold start; the file was saved for another cluster
	// (InformerOptions.ClusterID).
	ReasonCluster = "cluster-identity"
	// ReasonResource: a cold start; the file was saved for another
	// resource (InformerOptions.Resource).
	ReasonResource = "resource"
	// ReasonListOptions: a cold start; the file was saved with another
	// namespace or selectors (InformerOptions.ListOptions).
	ReasonListOptions = "list-options"
	// ReasonTransform: a cold start; the file was saved with another
	// transform (InformerOptions.TransformID).
	ReasonTransform = "transform"
	// ReasonCorrupt: a cold start; a record of the informer was damaged
	// (a copy of the file is kept, see Decision.Detail).
	ReasonCorrupt = "corrupt-file"
)
