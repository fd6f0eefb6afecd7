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

// bucketWindow holds, per informer, its window of changes by sequence
// number (version 5).
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
// an array. Object and Prev are Record envelopes (EncodeRecord), sealed as
// the informer's objects are.
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
}

// EncodeWindowEvent encodes e as stored.
func EncodeWindowEvent(e *WindowEvent) ([]byte, error) {
	b, err := msgpack.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("store: window event: %w", err)
	}
	return b, nil
}

// DecodeWindowEvent decodes a stored window event.
func DecodeWindowEvent(b []byte) (*WindowEvent, error) {
	var e WindowEvent
	if err := msgpack.Unmarshal(b, &e); err != nil {
		return nil, fmt.Errorf("%w: window event: %w", ErrCorrupt, err)
	}
	if e.Type != WindowUpsert && e.Type != WindowDelete {
		return nil, fmt.Errorf("%w: window event of type %d", ErrCorrupt, e.Type)
	}
	return &e, nil
}

// keyWindowThrough, in the window bucket, is the informer's
// resourceVersion as of the last batch a writer that keeps the window
// wrote: a window whose through is not the state's was left behind by a
// writer that does not keep it, and is not to be used.
var keyWindowThrough = []byte("through")

// windowKey is the bucket key of sequence number seq.
func windowKey(seq uint64) []byte {
	return binary.BigEndian.AppendUint64(nil, seq)
}

// applyWindow writes a batch's window: it clears it (Batch.WindowReset),
// appends the events (Batch.Window) after the last one, then keeps the
// newest Batch.WindowKeep.
func (ib *informerBuckets) applyWindow(b *Batch) error {
	if b.WindowReset && ib.root.Bucket(bucketWindow) != nil {
		if err := ib.root.DeleteBucket(bucketWindow); err != nil {
			return fmt.Errorf("window: %w", err)
		}
	}
	w := ib.root.Bucket(bucketWindow)
	if w != nil && b.State != nil {
		if err := w.Put(keyWindowThrough, []byte(b.State.ResourceVersion)); err != nil {
			return fmt.Errorf("window: %w", err)
		}
	}
	if len(b.Window) == 0 {
		return nil
	}
	if w == nil {
		var err error
		if w, err = ib.root.CreateBucket(bucketWindow); err != nil {
			return fmt.Errorf("window: %w", err)
		}
		if b.State != nil {
			if err := w.Put(keyWindowThrough, []byte(b.State.ResourceVersion)); err != nil {
				return fmt.Errorf("window: %w", err)
			}
		}
	}
	var next uint64 = 1
	c := w.Cursor()
	for k, _ := c.Last(); k != nil; k, _ = c.Prev() {
		if len(k) == 8 {
			next = binary.BigEndian.Uint64(k) + 1
			break
		}
	}
	for i := range b.Window {
		raw, err := EncodeWindowEvent(&b.Window[i])
		if err != nil {
			return err
		}
		if err := w.Put(windowKey(next), raw); err != nil {
			return fmt.Errorf("window: %w", err)
		}
		next++
	}
	if b.WindowKeep <= 0 {
		return nil
	}
	if next <= uint64(b.WindowKeep) {
		return nil
	}
	return trimWindow(w, next-uint64(b.WindowKeep))
}

// trimWindow removes the events numbered below first.
func trimWindow(w *bolt.Bucket, first uint64) error {
	c := w.Cursor()
	var gone [][]byte
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		if len(k) != 8 {
			continue // through
		}
		if binary.BigEndian.Uint64(k) >= first {
			break
		}
		gone = append(gone, append([]byte(nil), k...))
	}
	for _, k := range gone {
		if err := w.Delete(k); err != nil {
			return fmt.Errorf("window: %w", err)
		}
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
		e, err := DecodeWindowEvent(v)
		if err != nil {
			return fmt.Errorf("informer %q: window event %d: %w", informer, binary.BigEndian.Uint64(k), err)
		}
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
