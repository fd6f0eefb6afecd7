package powerloss_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/boltinformer/boltinformer/internal/powerloss"
)

// bboltLike is the trace of two bbolt-like commits: data pages, sync, meta
// page, sync, acknowledgement.
func bboltLike(t *testing.T) *powerloss.Trace {
	page := func(c byte, n int) string { return hexq(strings.Repeat(string(c), 4096*n)) }
	return parse(t,
		`1 openat(-100, "/d/cache.db", 0x42, 0600) = 3`,
		`1 pwrite64(3, `+page('A', 2)+`, 8192, 8192) = 8192`,
		`1 fdatasync(3) = 0`,
		`1 pwrite64(3, `+page('M', 1)+`, 4096, 0) = 4096`,
		`1 fdatasync(3) = 0`,
		`1 openat(-100, "/d/marks", 0x441, 0600) = 4`,
		`1 write(4, "ack 1\n", 6) = 6`,
		`1 pwrite64(3, `+page('B', 1)+`, 4096, 16384) = 4096`,
		`1 ftruncate(3, 65536) = 0`,
		`1 pwrite64(3, `+page('C', 1)+`, 4096, 20480) = 4096`,
		`1 fdatasync(3) = 0`,
		`1 pwrite64(3, `+page('N', 1)+`, 4096, 4096) = 4096`,
		`1 fdatasync(3) = 0`,
		`1 write(4, "ack 2\n", 6) = 6`,
	)
}

// checkModel checks what every state must satisfy: everything before the
// last barrier completed by its first crash point is durable; its tail
// holds writes or size changes issued after that barrier and before its
// last crash point.
func checkModel(t *testing.T, tr *powerloss.Trace, states []powerloss.State) {
	t.Helper()
	for _, s := range states {
		if s.From > s.To || s.From < 0 || s.To > len(tr.Ops) {
			t.Fatalf("%v: bad range", s)
		}
		if s.Absent {
			continue
		}
		barrier := 0 // ops before the last barrier completed at From
		for i := 0; i < s.From; i++ {
			if tr.Ops[i].Kind == powerloss.OpSync {
				barrier = i + 1
			}
		}
		for i := s.From; i < s.To; i++ {
			if tr.Ops[i].Kind == powerloss.OpSync {
				t.Fatalf("%v: a barrier completes inside its range (op %d)", s, i)
			}
		}
		if s.Durable < barrier || s.Durable > s.From {
			t.Fatalf("%v: durable %d, want in [%d, %d]", s, s.Durable, barrier, s.From)
		}
		seen := map[int]bool{}
		for _, p := range s.Tail {
			if p.Op < s.Durable || p.Op >= s.From || seen[p.Op] {
				t.Fatalf("%v: tail op %d outside [%d, %d) or repeated", s, p.Op, s.Durable, s.From)
			}
			seen[p.Op] = true
			if k := tr.Ops[p.Op].Kind; k != powerloss.OpWrite && k != powerloss.OpTruncate && k != powerloss.OpExtend {
				t.Fatalf("%v: tail op %d is a %s", s, p.Op, k)
			}
		}
	}
}

func kinds(states []powerloss.State) map[powerloss.Kind]int {
	out := map[powerloss.Kind]int{}
	for _, s := range states {
		out[s.Kind]++
	}
	return out
}

func TestEnumerate(t *testing.T) {
	tr := bboltLike(t)
	states := powerloss.Enumerate(tr, powerloss.Model{Seed: 1, Reorders: 20, Torn: 20, Garbage: 20})
	checkModel(t, tr, states)
	k := kinds(states)
	// No file, the empty file, then one per write or size change.
	if k[powerloss.Prefix] != 8 {
		t.Errorf("%d prefix states, want 8: %v", k[powerloss.Prefix], states)
	}
	if k[powerloss.Absent] != 1 || k[powerloss.Reorder] == 0 || k[powerloss.Torn] == 0 || k[powerloss.Garbage] == 0 {
		t.Errorf("states by kind: %v", k)
	}
	for _, s := range states {
		switch s.Kind {
		case powerloss.Absent:
			if s.From != 1 || s.To != len(tr.Ops) {
				t.Errorf("%v: the directory is never synced: want crash points 1..%d", s, len(tr.Ops))
			}
		case powerloss.Reorder:
			// Only the epoch with two writes and a size change can be
			// reordered.
			for _, p := range s.Tail {
				if p.Op < 6 || p.Op > 8 {
					t.Errorf("%v: reordered op %d outside the third epoch", s, p.Op)
				}
			}
		case powerloss.Torn:
			p := s.Tail[0]
			n := len(tr.Ops[p.Op].Data) / p.SectorSize
			if len(s.Tail) != 1 || len(p.Sectors) == 0 || len(p.Sectors) >= n || p.Garbage {
				t.Errorf("%v: not a proper tear of %d sectors", s, n)
			}
		case powerloss.Garbage:
			p := s.Tail[0]
			n := max(1, len(tr.Ops[p.Op].Data)/p.SectorSize)
			if len(s.Tail) != 1 || p.Sectors == nil || len(p.Sectors) >= n || !p.Garbage {
				t.Errorf("%v: not a tear with garbage of %d sectors", s, n)
			}
		}
	}
	if again := powerloss.Enumerate(tr, powerloss.Model{Seed: 1, Reorders: 20, Torn: 20, Garbage: 20}); !reflect.DeepEqual(again, states) {
		t.Error("the same seed gave other states")
	}
	// The prefix ending before the second meta page is found until that
	// page's sync completes.
	for _, s := range states {
		if s.Kind == powerloss.Prefix && s.Durable == 10 && s.To != 11 {
			t.Errorf("%v: want crash points up to 11", s)
		}
	}
	// With the directory synced, the file is absent only until then.
	synced := &powerloss.Trace{Files: tr.Files, Ops: slices.Insert(slices.Clone(tr.Ops), 2, powerloss.Op{Kind: powerloss.OpDirSync, Name: "fsync"})}
	for _, s := range powerloss.Enumerate(synced, powerloss.Model{}) {
		if s.Kind == powerloss.Absent && s.To != 2 {
			t.Errorf("%v: want crash points 1..2", s)
		}
	}
	// A file that existed: never absent.
	if k := kinds(powerloss.Enumerate(tr, powerloss.Model{Existed: true})); k[powerloss.Absent] != 0 {
		t.Errorf("an existing file was lost: %v", k)
	}
}

