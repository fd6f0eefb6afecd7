package store

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
	bolt "go.etcd.io/bbolt"
)

// The window (format version 5, optional; docs/FORMAT.md section 7d): the
// last changes an informer's observers were given (the local API's window
// of events, from which its watches resume), kept in the informer's
// "window" bucket and written in the same transaction as the objects they
// change, so that after any stop, kill -9 included, the window ends where
// the objects do and a watch from a resourceVersion in it resumes.

// bucketWindow holds, per informer, its window of changes: one chunk per
// batch, by sequence number (version 5).
var bucketWindow = []byte("window")

// Window event types.
const (
	// WindowUpsert: Object was added (Prev nil) or replaced Prev.
	WindowUpsert byte = 1
	// WindowDelete: the object of Key, last Prev, was deleted; Object is
	// its final state as the watch delivered it (nil: Prev).
	WindowDelete byte = 2
)

// WindowEvent is one change of an informer's window, msgpack-encoded as
// an array; each batch's events are one chunk, an array of them. Object
// and Prev are Record envelopes (EncodeRecord), sealed as the informer's
// objects are.
type WindowEvent struct {
	//lint:ignore U1000 msgpack reads its struct options from this field
	_msgpack struct{} `msgpack:",as_array"`
	// Type is WindowUpsert or WindowDelete.
	Type byte
	// Key is the object's key.
	Key string
	// ResourceVersion is the informer's resourceVersion after the change,
	// PrevResourceVersion the one before it (of the previous change or
	// bookmark): a watch from it gets this event first.
	ResourceVersion, PrevResourceVersion string
	// Object is the object after the change (a delete: its final state);
	// Prev the one before (nil for an add).
	Object, Prev []byte
	// PrevAt, when not 0, says that Prev is the Object of event PrevAt-1
	// of the same chunk (not stored twice); Tx.Window fills Prev.
	PrevAt int
}

// keyWindowThrough, in the window bucket, is the informer's
// resourceVersion as of the last batch a writer that keeps the window
// wrote: a window whose through is not the state's was left behind by a
// writer that does not keep it, and is not to be used.
var keyWindowThrough = []byte("through")

// windowKey is the bucket key of chunk number seq.
func windowKey(seq uint64) []byte {
	return binary.BigEndian.AppendUint64(nil, seq)
}

// applyWindow writes a batch's window: it clears it (Batch.WindowReset),
// appends the batch's events (Batch.Window) as one chunk after the last,
// then drops the oldest chunks while the others hold Batch.WindowKeep
// events or more (so the window holds at least WindowKeep events when it
// has seen that many, and at most that plus one batch's).
func (ib *informerBuckets) applyWindow(b *Batch) error {
	if b.WindowReset && ib.root.Bucket(bucketWindow) != nil {
		if err := ib.root.DeleteBucket(bucketWindow); err != nil {
			return fmt.Errorf("window: %w", err)
		}
	}
	w := ib.root.Bucket(bucketWindow)
	if w == nil && len(b.Window) > 0 {
		var err error
		if w, err = ib.root.CreateBucket(bucketWindow); err != nil {
			return fmt.Errorf("window: %w", err)
		}
	}
	if w == nil {
		return nil
	}
	if b.State != nil {
		if err := w.Put(keyWindowThrough, []byte(b.State.ResourceVersion)); err != nil {
			return fmt.Errorf("window: %w", err)
		}
	}
	if len(b.Window) == 0 {
		return nil
	}
	var next uint64 = 1
	c := w.Cursor()
	for k, _ := c.Last(); k != nil; k, _ = c.Prev() {
		if len(k) == 8 {
			next = binary.BigEndian.Uint64(k) + 1
			break
		}
	}
	size := 8
	for i := range b.Window {
		e := &b.Window[i]
		size += 40 + len(e.Key) + len(e.ResourceVersion) + len(e.PrevResourceVersion) + len(e.Object) + len(e.Prev)
	}
	var buf bytes.Buffer
	buf.Grow(size) // one allocation: the events' records are most of it
	if err := msgpack.NewEncoder(&buf).Encode(b.Window); err != nil {
		return fmt.Errorf("store: window events: %w", err)
	}
	if err := w.Put(windowKey(next), buf.Bytes()); err != nil {
		return fmt.Errorf("window: %w", err)
	}
	if b.WindowKeep > 0 {
		return trimWindow(w, b.WindowKeep)
	}
	return nil
}

