//go:build race

package indexer_test

// raceEnabled shortens the long tests under the race detector.
const raceEnabled = true
