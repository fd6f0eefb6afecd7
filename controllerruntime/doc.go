// Package boltcr gives a controller-runtime manager a persistent cache in
// one option: controller-runtime's own cache, whose informers keep their
// objects in a boltinformer file, so that a restarted operator resumes its
// watches instead of listing everything again.
//
//	db, err := boltinformer.Open("/var/lib/operator/cache.db", nil)
//	...
//	defer db.Close() // after mgr.Start has returned
//	mgr, err := ctrl.NewManager(cfg, ctrl.Options{NewCache: boltcr.NewCache(db, nil)})
//
// Import it as boltcr: its path ends in controllerruntime, which is
// controller-runtime's own package name.
//
// Typed, unstructured and metadata-only (PartialObjectMetadata) informers
// all go to the one file, each under a name made of its kind, resource,
// namespace and selectors (see Informer.Name), and saved under the
// cluster's identity, the selectors and the transform: a file is never
// resumed by an informer of another scope. Every cache scope of
// controller-runtime works: all namespaces, one (DefaultNamespaces with one
// entry), several (one informer per namespace, plus the cluster-scoped
// one), ByObject's namespaces and selectors, label and field selectors,
// DefaultTransform and per-object transforms. UnsafeDisableDeepCopy and
// EnableWatchBookmarks change nothing that is stored.
//
// # How the scope is known
//
// controller-runtime's NewInformer hook is not told the informer's
// namespace or selectors. NewCache wraps the cache's HTTP client; each new
// informer's ListerWatcher is asked to List once with a probe in its
// context, which the wrapper records (path and query) and answers without
// sending anything. The informer's name and identity come from that exact
// request. An informer whose scope or transform cannot be known for sure
// is not persisted: it is client-go's in-memory informer, with a logged
// reason (Informer.NotPersisted, Cache.Informers).
//
// # Transforms
//
// Objects are stored after the transform, so the transform is part of an
// informer's identity. Name a transform with Transform(id, fn) and change
// id when fn changes; an unnamed one is fingerprinted from its function's
// name and its output on fixed sample objects of the informer's type, run
// twice (a transform whose output differs is not fingerprintable, and its
// informer is not persisted). A change a fingerprint cannot see (a
// closure's captured setting that the samples do not exercise) needs a
// name.
//
// # WaitForCacheSync means fresh
//
// A warm-started informer is synced once it is fresh: its cache equals the
// server's state at a known resourceVersion (boltinformer.SyncAfterFresh),
// so after WaitForCacheSync a reconciler never reads an object deleted
// while it was down. It is fresh at the first bookmark of its resumed watch
// at or after the server's current resourceVersion, read with one object's
// metadata (Options.FreshBookmarkWait, default 5 s: kube-apiserver sends
// one about a second in, in a live cluster; it costs the apiserver almost
// nothing), else by a metadata-only list of its scope, which tells which
// objects changed, were created or were deleted while the operator was
// down, and the resumed watch has brought every one (about a cold start's
// apiserver CPU; also what a restored etcd backup is caught by, see
// boltinformer.InformerOptions.FreshBookmarkWait). When the server does not
// answer, the wait ends after FreshTimeout (default 30 s) and the cache
// serves what the file held (boltinformer.Health.Stale).
//
// Options.SyncAfterDiskLoad syncs at once instead, at the disk load, even
// with the server unreachable. What it gives up: until the informer is
// fresh, a reconciler may read the state of the last stop (an object
// deleted or changed while the operator was down), which the resumed
// watch then brings up to date. The deletes made while down still reach
// the reconcilers (below): the informer finds out when it is fresh as
// above, without making the sync wait for it. That costs the apiserver,
// besides the watch, one read of one object's metadata and, when no
// bookmark comes within FreshBookmarkWait, one metadata list of the
// informer's scope (an informer of at most
// boltinformer.DefaultFreshListMax objects, 10000, lists at once, beside
// the bookmark wait). With NoReplayDownDeletes too, a warm start makes no
// read beyond its watch.
//
// # Deletes while down reach the reconcilers
//
// controller-runtime registers a controller's handlers only after the
// caches have synced, and a late handler gets the current objects as Adds
// only: stock controller-runtime never tells a reconciler about an object
// deleted while the operator was down. Here a late handler first gets a
// Delete for each such object (boltinformer.InformerOptions
// ReplayDownDeletes), so its reconciler gets a request whose Get returns
// NotFound, as after a live delete: finalizer-free cleanup works across
// restarts. Options.NoReplayDownDeletes turns it off.
//
// It holds in every sync policy. With SyncAfterDiskLoad a controller's
// handlers may come before, among or after the deletes its resumed watch
// applies: each delete applied before the informer is fresh is kept and
// replayed to every handler added after it; one applied after a handler
// was added reaches that handler live. So every delete made while down
// reaches the reconciler, however late the controller starts (after
// leader election, say).
//
// A kill -9 before the cache is fresh does not lose them: until fresh a
// warm start commits nothing (boltinformer.Health.CommitsHeld), so the
// next start resumes from the same resourceVersion and replays them; once
// FreshTimeout has passed without fresh, the start commits and a kill then
// loses their replay.
//
// # What changed while down first
//
// At a warm start a controller's handlers get the deletes made while the
// operator was down, then the objects changed or created meanwhile (their
// resourceVersion is after the file's) as adds with isInInitialList
// false, then the unchanged ones as initial-list adds
// (boltinformer.InformerOptions.ChangedFirst). controller-runtime's
// priority queue, on by default, reconciles the first at normal priority
// and the unchanged at handler.LowPriority: what needs work is done
// before the rest, where stock controller-runtime gives every object as an
// initial-list add, all at low priority. Options.NoChangedFirst keeps
// client-go's order.
//
// # Reconcile only what needs work: NewQueue
//
// A controller built with controller.Options{NewQueue: NewQueue(db, nil)}
// keeps its queue's state in the cache file: at a warm start it
// reconciles only the objects changed, created or deleted while the
// operator was down, the requests that were pending or in flight when it
// stopped or was killed (and those whose last reconcile ended in a
// terminal error), and the RequeueAfter deadlines that fell due. The
// unchanged objects get no request. It is at least once: a kill -9 at any
// point makes the next start hand over again what came after the last
// checkpoint, never less (see Queue). Use it for level-based reconcilers
// whose state is in the cluster; keep the controller's name stable.
//
// # Informers over several namespaces start together
//
// With DefaultNamespaces over several namespaces, controller-runtime
// creates a kind's informers one namespace after another, each waiting
// until synced. The Cache creates them all first, then waits: warm
// informers become fresh in parallel (GetInformer, GetInformerForKind,
// List).
//
// # A relist after a 410
//
// An operator down longer than the apiserver's watch history, or an
// apiserver restart, gets 410 for the resumed watch. The relist lists
// metadata and reads only the objects that changed, each at the list's
// resourceVersion, when at most Options.PartialRelistRatio of them did
// (default 5%); else it lists every object. Each relist is one log line at
// the default level.
//
// # Lifetime
//
// The cache's Start returns once every informer has stopped and the file
// has committed what they applied; close the DB after mgr.Start returns.
// RemoveInformer waits for the removed informers to stop, so the same
// informer can be created again, resuming from the file.
//
// # Scopes no longer used
//
// An informer's data stays in the file when the program no longer builds
// it: a namespace taken out of DefaultNamespaces or ByObject, a changed
// selector (another name), a kind no longer watched. With
// Options.DropUnusedAfter, the cache's stop drops the informers of the
// file named "controller-runtime/..." that this run did not build and that
// committed nothing for that long (boltinformer.DB.DropUnused, one
// transaction). Offline, inspect drop removes them (the operator
// stopped).
package boltcr
