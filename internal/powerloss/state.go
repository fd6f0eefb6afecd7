package powerloss

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Kind is how a State came about.
type Kind string

// The kinds of State.
const (
	// Prefix: the ops up to some point reached the disk, in order, and
	// none after it (ALICE's prefix states).
	Prefix Kind = "prefix"
	// Reorder: after the last completed sync, a subset of the most recent
	// writes reached the disk, in a random order.
	Reorder Kind = "reorder"
	// Torn: a write after the last completed sync reached the disk only in
	// some of its sectors (the writes before it in full, none after it).
	Torn Kind = "torn"
	// Garbage: like Torn, but the sectors that did not get the new content
	// hold garbage instead of the old (stale blocks a file system without
	// ordered data exposes after a crash, or a device whose sectors are not
	// atomic).
	Garbage Kind = "garbage"
	// Absent: the file was created and its directory never synced since:
	// its directory entry is lost, with everything in it.
	Absent Kind = "absent"
)

// Kinds are the kinds in the order reports list them.
var Kinds = []Kind{Prefix, Reorder, Torn, Garbage, Absent}

// State is one state the file can be in after a power loss.
type State struct {
	Kind Kind
	// From and To bound the crash points at which the file can be in this
	// state: a crash point is the number of ops of the trace completed when
	// the power went. A caller checks the state against what the program
	// had acknowledged at every point in [From, To].
	From, To int
	// Absent: there is no file.
	Absent bool
	// Durable is the number of ops of the trace that reached the disk in
	// full and in order.
	Durable int
	// Tail are the writes and size changes that reached the disk after
	// them, in this order.
	Tail []Piece
}

// Piece is an op of a State's tail.
type Piece struct {
	// Op indexes Trace.Ops.
	Op int
	// SectorSize and Sectors, when Sectors is not nil: only these sectors
	// (file offset / SectorSize) of the write reached the disk.
	SectorSize int
	Sectors    []int64
	// Garbage: the write's other sectors hold garbage (a function of the
	// op and the sector, so a state is rebuilt the same).
	Garbage bool
}

// String describes the state so that it can be rebuilt from the trace.
func (s State) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s at crash points %d..%d: ", s.Kind, s.From, s.To)
	if s.Absent {
		b.WriteString("no file")
		return b.String()
	}
	fmt.Fprintf(&b, "ops[:%d]", s.Durable)
	if len(s.Tail) > 0 {
		b.WriteString(" then ")
		for i, p := range s.Tail {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.Itoa(p.Op))
			if p.Sectors != nil {
				fmt.Fprintf(&b, "(sectors of %d: %v", p.SectorSize, p.Sectors)
				if p.Garbage {
					b.WriteString(", garbage in the others")
				}
				b.WriteByte(')')
			}
		}
	}
	return b.String()
}

// Model configures Enumerate.
type Model struct {
	// Seed seeds the sampled states: the same trace, model and seed give
	// the same states.
	Seed uint64
	// Reorders is the number of Reorder states sampled per sync epoch
	// (the writes between two barriers). Zero means none.
	Reorders int
	// Torn is the number of Torn states sampled per sync epoch. Zero
	// means none.
	Torn int
	// Garbage is the number of Garbage states sampled per sync epoch.
	// Zero means none.
	Garbage int
	// Window bounds the writes a Reorder state draws from: the last Window
	// writes before its crash point. Default 64.
	Window int
	// SectorSizes are the sizes writes tear at. Default 512 and 4096.
	SectorSizes []int
	// Existed says the data file existed, durably, before the trace began.
	Existed bool
	// NoPrefixes leaves out the Prefix states (one per write: the bulk of
	// a long trace).
	NoPrefixes bool
}

// Epochs returns the number of sync epochs of the trace: the runs of ops
// between barriers (the last one may end at the end of the trace).
func (t *Trace) Epochs() int {
	n := 1
	for _, op := range t.Ops {
		if op.Kind == OpSync {
			n++
		}
	}
	return n
}

// WithoutSyncs returns the trace as a program that never synced would
// have left it: the negative control of a checker.
func (t *Trace) WithoutSyncs() *Trace {
	out := &Trace{Files: t.Files, Ops: make([]Op, 0, len(t.Ops))}
	for _, op := range t.Ops {
		if op.Kind != OpSync && op.Kind != OpDirSync {
			out.Ops = append(out.Ops, op)
		}
	}
	return out
}

func changesImage(k OpKind) bool { return k == OpWrite || k == OpTruncate || k == OpExtend }

