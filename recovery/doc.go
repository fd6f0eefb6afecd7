// Package recovery owns the warm-start decision and what happens to a
// damaged file.
//
// OpenStore opens the cache file and, when it is corrupt (bbolt rejects it,
// a page panics, the integrity check fails) and the policy says so,
// quarantines it: renames it to <name>.corrupt-<timestamp>, keeps it, and
// starts a new file. KeepCopy keeps a copy of a file with a damaged
// record (which the relist will rewrite) once per damage, within a bound
// on the disk it takes. Decide compares an informer's saved state record with
// what the informer is now (cluster identity, resource, list options,
// transform) and says warm or cold, with the reason.
//
// It never deletes user data: a quarantined file is renamed, never removed,
// and a cold start leaves the old objects on disk until the new list has
// committed (the indexer's Fresh mode).
package recovery