func TestWithoutSyncs(t *testing.T) {
	tr := bboltLike(t).WithoutSyncs()
	for _, op := range tr.Ops {
		if op.Kind == powerloss.OpSync || op.Kind == powerloss.OpDirSync {
			t.Fatalf("%v left", op)
		}
	}
	if tr.Epochs() != 1 {
		t.Errorf("%d epochs", tr.Epochs())
	}
	states := powerloss.Enumerate(tr, powerloss.Model{Seed: 2, Reorders: 50})
	checkModel(t, tr, states)
	// Without barriers, the first meta page can persist without the data
	// it points to.
	found := false
	for _, s := range states {
		if s.Kind != powerloss.Reorder {
			continue
		}
		ops := map[int]bool{}
		for _, p := range s.Tail {
			ops[p.Op] = true
		}
		found = found || (s.Durable <= 1 && ops[2] && !ops[1])
	}
	if !found {
		t.Error("no state has the meta page without its data")
	}
}

func TestBuild(t *testing.T) {
	tr := bboltLike(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	b := powerloss.NewBuilder(tr)
	read := func() []byte {
		t.Helper()
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	page := func(c byte) []byte { return bytes.Repeat([]byte{c}, 4096) }
	zero := page(0)
	cat := func(p ...[]byte) []byte { return bytes.Join(p, nil) }
	// Everything, in order: the truncation to 64 KiB came before C.
	if err := b.Build(powerloss.State{Durable: len(tr.Ops)}, path); err != nil {
		t.Fatal(err)
	}
	want := cat(page('M'), page('N'), page('A'), page('A'), page('B'), page('C'), bytes.Repeat(zero, 10))
	if got := read(); !bytes.Equal(got, want) {
		t.Fatalf("full state: %d bytes, want %d", len(got), len(want))
	}
	// Back to the first commit, then C, and half of N's sectors.
	s := powerloss.State{Durable: 6, Tail: []powerloss.Piece{{Op: 8}, {Op: 10, SectorSize: 512, Sectors: []int64{8, 10, 12, 14}}}}
	if err := b.Build(s, path); err != nil {
		t.Fatal(err)
	}
	torn := make([]byte, 4096)
	for _, sec := range []int{0, 2, 4, 6} {
		copy(torn[sec*512:(sec+1)*512], bytes.Repeat([]byte{'N'}, 512))
	}
	want = cat(page('M'), torn, page('A'), page('A'), zero, page('C'))
	if got := read(); !bytes.Equal(got, want) {
		t.Fatalf("torn state differs: %d bytes, want %d", len(got), len(want))
	}
	// Garbage in N's sectors but the first.
	s = powerloss.State{Durable: 10, Tail: []powerloss.Piece{{Op: 10, SectorSize: 512, Sectors: []int64{8}, Garbage: true}}}
	if err := b.Build(s, path); err != nil {
		t.Fatal(err)
	}
	got := read()
	meta2 := got[4096:8192]
	if !bytes.Equal(meta2[:512], bytes.Repeat([]byte{'N'}, 512)) {
		t.Fatal("the sector that reached the disk does not hold the write")
	}
	for sec := 1; sec < 8; sec++ {
		part := meta2[sec*512 : (sec+1)*512]
		if bytes.Equal(part, make([]byte, 512)) || bytes.Equal(part, bytes.Repeat([]byte{'N'}, 512)) {
			t.Fatalf("sector %d holds the old or the new content, not garbage", sec)
		}
	}
	if err := b.Build(s, path); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(read(), got) {
		t.Fatal("the same garbage state built twice differs")
	}
	// No file.
	if err := b.Build(powerloss.State{Absent: true}, path); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("absent state left a file: %v", err)
	}
	// Bad states are errors.
	for _, s := range []powerloss.State{
		{Durable: len(tr.Ops) + 1},
		{Durable: 1, Tail: []powerloss.Piece{{Op: 99}}},
		{Durable: 1, Tail: []powerloss.Piece{{Op: 1, SectorSize: 512, Sectors: []int64{0}}}},
	} {
		if err := b.Build(s, path); err == nil {
			t.Errorf("%v: no error", s)
		}
	}
}
