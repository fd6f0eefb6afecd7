package powerloss

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
)

// blockSize is the unit of the sparse image (not a sector size of the
// model: any write may tear at any SectorSizes boundary).
const blockSize = 4096

// image is a file's content as a sparse set of blocks.
type image struct {
	size   int64
	blocks map[int64]*[blockSize]byte
}

func newImage() *image { return &image{blocks: map[int64]*[blockSize]byte{}} }

func (m *image) write(off int64, data []byte) {
	for len(data) > 0 {
		b := off / blockSize
		blk := m.blocks[b]
		if blk == nil {
			blk = new([blockSize]byte)
			m.blocks[b] = blk
		}
		n := copy(blk[off%blockSize:], data)
		data = data[n:]
		off += int64(n)
		m.size = max(m.size, off)
	}
}

func (m *image) truncate(size int64) {
	for b, blk := range m.blocks {
		switch start := b * blockSize; {
		case start >= size:
			delete(m.blocks, b)
		case start+blockSize > size:
			clear(blk[size-start:])
		}
	}
	m.size = size
}

func (m *image) apply(op Op) {
	switch op.Kind {
	case OpWrite:
		m.write(op.Off, op.Data)
	case OpTruncate:
		m.truncate(op.Size)
	case OpExtend:
		m.size = max(m.size, op.Size)
	}
}

// Builder writes States of one trace to files. It keeps the image of the
// last Durable prefix it built, so States sorted by Durable (as Enumerate
// returns them) cost only their own ops. It is not safe for concurrent use.
type Builder struct {
	t   *Trace
	img *image
	at  int // ops applied to img
}

// NewBuilder returns a Builder of t's states.
func NewBuilder(t *Trace) *Builder { return &Builder{t: t, img: newImage()} }

// Build writes the file as s says it is after the power loss to path
// (removing path when the state has no file).
func (b *Builder) Build(s State, path string) (err error) {
	if s.Durable < 0 || s.Durable > len(b.t.Ops) {
		return fmt.Errorf("powerloss: state %v: durable %d outside the trace's %d ops", s, s.Durable, len(b.t.Ops))
	}
	if s.Absent {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("powerloss: %w", err)
		}
		return nil
	}
	if s.Durable < b.at {
		b.img, b.at = newImage(), 0
	}
	for ; b.at < s.Durable; b.at++ {
		b.img.apply(b.t.Ops[b.at])
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("powerloss: %w", err)
	}
	defer func() {
		if cerr := f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("powerloss: %w", cerr)
		}
	}()
	if err := f.Truncate(b.img.size); err != nil {
		return fmt.Errorf("powerloss: %w", err)
	}
	for blk, data := range b.img.blocks {
		off := blk * blockSize
		n := min(int64(blockSize), b.img.size-off)
		if n <= 0 || allZero(data[:n]) {
			continue
		}
		if _, err := f.WriteAt(data[:n], off); err != nil {
			return fmt.Errorf("powerloss: %w", err)
		}
	}
	size := b.img.size
	for _, p := range s.Tail {
		if p.Op < 0 || p.Op >= len(b.t.Ops) {
			return fmt.Errorf("powerloss: state %v: op %d outside the trace", s, p.Op)
		}
		op := b.t.Ops[p.Op]
		switch op.Kind {
		case OpWrite:
			if err := writePiece(f, op, p); err != nil {
				return err
			}
			size = max(size, op.Off+int64(len(op.Data)))
		case OpTruncate:
			if err := f.Truncate(op.Size); err != nil {
				return fmt.Errorf("powerloss: %w", err)
			}
			size = op.Size
		case OpExtend:
			if op.Size > size {
				if err := f.Truncate(op.Size); err != nil {
					return fmt.Errorf("powerloss: %w", err)
				}
				size = op.Size
			}
		}
	}
	return nil
}

// writePiece writes the whole op, or only the sectors p names (and garbage
// in the others, if p says so). A torn write that did not reach its last
// sector still made the file as large as the sectors it did reach (or, with
// garbage, as the write).
func writePiece(f *os.File, op Op, p Piece) error {
	if p.Sectors == nil {
		if _, err := f.WriteAt(op.Data, op.Off); err != nil {
			return fmt.Errorf("powerloss: %w", err)
		}
		return nil
	}
	if p.SectorSize <= 0 {
		return fmt.Errorf("powerloss: sector size %d", p.SectorSize)
	}
	ss := int64(p.SectorSize)
	end := op.Off + int64(len(op.Data))
	if p.Garbage {
		// Garbage first in every sector the write covers; the sectors
		// that got the new content overwrite theirs below.
		for sec := op.Off / ss; sec*ss < end; sec++ {
			lo, hi := max(sec*ss, op.Off), min((sec+1)*ss, end)
			junk := make([]byte, hi-lo)
			rng := rand.New(rand.NewPCG(uint64(op.Line), uint64(sec)))
			for i := range junk {
				junk[i] = byte(rng.Uint32())
			}
			if _, err := f.WriteAt(junk, lo); err != nil {
				return fmt.Errorf("powerloss: %w", err)
			}
		}
	}
	for _, sec := range p.Sectors {
		lo, hi := max(sec*ss, op.Off), min((sec+1)*ss, end)
		if lo >= hi {
			return fmt.Errorf("powerloss: sector %d (of %d bytes) outside the write at %d+%d", sec, ss, op.Off, len(op.Data))
		}
		if _, err := f.WriteAt(op.Data[lo-op.Off:hi-op.Off], lo); err != nil {
			return fmt.Errorf("powerloss: %w", err)
		}
	}
	return nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