// Enumerate returns the crash states of the trace under the model, sorted
// by Durable (the order Builder builds them fastest), without duplicates.
func Enumerate(t *Trace, m Model) []State {
	if m.Window <= 0 {
		m.Window = 64
	}
	if len(m.SectorSizes) == 0 {
		m.SectorSizes = []int{512, 4096}
	}
	ops := t.Ops
	created := -1 // the op that created the file
	if !m.Existed {
		for i, op := range ops {
			if op.Kind == OpCreate {
				created = i
				break
			}
		}
	}
	exists := func(at int) bool { return m.Existed || (created >= 0 && created < at) }
	var out []State
	seen := map[string]bool{}
	add := func(s State) {
		k := s.key()
		if !seen[k] {
			seen[k] = true
			out = append(out, s)
		}
	}
	// Prefix states: one per change of the file (a write, a size change,
	// its creation). The ops before it reached the disk, none after it:
	// it can be found at every crash point until the next barrier
	// completes (a state without the file, only until its creation).
	if !m.NoPrefixes {
		next := func(from int, barrier bool) int {
			for j := from; j < len(ops); j++ {
				if (!barrier && changesImage(ops[j].Kind)) || (barrier && ops[j].Kind == OpSync) || j == created {
					return j
				}
			}
			return len(ops)
		}
		for at := 0; at <= len(ops); {
			change := next(at, false)
			to := change
			if exists(at) {
				to = next(at, true)
			}
			add(State{Kind: Prefix, From: at, To: to, Absent: !exists(at), Durable: at})
			at = change + 1
		}
	}
	// Absent: after the creation, until the directory is synced.
	if created >= 0 {
		to := len(ops)
		for j := created + 1; j < len(ops); j++ {
			if ops[j].Kind == OpDirSync {
				to = j
				break
			}
		}
		add(State{Kind: Absent, From: created + 1, To: to, Absent: true})
	}
	// Per sync epoch: reordered subsets and torn writes.
	start := 0
	epoch := 0
	for i := 0; i <= len(ops); i++ {
		if i < len(ops) && ops[i].Kind != OpSync {
			continue
		}
		var w []int // the epoch's writes and size changes
		for j := start; j < i; j++ {
			if changesImage(ops[j].Kind) {
				w = append(w, j)
			}
		}
		rng := rand.New(rand.NewPCG(m.Seed, uint64(epoch)))
		for range m.Reorders {
			if s, ok := sampleReorder(rng, w, i, m.Window); ok && exists(s.From) {
				add(s)
			}
		}
		for range m.Torn {
			if s, ok := sampleTorn(rng, ops, w, i, m.SectorSizes, false); ok && exists(s.From) {
				add(s)
			}
		}
		for range m.Garbage {
			if s, ok := sampleTorn(rng, ops, w, i, m.SectorSizes, true); ok && exists(s.From) {
				add(s)
			}
		}
		start = i + 1
		epoch++
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].Durable < out[b].Durable })
	return out
}

func (s State) key() string {
	if s.Absent {
		return fmt.Sprintf("absent %d %d", s.From, s.To)
	}
	return fmt.Sprintf("%d %d %d %v", s.From, s.To, s.Durable, s.Tail)
}

// sampleReorder draws a crash point after one of the epoch's writes w (the
// epoch's barrier is op end), a window of the writes before it, of which
// the earlier ones reached the disk in order, and a subset of the rest in
// a random order. It fails (rarely) when the draw is a prefix state.
func sampleReorder(rng *rand.Rand, w []int, end, window int) (State, bool) {
	if len(w) < 2 {
		return State{}, false
	}
	last := 1 + rng.IntN(len(w)-1)  // the last write issued: w[last]
	lo := max(0, last+1-window)     // at most window writes
	first := lo + rng.IntN(last-lo) // at least two
	cand := w[first : last+1]
	n := 1 + rng.IntN(len(cand))
	pick := slices.Clone(cand)
	rng.Shuffle(len(pick), func(a, b int) { pick[a], pick[b] = pick[b], pick[a] })
	pick = pick[:n]
	if slices.IsSorted(pick) && (n == len(cand) || pick[n-1] == cand[n-1]) {
		// In order and a prefix of the window: a Prefix state.
		return State{}, false
	}
	s := State{Kind: Reorder, Durable: cand[0], To: end}
	for _, op := range pick {
		s.Tail = append(s.Tail, Piece{Op: op})
		s.From = max(s.From, op+1)
	}
	return s, true
}

// sampleTorn draws a write of the epoch that covers at least two sectors of
// a sector size, and a proper, non-empty subset of those sectors. With
// garbage, any write, and any proper subset (the empty one too): the
// others get garbage.
func sampleTorn(rng *rand.Rand, ops []Op, w []int, end int, sizes []int, garbage bool) (State, bool) {
	type cand struct{ op, size int }
	var cands []cand
	for _, i := range w {
		op := ops[i]
		if op.Kind != OpWrite || len(op.Data) == 0 {
			continue
		}
		for _, size := range sizes {
			first, last := op.Off/int64(size), (op.Off+int64(len(op.Data))-1)/int64(size)
			if last > first || garbage {
				cands = append(cands, cand{i, size})
			}
		}
	}
	if len(cands) == 0 {
		return State{}, false
	}
	c := cands[rng.IntN(len(cands))]
	op := ops[c.op]
	first, last := op.Off/int64(c.size), (op.Off+int64(len(op.Data))-1)/int64(c.size)
	count := int(last - first + 1)
	sectors := []int64{}
	for (len(sectors) == 0 && !garbage) || len(sectors) == count {
		sectors = sectors[:0]
		for j := range count {
			if rng.IntN(2) == 0 {
				sectors = append(sectors, first+int64(j))
			}
		}
	}
	kind := Torn
	if garbage {
		kind = Garbage
	}
	return State{
		Kind: kind, From: c.op + 1, To: end, Durable: c.op,
		Tail: []Piece{{Op: c.op, SectorSize: c.size, Sectors: sectors, Garbage: garbage}},
	}, true
}
