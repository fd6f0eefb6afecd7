package boltinformer

import "github.com/boltinformer/boltinformer/store"

// ReviewCommitRound makes one group commit of db's checkpoints and inf's
// indexer as store.Committer.Flush makes it (the sources' Pending in the
// order they were added, the DB's checkpoints first; one transaction;
// Committed), calling between after the checkpoints' Pending: what another
// goroutine may do while a round runs.
func ReviewCommitRound(db *DB, inf *Informer, between func()) error {
	cb, err := db.checkpoints.Pending()
	if err != nil {
		return err
	}
	between()
	ib, err := inf.indexer.Pending()
	if err != nil {
		return err
	}
	var batches []*store.Batch
	for _, b := range []*store.Batch{cb, ib} {
		if b != nil {
			batches = append(batches, b)
		}
	}
	err = db.store.Commit(batches...)
	if cb != nil {
		db.checkpoints.Committed(cb, err)
	}
	if ib != nil {
		inf.indexer.Committed(ib, err)
	}
	return err
}
