package store

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"io"
	"os"
)

// verifyPages walks the page tree of the bbolt file at path with bounds-
// checked reads, before bbolt itself maps and follows it. bbolt trusts its
// pages: a damaged page id, element offset or overflow count makes it read
// outside its memory map (SIGSEGV/SIGBUS, which a recover cannot catch),
// recurse forever on a cycle (a fatal stack overflow) or loop over four
// billion overflow pages in Tx.Check. A torn or corrupt file must be an
// error, never a crash (invariant 6 of docs/ARCHITECTURE.md), so Open
// proves here that every page bbolt can reach lies inside the file and that
// the tree is a tree.
//
// It checks, for the meta page bbolt will use (the valid one with the
// higher txid): the high-water mark fits in the file; the root bucket's
// pages, recursively through every nested bucket (inline ones included),
// have their own id, the right type, an element table and keys and values
// that fit inside the page and its overflow, and are reached exactly once;
// the freelist page is a freelist whose ids lie below the high-water mark,
// are distinct and are not reachable pages. It does not check key order.
// It reads the two meta pages, then maps (or reads) only the pages below
// the high-water mark: the bytes past it, which bbolt neither uses nor
// reads (it grows files ahead of use; a file may be extended sparsely to
// any size), are never touched.
//
// The layout mirrored here is bbolt's (go.etcd.io/bbolt/internal/common),
// in the machine's byte order; docs/FORMAT.md summarises it.
func verifyPages(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("store: open %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("store: stat %s: %w", path, err)
	}
	v := &pageVerifier{f: f, size: uint64(fi.Size())}
	defer func() {
		if verifyObserver != nil {
			verifyObserver(v.stats)
		}
	}()
	// The meta pages are read first, so that only the pages bbolt uses
	// (below the high-water mark) are mapped and walked: a file extended
	// past them (bbolt grows files ahead of use; a sparse hole of any
	// size) costs nothing.
	m, err := v.readMeta()
	if err != nil {
		return corruptf("%s: %v", path, err)
	}
	v.size = m.hwm * v.ps
	var unmap func()
	v.data, unmap = mapFile(f, v.size)
	defer unmap()
	if v.data != nil {
		v.stats.Mapped = v.size
	}
	if err := v.run(m); err != nil {
		return corruptf("%s: %v", path, err)
	}
	return nil
}

// verifyStats is what one verifyPages call read of the file.
type verifyStats struct {
	// Mapped is the length of the file's map (0 when pages were read).
	Mapped uint64
	// Read is how many bytes were read with pread (the meta pages, and
	// every page when the file is not mapped).
	Read uint64
	// Pages is how many pages (overflow included) the walk reached.
	Pages uint64
}

// verifyObserver, when set (by tests), is given each verifyPages call's
// statistics.
var verifyObserver func(verifyStats)

// bbolt's page format.
const (
	bbMagic          = 0xED0CDAED
	bbVersion        = 2
	bbPageHeaderSize = 16 // id u64, flags u16, count u16, overflow u32
	bbElementSize    = 16 // branch: pos u32, ksize u32, pgid u64; leaf: flags, pos, ksize, vsize u32
	bbBucketHeader   = 16 // root pgid u64, sequence u64
	bbMetaSize       = 64 // magic, version, pageSize, flags u32; root bucket 16; freelist, pgid, txid, checksum u64
	bbBranchFlag     = 0x01
	bbLeafFlag       = 0x02
	bbFreelistFlag   = 0x10
	bbBucketLeafFlag = 0x01
	bbNoFreelist     = ^uint64(0)
	bbMaxDepth       = 64 // b-tree levels plus bucket nesting; bbolt never gets near it
)

var ne = binary.NativeEndian

type bbMeta struct {
	pageSize, root, freelist, hwm, txid uint64
}

type pageVerifier struct {
	f *os.File
	// size is the file's size until the meta page is read, then the bytes
	// below the high-water mark: nothing past them is read.
	size  uint64
	stats verifyStats
	// data maps the file (read-only) where the platform allows; else
	// pages are read into the buffers below.
	data []byte
	ps   uint64
	hwm  uint64
	seen []uint64 // bitmap of reached page ids
	hdr  []byte   // page header reads
	// bufs[depth] holds the page being checked at that depth of the walk,
	// so that a nested bucket's pages do not overwrite their parent's.
	bufs [bbMaxDepth + 2][]byte
}

