package localapi

import (
	"sort"
	"sync/atomic"
)

// chunkMax bounds the entries of one chunk of a keyList: a change copies
// at most one chunk and the list of chunks, whatever the view's size.
const chunkMax = 512

// chunk is a run of a keyList's entries, sorted. A chunk made before the
// last snapshot (gen below the list's) is shared with that snapshot and
// never written again: a change copies it first.
type chunk struct {
	keys  []string
	items []*item
	gen   uint64
}

// keyList is a view's objects in key order: chunks of at most chunkMax
// entries, copied on write. A snapshot costs O(1) (the chunks as they are,
// never changed after); the first change after it copies the chunk it
// changes and the list of chunks, about n/chunkMax + chunkMax pointers.
// Changes are made under the view's lock for writing; snapshots are taken
// under it for reading.
type keyList struct {
	chunks    []*chunk
	chunksGen uint64 // the generation chunks (the slice) was made in
	// gen counts the snapshots taken: what was made in an earlier
	// generation is shared. Atomic: readers take snapshots together.
	gen atomic.Uint64
}

// reset makes the list hold keys (sorted) and items.
func (l *keyList) reset(keys []string, items []*item) {
	g := l.gen.Load()
	l.chunks = nil
	l.chunksGen = g
	const fill = chunkMax * 3 / 4 // room to grow before a split
	for i := 0; i < len(keys); i += fill {
		j := min(i+fill, len(keys))
		c := &chunk{keys: make([]string, j-i, chunkMax), items: make([]*item, j-i, chunkMax), gen: g}
		copy(c.keys, keys[i:j])
		copy(c.items, items[i:j])
		l.chunks = append(l.chunks, c)
	}
}

// snapshot returns the chunks as they are now; they never change after.
func (l *keyList) snapshot() []*chunk {
	l.gen.Add(1)
	return l.chunks
}

// seek returns the position of the first key at or after key: chunk ci,
// index i (ci == len(chunks): none).
func seek(chunks []*chunk, key string) (ci, i int) {
	ci = sort.Search(len(chunks), func(c int) bool {
		k := chunks[c].keys
		return k[len(k)-1] >= key
	})
	if ci < len(chunks) {
		i = sort.SearchStrings(chunks[ci].keys, key)
	}
	return ci, i
}

// find returns the chunk that holds key or where it belongs (chunks must
// not be empty), the index in it, and whether key is there.
func find(chunks []*chunk, key string) (ci, i int, found bool) {
	ci, i = seek(chunks, key)
	if ci == len(chunks) {
		ci-- // after every key: the end of the last chunk
		return ci, len(chunks[ci].keys), false
	}
	return ci, i, chunks[ci].keys[i] == key
}

// between counts the keys from position (ci, i) up to position (cj, j).
func between(chunks []*chunk, ci, i, cj, j int) int {
	if cj < ci || (cj == ci && j <= i) {
		return 0 // the end is before the start
	}
	n := j - i
	for c := ci; c < cj; c++ {
		n += len(chunks[c].keys)
	}
	return max(0, n)
}

// writable returns chunk ci, copied first when it is shared (and the
// chunks too).
func (l *keyList) writable(ci int) *chunk {
	g := l.gen.Load()
	if l.chunksGen != g {
		l.chunks = append(make([]*chunk, 0, len(l.chunks)+1), l.chunks...)
		l.chunksGen = g
	}
	c := l.chunks[ci]
	if c.gen != g {
		n := len(c.keys)
		c = &chunk{keys: make([]string, n, max(n+1, chunkMax)), items: make([]*item, n, max(n+1, chunkMax)), gen: g}
		copy(c.keys, l.chunks[ci].keys)
		copy(c.items, l.chunks[ci].items)
		l.chunks[ci] = c
	}
	return c
}

// set makes it the item of key, inserting key when new.
func (l *keyList) set(key string, it *item) {
	if len(l.chunks) == 0 {
		g := l.gen.Load()
		l.chunksGen = g
		l.chunks = []*chunk{{keys: append(make([]string, 0, chunkMax), key), items: append(make([]*item, 0, chunkMax), it), gen: g}}
		return
	}
	ci, i, found := find(l.chunks, key)
	c := l.writable(ci)
	if found {
		c.items[i] = it
		return
	}
	c.keys = insertAt(c.keys, i, key)
	c.items = insertAt(c.items, i, it)
	if len(c.keys) > chunkMax {
		h := len(c.keys) / 2
		right := &chunk{keys: make([]string, len(c.keys)-h, chunkMax), items: make([]*item, len(c.keys)-h, chunkMax), gen: c.gen}
		copy(right.keys, c.keys[h:])
		copy(right.items, c.items[h:])
		clear(c.items[h:]) // no stale pointers past the length
		c.keys, c.items = c.keys[:h], c.items[:h]
		l.chunks = insertAt(l.chunks, ci+1, right)
	}
}

// remove deletes key, if present.
func (l *keyList) remove(key string) {
	if len(l.chunks) == 0 {
		return
	}
	ci, i, found := find(l.chunks, key)
	if !found {
		return
	}
	c := l.writable(ci)
	last := len(c.keys) - 1
	copy(c.keys[i:], c.keys[i+1:])
	copy(c.items[i:], c.items[i+1:])
	c.keys[last], c.items[last] = "", nil // nothing kept past the length
	c.keys, c.items = c.keys[:last], c.items[:last]
	switch {
	case len(c.keys) == 0:
		l.chunks = append(l.chunks[:ci], l.chunks[ci+1:]...)
		l.chunks[:cap(l.chunks)][len(l.chunks)] = nil
	case len(c.keys) < chunkMax/4 && ci+1 < len(l.chunks) && len(c.keys)+len(l.chunks[ci+1].keys) <= chunkMax:
		// Merge a small chunk into its next: chunks stay large.
		next := l.chunks[ci+1]
		c.keys = append(c.keys, next.keys...)
		c.items = append(c.items, next.items...)
		l.chunks = append(l.chunks[:ci+1], l.chunks[ci+2:]...)
		l.chunks[:cap(l.chunks)][len(l.chunks)] = nil
	}
}

func insertAt[T any](s []T, i int, v T) []T {
	var zero T
	s = append(s, zero)
	copy(s[i+1:], s[i:])
	s[i] = v
	return s
}