// trimWindow drops the oldest chunks while the others hold keep events or
// more.
func trimWindow(w *bolt.Bucket, keep int) error {
	type chunk struct {
		key []byte
		n   int
	}
	var chunks []chunk
	total := 0
	err := w.ForEach(func(k, v []byte) error {
		if len(k) != 8 {
			return nil // through
		}
		n, err := msgpack.NewDecoder(bytes.NewReader(v)).DecodeArrayLen()
		if err != nil {
			n = 0 // damaged: dropped first
		}
		chunks = append(chunks, chunk{append([]byte(nil), k...), n})
		total += n
		return nil
	})
	if err != nil {
		return fmt.Errorf("window: %w", err)
	}
	for len(chunks) > 1 && total-chunks[0].n >= keep {
		if err := w.Delete(chunks[0].key); err != nil {
			return fmt.Errorf("window: %w", err)
		}
		total -= chunks[0].n
		chunks = chunks[1:]
	}
	return nil
}

// Window returns the informer's window of changes, oldest first (format
// version 5; none when the file keeps no window, or when a writer that
// does not keep it wrote the informer since). A damaged event is an error
// wrapping ErrCorrupt: the window is then not to be used.
func (t *Tx) Window(informer string) ([]*WindowEvent, error) {
	w := t.sub(informer, bucketWindow)
	if w == nil {
		return nil, nil
	}
	st, err := t.State(informer)
	if err != nil || st == nil || string(w.Get(keyWindowThrough)) != st.ResourceVersion {
		return nil, nil // left behind: not the objects' window
	}
	var out []*WindowEvent
	err = w.ForEach(func(k, v []byte) error {
		if bytes.Equal(k, keyWindowThrough) {
			return nil
		}
		if len(k) != 8 {
			return fmt.Errorf("%w: informer %q: window key %x", ErrCorrupt, informer, k)
		}
		var evs []*WindowEvent
		if err := msgpack.Unmarshal(v, &evs); err != nil {
			return fmt.Errorf("%w: informer %q: window chunk %d: %w", ErrCorrupt, informer, binary.BigEndian.Uint64(k), err)
		}
		for i, e := range evs {
			if e == nil || (e.Type != WindowUpsert && e.Type != WindowDelete) || e.PrevAt < 0 || e.PrevAt > i {
				return fmt.Errorf("%w: informer %q: window chunk %d: event %d is not a window event", ErrCorrupt, informer, binary.BigEndian.Uint64(k), i)
			}
			if e.PrevAt > 0 {
				e.Prev = evs[e.PrevAt-1].Object
			}
		}
		out = append(out, evs...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// WindowChunks returns the number of events of each chunk of the
// informer's window, oldest first: the window holds at least its keep
// (when it has seen as many) and fewer without its oldest chunk.
func (t *Tx) WindowChunks(informer string) ([]int, error) {
	w := t.sub(informer, bucketWindow)
	if w == nil {
		return nil, nil
	}
	var out []int
	err := w.ForEach(func(k, v []byte) error {
		if len(k) != 8 {
			return nil
		}
		n, err := msgpack.NewDecoder(bytes.NewReader(v)).DecodeArrayLen()
		if err != nil {
			return fmt.Errorf("%w: informer %q: window chunk %d: %w", ErrCorrupt, informer, binary.BigEndian.Uint64(k), err)
		}
		out = append(out, n)
		return nil
	})
	return out, err
}
