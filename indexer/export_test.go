package indexer

import (
	"context"
	"sync"
)

// HoldFill makes the background fill of indexers opened from now on wait
// until release is called (or the indexer closes). It returns release,
// which also restores the default; calling it again does nothing.
func HoldFill() (release func()) {
	held := make(chan struct{})
	beforeFill = func(ctx context.Context) {
		select {
		case <-held:
		case <-ctx.Done():
		}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			beforeFill = nil
			close(held)
		})
	}
}