// readAt reads n bytes at off, which must lie inside the file, into *buf
// (grown as needed).
func (v *pageVerifier) readAt(off, n uint64, buf *[]byte) ([]byte, error) {
	if off > v.size || n > v.size-off {
		return nil, fmt.Errorf("read of %d bytes at %d is beyond the end of the %d-byte file", n, off, v.size)
	}
	if v.data != nil {
		return v.data[off : off+n : off+n], nil
	}
	if uint64(cap(*buf)) < n {
		*buf = make([]byte, n)
	}
	b := (*buf)[:n]
	if _, err := v.f.ReadAt(b, int64(off)); err != nil && err != io.EOF {
		return nil, err
	}
	v.stats.Read += n
	return b, nil
}

// parseMeta decodes and validates a meta page image (bbolt's Meta.Validate).
func parseMeta(b []byte) (bbMeta, bool) {
	if len(b) < bbPageHeaderSize+bbMetaSize {
		return bbMeta{}, false
	}
	m := b[bbPageHeaderSize : bbPageHeaderSize+bbMetaSize]
	if ne.Uint32(m[0:]) != bbMagic || ne.Uint32(m[4:]) != bbVersion {
		return bbMeta{}, false
	}
	h := fnv.New64a()
	_, _ = h.Write(m[:56])
	if h.Sum64() != ne.Uint64(m[56:]) {
		return bbMeta{}, false
	}
	return bbMeta{
		pageSize: uint64(ne.Uint32(m[8:])),
		root:     ne.Uint64(m[16:]),
		freelist: ne.Uint64(m[32:]),
		hwm:      ne.Uint64(m[40:]),
		txid:     ne.Uint64(m[48:]),
	}, true
}

func (v *pageVerifier) metaAt(off uint64) (bbMeta, bool) {
	if off >= v.size {
		return bbMeta{}, false
	}
	b, err := v.readAt(off, min(v.size-off, bbPageHeaderSize+bbMetaSize), &v.hdr)
	if err != nil {
		return bbMeta{}, false
	}
	return parseMeta(b)
}

// readMeta finds the page size and the meta page bbolt uses (the valid
// one with the higher txid), and checks that its high-water mark fits in
// the file. It reads the meta pages only.
func (v *pageVerifier) readMeta() (bbMeta, error) {
	// The page size, found as bbolt finds it: from the first meta page,
	// else from the second at each possible offset.
	var ps uint64
	if m, ok := v.metaAt(0); ok {
		ps = m.pageSize
	} else {
		for i := 0; i <= 14; i++ {
			pos := uint64(1024) << i
			if pos+1024 >= v.size {
				break
			}
			if m, ok := v.metaAt(pos); ok {
				ps = m.pageSize
				break
			}
		}
	}
	if ps < 1024 || ps > 1<<24 || ps&(ps-1) != 0 {
		return bbMeta{}, fmt.Errorf("no valid bbolt meta page (page size %d)", ps)
	}
	if v.size < 2*ps {
		return bbMeta{}, fmt.Errorf("file is %d bytes, shorter than two %d-byte meta pages", v.size, ps)
	}
	v.ps = ps
	// The meta bbolt uses: the valid one with the higher txid.
	m0, ok0 := v.metaAt(0)
	m1, ok1 := v.metaAt(ps)
	var m bbMeta
	switch {
	case ok0 && ok1:
		m = m0
		if m1.txid > m0.txid {
			m = m1
		}
	case ok0:
		m = m0
	case ok1:
		m = m1
	default:
		return bbMeta{}, fmt.Errorf("both bbolt meta pages are invalid")
	}
	if m.hwm < 3 || m.hwm > v.size/ps {
		return bbMeta{}, fmt.Errorf("high-water mark of %d pages does not fit the %d-byte file (page size %d)", m.hwm, v.size, ps)
	}
	return m, nil
}

