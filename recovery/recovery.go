package recovery

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/boltinformer/boltinformer/internal/safefile"
	"github.com/boltinformer/boltinformer/store"
)

// Policy says what to do with a corrupt file.
type Policy int

const (
	// Quarantine renames a corrupt file aside, keeps it, and starts a new
	// one (the default: an edge agent must come up).
	Quarantine Policy = iota
	// Fail returns the error and leaves the file alone.
	Fail
)

// Options configure OpenStore. A nil *Options means the defaults.
type Options struct {
	// Policy for corrupt files. Default Quarantine.
	Policy Policy
	// Verify runs the full integrity check (store.DB.Check) on open, so
	// damage inside pages is found before use. It reads the whole file.
	Verify bool
	// Store are the options passed to store.Open.
	Store *store.Options
	// Clock names quarantined files. Default: the real clock.
	Clock clock.PassiveClock
	// Logger reports the decision. Default: klog.Background().
	Logger *klog.Logger
}

// Report says what OpenStore did.
type Report struct {
	// Quarantined is the path the corrupt file was renamed to, or "".
	Quarantined string
	// Cause is why it was quarantined, or nil.
	Cause error
}

// OpenStore opens the cache file at path, quarantining it when it is
// corrupt and the policy allows. A locked file, a foreign file and an
// unsupported format version are never quarantined: they are returned as
// errors (the file may be fine, just not ours to touch).
func OpenStore(path string, opts *Options) (*store.DB, Report, error) {
	o := Options{}
	if opts != nil {
		o = *opts
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	logger := klog.Background()
	if o.Logger != nil {
		logger = *o.Logger
	}
	db, err := store.Open(path, o.Store)
	if err == nil && o.Verify {
		var probs []store.Problem
		probs, err = db.Check(&store.CheckOptions{MaxProblems: 10})
		if err == nil && len(probs) > 0 {
			errs := make([]error, len(probs))
			for i := range probs {
				errs[i] = probs[i]
			}
			err = errors.Join(errs...)
		}
		if err != nil {
			_ = db.Close()
			db = nil
			if !errors.Is(err, store.ErrCorrupt) {
				err = errors.Join(store.ErrCorrupt, err)
			}
		}
	}
	if err == nil {
		return db, Report{}, nil
	}
	if !errors.Is(err, store.ErrCorrupt) || o.Policy == Fail {
		return nil, Report{}, err
	}
	aside, qerr := QuarantineFile(path, o.Clock)
	if qerr != nil {
		return nil, Report{}, errors.Join(err, qerr)
	}
	logger.Error(err, "Cache file is corrupt: quarantined it and starting cold", "path", path, "quarantined", aside)
	db, err2 := store.Open(path, o.Store)
	if err2 != nil {
		return nil, Report{Quarantined: aside, Cause: err}, fmt.Errorf("recovery: open new file after quarantine: %w", err2)
	}
	return db, Report{Quarantined: aside, Cause: fmt.Errorf("%w: %w", ErrQuarantined, err)}, nil
}

// QuarantineFile renames path (and nothing else) to path.corrupt-<UTC time>,
// never overwriting an existing file or following a link at the new name,
// fsyncs the directory so that the rename survives power loss, and
// returns the new name.
func QuarantineFile(path string, c clock.PassiveClock) (string, error) {
	base := path + ".corrupt-" + c.Now().UTC().Format(stampLayout)
	for i := 0; i <= maxNameTries; i++ {
		aside := base
		if i > 0 {
			aside = fmt.Sprintf("%s.%d", base, i)
		}
		err := safefile.RenameNoReplace(path, aside)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("recovery: quarantine %s: %w", path, err)
		}
		if err := safefile.SyncDir(filepath.Dir(path)); err != nil {
			return aside, fmt.Errorf("recovery: quarantined %s as %s: %w", path, aside, err)
		}
		return aside, nil
	}
	return "", fmt.Errorf("recovery: no free quarantine name for %s", path)
}

const (
	stampLayout  = "20060102T150405Z"
	maxNameTries = 100
)

// Decision is the warm-start decision for one informer.
type Decision struct {
	// Warm is true when the informer may resume from its saved state.
	Warm bool
	// Reason says why, in a few words (for logs and metrics labels).
	Reason string
	// Detail says what differed, for logs.
	Detail string
}

// Reasons, used as metric label values.
const (
	ReasonResumable   = "resumable"
	ReasonNoState     = "no-state"
	ReasonNotSynced   = "not-synced"
	ReasonCluster     = "cluster-identity"
	ReasonResource    = "resource"
	ReasonListOptions = "list-options"
	ReasonTransform   = "transform"
	ReasonCorrupt     = "corrupt-file"
	// ReasonResealed is a warm start that first rewrote records of the
	// file whose encryption key id was not the keyring's current one
	// (plaintext records of an informer now given a keyring, a rotated-out
	// key, or sealed records with a decrypt-only keyring).
	ReasonResealed = "resealed"
)

// Decide compares an informer's saved state (nil when the file has none)
// with what the informer is now. The index set is not part of it: indexes
// that differ are rebuilt from the objects, which stay valid.
func Decide(saved *store.State, now store.State) Decision {
	switch {
	case saved == nil:
		return Decision{Reason: ReasonNoState, Detail: "no saved state"}
	case !saved.Synced || saved.ResourceVersion == "":
		return Decision{Reason: ReasonNotSynced, Detail: "the saved state never completed a list"}
	case now.ClusterID != "" && saved.ClusterID != "" && saved.ClusterID != now.ClusterID:
		return Decision{Reason: ReasonCluster, Detail: fmt.Sprintf("saved cluster %q, now %q", saved.ClusterID, now.ClusterID)}
	case now.ClusterID != "" && saved.ClusterID == "":
		// Filled while the identity was unknown (a start whose lookup got
		// no answer, or an informer given none): from any cluster, as far
		// as the file can tell. Resumed only while the identity is unknown
		// (an offline start trusts its file).
		return Decision{Reason: ReasonCluster, Detail: fmt.Sprintf("saved without a cluster identity, now %q", now.ClusterID)}
	case saved.Resource != now.Resource:
		return Decision{Reason: ReasonResource, Detail: fmt.Sprintf("saved resource %q, now %q", saved.Resource, now.Resource)}
	case saved.ListOptions != now.ListOptions:
		return Decision{Reason: ReasonListOptions, Detail: fmt.Sprintf("saved list options %q, now %q", saved.ListOptions, now.ListOptions)}
	case saved.Transform != now.Transform:
		return Decision{Reason: ReasonTransform, Detail: fmt.Sprintf("saved transform %q, now %q", saved.Transform, now.Transform)}
	}
	return Decision{Warm: true, Reason: ReasonResumable, Detail: "resuming from resourceVersion " + saved.ResourceVersion}
}

// SinceLastCommit is how long ago the saved state was written.
func SinceLastCommit(saved *store.State, c clock.PassiveClock) time.Duration {
	if saved == nil || saved.LastCommit.IsZero() {
		return 0
	}
	return c.Since(saved.LastCommit)
}
