package indexer

// Durability notices: what a caller applied is on disk once the batch that
// took it is committed. The informer feeds its observers (the local API)
// only what is on disk, so that no client sees a state a crash takes
// back.

// SetDurable sets the indexer's durability notices: mark is called when a
// batch of mutations is taken for a commit, holding the indexer's lock, and
// what it returns is passed to durable once that batch is committed (on
// the committer's goroutine, holding no lock of the indexer): every
// mutation applied before mark was called is then on disk. Either may be
// nil (no notices).
func (x *Indexer) SetDurable(mark func() uint64, durable func(uint64)) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.mark, x.durable = mark, durable
}

// AllDurable reports whether every mutation applied is on disk: nothing is
// pending, in flight, held back or waiting for a cold start's first list.
func (x *Indexer) AllDurable() bool {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.pending) == 0 && x.inflight == nil && !x.stateDirty && !x.reset && len(x.drop) == 0 &&
		len(x.unpersisted) == 0 && !x.held
}