// run walks the pages reachable from meta m (readMeta's).
func (v *pageVerifier) run(m bbMeta) error {
	v.hwm = m.hwm
	v.seen = make([]uint64, (m.hwm+63)/64)
	v.mark(0)
	v.mark(1)
	if m.freelist != bbNoFreelist {
		if err := v.checkFreelistPage(m.freelist); err != nil {
			return err
		}
	}
	if err := v.checkPage(m.root, 0, "root bucket"); err != nil {
		return err
	}
	if m.freelist != bbNoFreelist {
		return v.checkFreeIDs(m.freelist)
	}
	return nil
}

func (v *pageVerifier) marked(id uint64) bool { return v.seen[id/64]&(1<<(id%64)) != 0 }
func (v *pageVerifier) mark(id uint64)        { v.seen[id/64] |= 1 << (id % 64) }

// span reads page id with its overflow into *buf, after checking that all
// of it is below the high-water mark and has not been reached before.
func (v *pageVerifier) span(id uint64, what string, buf *[]byte) ([]byte, error) {
	if id < 2 || id >= v.hwm {
		return nil, fmt.Errorf("%s: page %d is outside [2, %d)", what, id, v.hwm)
	}
	p, err := v.readAt(id*v.ps, v.ps, buf)
	if err != nil {
		return nil, fmt.Errorf("%s: page %d: %v", what, id, err)
	}
	if got := ne.Uint64(p[0:]); got != id {
		return nil, fmt.Errorf("%s: page %d identifies as page %d", what, id, got)
	}
	overflow := uint64(ne.Uint32(p[12:]))
	if overflow >= v.hwm-id {
		return nil, fmt.Errorf("%s: page %d: %d overflow pages pass the high-water mark %d", what, id, overflow, v.hwm)
	}
	for i := id; i <= id+overflow; i++ {
		if v.marked(i) {
			return nil, fmt.Errorf("%s: page %d is reached twice", what, i)
		}
		v.mark(i)
	}
	v.stats.Pages += overflow + 1
	if overflow == 0 {
		return p, nil
	}
	return v.readAt(id*v.ps, (overflow+1)*v.ps, buf)
}

func (v *pageVerifier) checkFreelistPage(id uint64) error {
	p, err := v.span(id, "freelist", &v.bufs[0])
	if err != nil {
		return err
	}
	if flags := ne.Uint16(p[8:]); flags != bbFreelistFlag {
		return fmt.Errorf("freelist: page %d has flags %#x", id, flags)
	}
	return nil
}

// checkFreeIDs checks the free page ids once every reachable page is marked.
func (v *pageVerifier) checkFreeIDs(id uint64) error {
	hdr, err := v.readAt(id*v.ps, bbPageHeaderSize, &v.hdr)
	if err != nil {
		return err
	}
	overflow := uint64(ne.Uint32(hdr[12:]))
	p, err := v.readAt(id*v.ps, (overflow+1)*v.ps, &v.bufs[0])
	if err != nil {
		return err
	}
	body := p[bbPageHeaderSize:]
	count := uint64(ne.Uint16(p[10:]))
	if count == 0xFFFF {
		if len(body) < 8 {
			return fmt.Errorf("freelist: page %d is too short for its count", id)
		}
		count = ne.Uint64(body)
		body = body[8:]
	}
	if count > uint64(len(body))/8 {
		return fmt.Errorf("freelist: page %d: %d ids do not fit in %d bytes", id, count, len(body))
	}
	seen := make(map[uint64]bool, count)
	for i := uint64(0); i < count; i++ {
		pg := ne.Uint64(body[8*i:])
		switch {
		case pg < 2 || pg >= v.hwm:
			return fmt.Errorf("freelist: free page %d is outside [2, %d)", pg, v.hwm)
		case seen[pg]:
			return fmt.Errorf("freelist: page %d is free twice", pg)
		case v.marked(pg):
			return fmt.Errorf("freelist: page %d is both free and in use", pg)
		}
		seen[pg] = true
	}
	return nil
}

