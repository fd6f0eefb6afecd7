package indexer

import "context"

// HoldFill makes the background fill of indexers opened from now on wait
// until release is called (or the indexer closes). It returns release,
// which also restores the default.
func HoldFill() (release func()) {
	held := make(chan struct{})
	beforeFill = func(ctx context.Context) {
		select {
		case <-held:
		case <-ctx.Done():
		}
	}
	return func() {
		beforeFill = nil
		close(held)
	}
}