// checkPage checks the b-tree page id of a bucket and everything below it.
func (v *pageVerifier) checkPage(id uint64, depth int, what string) error {
	if depth > bbMaxDepth {
		return fmt.Errorf("%s: tree deeper than %d levels at page %d", what, bbMaxDepth, id)
	}
	p, err := v.span(id, what, &v.bufs[depth])
	if err != nil {
		return err
	}
	flags := ne.Uint16(p[8:])
	switch flags {
	case bbBranchFlag:
		children, err := elements(p, false, id, what)
		if err != nil {
			return err
		}
		if len(children) == 0 {
			return fmt.Errorf("%s: branch page %d is empty", what, id)
		}
		for _, child := range children {
			if err := v.checkPage(child, depth+1, what); err != nil {
				return err
			}
		}
		return nil
	case bbLeafFlag:
		return v.checkLeaf(p, id, depth, what)
	default:
		return fmt.Errorf("%s: page %d has flags %#x, want a branch or leaf page", what, id, flags)
	}
}

// elements checks the element table of a branch page (returning the child
// page ids) or a leaf page: every key and value lies inside p.
func elements(p []byte, leaf bool, id uint64, what string) ([]uint64, error) {
	count := uint64(ne.Uint16(p[10:]))
	if bbPageHeaderSize+count*bbElementSize > uint64(len(p)) {
		return nil, fmt.Errorf("%s: page %d: %d elements do not fit in %d bytes", what, id, count, len(p))
	}
	var children []uint64
	for i := uint64(0); i < count; i++ {
		at := bbPageHeaderSize + i*bbElementSize
		e := p[at : at+bbElementSize]
		var pos, n uint64
		if leaf {
			pos, n = uint64(ne.Uint32(e[4:])), uint64(ne.Uint32(e[8:]))+uint64(ne.Uint32(e[12:]))
		} else {
			pos, n = uint64(ne.Uint32(e[0:])), uint64(ne.Uint32(e[4:]))
			children = append(children, ne.Uint64(e[8:]))
		}
		if at+pos+n > uint64(len(p)) {
			return nil, fmt.Errorf("%s: page %d: element %d (%d bytes at %d) ends beyond the page", what, id, i, n, at+pos)
		}
	}
	return children, nil
}

// checkLeaf checks a leaf page (or an inline bucket's page) and the
// buckets nested in it.
func (v *pageVerifier) checkLeaf(p []byte, id uint64, depth int, what string) error {
	if _, err := elements(p, true, id, what); err != nil {
		return err
	}
	count := int(ne.Uint16(p[10:]))
	for i := 0; i < count; i++ {
		at := bbPageHeaderSize + i*bbElementSize
		e := p[at : at+bbElementSize]
		if ne.Uint32(e[0:])&bbBucketLeafFlag == 0 {
			continue
		}
		pos, ksize, vsize := int(ne.Uint32(e[4:])), int(ne.Uint32(e[8:])), int(ne.Uint32(e[12:]))
		key := p[at+pos : at+pos+ksize]
		val := p[at+pos+ksize : at+pos+ksize+vsize]
		if len(key) > 64 {
			key = key[:64]
		}
		child := fmt.Sprintf("%s/%q", what, key)
		if len(val) < bbBucketHeader {
			return fmt.Errorf("%s: bucket header of %d bytes", child, len(val))
		}
		root := ne.Uint64(val[0:])
		if root != 0 {
			if err := v.checkPage(root, depth+1, child); err != nil {
				return err
			}
			continue
		}
		// An inline bucket: a leaf page image inside the value.
		inline := val[bbBucketHeader:]
		if len(inline) < bbPageHeaderSize {
			return fmt.Errorf("%s: inline bucket of %d bytes", child, len(inline))
		}
		if flags := ne.Uint16(inline[8:]); flags != bbLeafFlag {
			return fmt.Errorf("%s: inline bucket page has flags %#x", child, flags)
		}
		if depth+1 > bbMaxDepth {
			return fmt.Errorf("%s: buckets nested deeper than %d", child, bbMaxDepth)
		}
		if err := v.checkLeaf(inline, 0, depth+1, child); err != nil {
			return err
		}
	}
	return nil
}
