package recovery_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	corev1 "k8s.io/api/core/v1"

	"github.com/boltinformer/boltinformer"
	"github.com/boltinformer/boltinformer/recovery"
	"github.com/boltinformer/boltinformer/recovery/crashtest"
	"github.com/boltinformer/boltinformer/store"
)

// outcome is what boltinformer.Open and NewInformer must do with a
// damaged file.
type outcome int

const (
	// quarantined: FailOnCorrupt returns ErrCorrupt and leaves the file
	// alone; the default renames it aside, byte-identical, and starts cold.
	quarantined outcome = iota
	// refused: both policies return the error and leave the file alone
	// (not ours to touch: foreign, newer format, locked, unreadable).
	refused
	// coldStart: the file opens, the informer starts cold because of a
	// damaged record, and the first list replaces the old data.
	coldStart
	// fresh: the file opens as a new one (an empty file).
	fresh
	// detected: quarantined, coldStart or warmDamaged, whichever catches
	// it first.
	detected
	// warmDamaged: the file opens, the informer starts warm and serves
	// the records that decode, the damaged one left out (with a copy of
	// the file kept); the relist replaces it. FailOnCorrupt: the error.
	warmDamaged
)

func (o outcome) String() string {
	return [...]string{"quarantined", "refused", "cold-start", "fresh", "detected", "warm-damaged"}[o]
}

const pageSize = 4096 // bbolt's default on this platform: os.Getpagesize()

// pristine writes a valid cache file of the small history at rv 400 and
// returns its bytes.
func pristine(t *testing.T, path string) []byte {
	t.Helper()
	h := smallHistory(21)
	src := h.Source(0, 400)
	a := startAgent(t, path, src, nil)
	a.caughtUp(t, src)
	waitFor(t, "the first commit", func() bool { return a.saved() == "400" })
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	return readFile(t, path)
}

// leafPages returns the ids of the file's leaf pages that hold object
// keys.
func leafPages(b []byte) []int {
	var out []int
	for id := 2; (id+1)*pageSize <= len(b); id++ {
		p := b[id*pageSize : (id+1)*pageSize]
		if binary.NativeEndian.Uint64(p[0:8]) != uint64(id) || binary.NativeEndian.Uint16(p[8:10])&0x02 == 0 {
			continue
		}
		if bytes.Contains(p, []byte("/pod-")) {
			out = append(out, id)
		}
	}
	return out
}

// header builds a boltinformer meta record (store/schema.go) with the
// given version.
func header(version uint32) []byte {
	b := make([]byte, 24)
	binary.BigEndian.PutUint32(b[0:4], 0x42494E46)
	binary.BigEndian.PutUint32(b[4:8], version)
	binary.BigEndian.PutUint64(b[8:16], uint64(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()))
	h := fnv.New64a()
	_, _ = h.Write(b[:16])
	binary.BigEndian.PutUint64(b[16:24], h.Sum64())
	return b
}

// boltUpdate changes the file with bbolt directly.
func boltUpdate(t *testing.T, path string, fn func(tx *bolt.Tx) error) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(fn); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

func objectsBucket(tx *bolt.Tx) *bolt.Bucket {
	return tx.Bucket([]byte("informers")).Bucket([]byte(informerName)).Bucket([]byte("objects"))
}

type damage struct {
	name string
	// apply damages the file at path, which holds the pristine bytes.
	apply func(t *testing.T, path string, b []byte)
	want  outcome
	// verify opens with Options.Verify (the full check).
	verify bool
}

var damages = []damage{
	{name: "truncated-to-1k", want: quarantined, apply: func(t *testing.T, path string, b []byte) {
		must(t, os.Truncate(path, 1000))
	}},
	{name: "truncated-to-3-pages", want: quarantined, apply: func(t *testing.T, path string, b []byte) {
		must(t, os.Truncate(path, 3*pageSize))
	}},
	{name: "truncated-half", want: quarantined, apply: func(t *testing.T, path string, b []byte) {
		hwm := int64(binary.NativeEndian.Uint64(b[pageSize+48:]))
		must(t, os.Truncate(path, hwm*pageSize/2))
	}},
	{name: "zeroed-meta-pages", want: quarantined, apply: func(t *testing.T, path string, b []byte) {
		writeAt(t, path, make([]byte, 2*pageSize), 0)
	}},
	{name: "zeroed-object-page", want: quarantined, apply: func(t *testing.T, path string, b []byte) {
		ids := leafPages(b)
		if len(ids) == 0 {
			t.Fatal("no object leaf page")
		}
		writeAt(t, path, make([]byte, pageSize), int64(ids[len(ids)/2])*pageSize)
	}},
	{name: "random-bytes", want: quarantined, apply: func(t *testing.T, path string, b []byte) {
		r := rand.New(rand.NewPCG(1, 2))
		junk := make([]byte, 64<<10)
		for i := range junk {
			junk[i] = byte(r.Uint32())
		}
		must(t, os.WriteFile(path, junk, 0o600))
	}},
	{name: "foreign-bbolt-file", want: refused, apply: func(t *testing.T, path string, b []byte) {
		must(t, os.Remove(path))
		boltUpdate(t, path, func(tx *bolt.Tx) error {
			w, err := tx.CreateBucket([]byte("widgets"))
			if err != nil {
				return err
			}
			return w.Put([]byte("w1"), []byte("another program's data"))
		})
	}},
	{name: "newer-format-version", want: refused, apply: func(t *testing.T, path string, b []byte) {
		boltUpdate(t, path, func(tx *bolt.Tx) error {
			return tx.Bucket([]byte("meta")).Put([]byte("header"), header(store.FormatVersion+1))
		})
	}},
	{name: "empty-file", want: fresh, apply: func(t *testing.T, path string, b []byte) {
		must(t, os.Truncate(path, 0))
	}},
	{name: "garbage-record", want: warmDamaged, apply: func(t *testing.T, path string, b []byte) {
		boltUpdate(t, path, func(tx *bolt.Tx) error {
			return objectsBucket(tx).Put([]byte("ns-0/pod-000000"), []byte("\x99garbage, not a msgpack record"))
		})
	}},
	{name: "garbage-record-verified", want: quarantined, verify: true, apply: func(t *testing.T, path string, b []byte) {
		boltUpdate(t, path, func(tx *bolt.Tx) error {
			return objectsBucket(tx).Put([]byte("ns-1/pod-000001"), bytes.Repeat([]byte{0xff}, 300))
		})
	}},
	{name: "bad-payload-checksum", want: warmDamaged, apply: func(t *testing.T, path string, b []byte) {
		boltUpdate(t, path, func(tx *bolt.Tx) error {
			objs := objectsBucket(tx)
			k, v := objs.Cursor().First()
			v = append([]byte(nil), v...)
			v[len(v)-10] ^= 0x40 // inside the payload
			return objs.Put(append([]byte(nil), k...), v)
		})
	}},
	{name: "garbage-state-record", want: coldStart, apply: func(t *testing.T, path string, b []byte) {
		boltUpdate(t, path, func(tx *bolt.Tx) error {
			return tx.Bucket([]byte("informers")).Bucket([]byte(informerName)).Put([]byte("state"), []byte{0xc1, 0xc1})
		})
	}},
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func writeAt(t *testing.T, path string, b []byte, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
	must(t, f.Close())
}

// TestDamagedFiles damages a valid cache file in each way and opens it end
// to end, boltinformer.Open then NewInformer and Run, with both policies.
// Nothing panics; FailOnCorrupt returns a typed error and leaves the file
// as it was; the default quarantines it byte-identical (or, for a damaged
// record, starts cold over it) and the informer converges from the Source;
// foreign and newer files are refused under both policies and untouched.
func TestDamagedFiles(t *testing.T) {
	for _, d := range damages {
		t.Run(d.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "cache.db")
			good := pristine(t, path)
			d.apply(t, path, good)
			damaged := readFile(t, path)
			for _, failOnCorrupt := range []bool{true, false} {
				must(t, os.WriteFile(path, damaged, 0o600))
				openDamaged(t, dir, path, damaged, d.want, failOnCorrupt, d.verify)
				removeQuarantined(t, dir)
			}
		})
	}
}

// TestFlippedBytes flips bytes in the object leaf pages of a valid file
// (many seeds) and opens it end to end. The damage may be caught by the
// page verifier (quarantine), by a record checksum (cold start), by the
// full check, or not at all when it hits bytes nobody reads; whatever
// happens, nothing panics and the informer converges from the Source.
func TestFlippedBytes(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cache.db")
	good := pristine(t, path)
	leaves := leafPages(good)
	counts := map[string]int{}
	seeds := uint64(envInt(t, "BOLTINFORMER_FLIP_SEEDS", 40))
	for seed := uint64(0); seed < seeds; seed++ {
		r := rand.New(rand.NewPCG(seed, 99))
		b := append([]byte(nil), good...)
		flips := 1 + r.IntN(16)
		if seed%2 == 1 {
			flips = 1 // a single bit: the hardest to notice
		}
		for n := flips; n > 0; n-- {
			id := leaves[r.IntN(len(leaves))]
			off := id*pageSize + r.IntN(pageSize)
			b[off] ^= byte(1 << r.IntN(8))
		}
		must(t, os.WriteFile(path, b, 0o600))
		what := openDamaged(t, dir, path, b, detected, false, seed%2 == 0)
		counts[what]++
		removeQuarantined(t, dir)
	}
	t.Logf("%d damaged files: %v", seeds, counts)
}

// openDamaged opens the damaged file at path with the given policy and
// checks the outcome. It returns what happened.
func openDamaged(t *testing.T, dir, path string, damaged []byte, want outcome, failOnCorrupt, verify bool) string {
	t.Helper()
	h := smallHistory(21)
	src := h.Source(0, 600) // the server moved on while the agent was down
	db, err := boltinformer.Open(path, &boltinformer.Options{FailOnCorrupt: failOnCorrupt, Verify: verify, LockTimeout: -1})
	untouched := func() {
		t.Helper()
		if !bytes.Equal(readFile(t, path), damaged) {
			t.Fatalf("policy FailOnCorrupt=%t: the damaged file was changed", failOnCorrupt)
		}
		if q, _ := crashtest.Quarantined(dir); len(q) > 0 {
			t.Fatalf("quarantined %v", q)
		}
	}
	if err != nil {
		var ve *store.VersionError
		switch {
		case want == refused && (errors.Is(err, store.ErrForeign) || errors.As(err, &ve)):
		case (want == quarantined || want == detected) && failOnCorrupt && errors.Is(err, store.ErrCorrupt):
		default:
			t.Fatalf("Open (FailOnCorrupt=%t, want %s): %v", failOnCorrupt, want, err)
		}
		untouched()
		return "refused"
	}
	defer db.Close()
	if want == refused || (want == quarantined && failOnCorrupt) {
		t.Fatalf("Open (FailOnCorrupt=%t) succeeded, want %s", failOnCorrupt, want)
	}
	rep := db.Recovery()
	what := "opened"
	if rep.Quarantined != "" {
		what = "quarantined"
		if want != quarantined && want != detected {
			t.Fatalf("quarantined (%v), want %s", rep.Cause, want)
		}
		if !errors.Is(rep.Cause, recovery.ErrQuarantined) || !errors.Is(rep.Cause, store.ErrCorrupt) {
			t.Fatalf("Report.Cause = %v", rep.Cause)
		}
		if !strings.HasPrefix(filepath.Base(rep.Quarantined), "cache.db.corrupt-") {
			t.Fatalf("quarantined as %s", rep.Quarantined)
		}
		if got := readFile(t, rep.Quarantined); sha256.Sum256(got) != sha256.Sum256(damaged) {
			t.Fatal("the quarantined file is not the damaged file")
		}
	} else if want == quarantined {
		t.Fatalf("not quarantined, want %s", want)
	}
	inf, err := db.NewInformer(informerName, src, &corev1.Pod{}, 0, crashIndexers(true), &boltinformer.InformerOptions{Resource: "pods"})
	if err != nil {
		// FailOnCorrupt: a damaged record found when loading is the error.
		if failOnCorrupt && (want == coldStart || want == warmDamaged || want == detected) && errors.Is(err, store.ErrCorrupt) {
			must(t, db.Close())
			untouched()
			return "refused"
		}
		t.Fatalf("NewInformer (FailOnCorrupt=%t, want %s): %v", failOnCorrupt, want, err)
	}
	dec := inf.Decision()
	switch {
	case rep.Quarantined != "" || want == fresh:
		if dec.Warm || dec.Reason != recovery.ReasonNoState {
			t.Fatalf("decision %+v on a new file", dec)
		}
	case dec.Reason == recovery.ReasonCorrupt:
		what = "cold-start"
		if want != coldStart && want != detected || failOnCorrupt {
			t.Fatalf("cold start (FailOnCorrupt=%t) over a damaged record (%s), want %s", failOnCorrupt, dec.Detail, want)
		}
		// The cold start deletes the damaged record: a copy of the file
		// is kept first.
		q, err := crashtest.Quarantined(dir)
		must(t, err)
		if len(q) != 1 || !strings.Contains(dec.Detail, q[0]) {
			t.Fatalf("copies %v, decision %q", q, dec.Detail)
		}
		sameContent(t, q[0], damaged)
	case want == coldStart:
		t.Fatalf("decision %+v (FailOnCorrupt=%t), want a cold start over the damaged record", dec, failOnCorrupt)
	case dec.Warm && inf.Health().Undecodable > 0:
		what = "warm-damaged"
		if want != warmDamaged && want != detected || failOnCorrupt {
			t.Fatalf("warm (FailOnCorrupt=%t) without the damaged record (%s), want %s", failOnCorrupt, dec.Detail, want)
		}
		// The relist rewrites or deletes the damaged record: a copy of
		// the file is kept first, and the records that decode are served.
		// (The background fill may be keeping it as the test looks: it
		// gets its name once complete.)
		var q []string
		waitFor(t, "the copy of the damaged file", func() bool {
			var err error
			q, err = crashtest.Quarantined(dir)
			must(t, err)
			return len(q) == 1 && !strings.HasSuffix(q[0], ".tmp")
		})
		sameContent(t, q[0], damaged)
		if h := inf.Health(); len(inf.GetIndexer().List()) != h.Objects-h.Undecodable {
			t.Fatalf("List serves %d objects, health %+v", len(inf.GetIndexer().List()), h)
		}
	case want == warmDamaged:
		t.Fatalf("decision %+v (FailOnCorrupt=%t), health %+v: want a warm start without the damaged record", dec, failOnCorrupt, inf.Health())
	case dec.Warm:
		what = "warm"
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); inf.RunWithContext(ctx) }()
	a := &agent{db: db, inf: inf, cancel: cancel, done: done}
	defer func() { _ = a.stop() }()
	a.caughtUp(t, src)
	waitFor(t, "the commit of the converged state", func() bool { return a.saved() == src.ResourceVersion() })
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	vopts := &crashtest.VerifyOptions{Indexers: crashIndexers(true)}
	if _, err := crashtest.VerifyFile(path, informerName, h.StateAt, vopts); err != nil {
		if want != detected || what != "warm" {
			t.Fatalf("%s, then converged: the file: %v", what, err)
		}
		// Damage nobody read, in derived state: the index buckets.
		// RepairIndexes rebuilds them from the records.
		sdb, oerr := store.Open(path, nil)
		if oerr != nil {
			t.Fatal(oerr)
		}
		rep, rerr := sdb.RepairIndexes(informerName)
		must(t, errors.Join(rerr, sdb.Close()))
		if _, err2 := crashtest.VerifyFile(path, informerName, h.StateAt, vopts); err2 != nil {
			t.Fatalf("warm over undetected damage (%v); after RepairIndexes (%+v): %v", err, rep, err2)
		}
		what = "warm-repaired"
	}
	return what
}

// sameContent checks that the bbolt file at path holds the same buckets,
// keys and values as the file image want.
func sameContent(t *testing.T, path string, want []byte) {
	t.Helper()
	img := filepath.Join(t.TempDir(), "want.db")
	must(t, os.WriteFile(img, want, 0o600))
	dump := func(p string) map[string]string {
		db, err := bolt.Open(p, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
		must(t, err)
		defer db.Close()
		out := map[string]string{}
		var walk func(prefix string, b *bolt.Bucket) error
		walk = func(prefix string, b *bolt.Bucket) error {
			return b.ForEach(func(k, v []byte) error {
				if v == nil {
					return walk(prefix+string(k)+"/", b.Bucket(k))
				}
				out[prefix+string(k)] = string(v)
				return nil
			})
		}
		must(t, db.View(func(tx *bolt.Tx) error {
			return tx.ForEach(func(name []byte, b *bolt.Bucket) error { return walk(string(name)+"/", b) })
		}))
		return out
	}
	got, exp := dump(path), dump(img)
	if len(got) != len(exp) {
		t.Fatalf("the copy %s holds %d values, the damaged file %d", path, len(got), len(exp))
	}
	for k, v := range exp {
		if got[k] != v {
			t.Fatalf("the copy %s differs from the damaged file at %q", path, k)
		}
	}
}

func removeQuarantined(t *testing.T, dir string) {
	t.Helper()
	q, err := crashtest.Quarantined(dir)
	must(t, err)
	for _, p := range q {
		must(t, os.Remove(p))
	}
}

// TestLockedFile opens a file that another DB holds: Open returns
// ErrLocked after LockTimeout, under both policies, without touching or
// quarantining the file, and the holder goes on working.
func TestLockedFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cache.db")
	h := smallHistory(22)
	src := h.Source(0, 100)
	a := startAgent(t, path, src, nil)
	a.caughtUp(t, src)
	waitFor(t, "the first commit", func() bool { return a.saved() == "100" })
	for _, failOnCorrupt := range []bool{false, true} {
		done := make(chan error, 1)
		go func() {
			db, err := boltinformer.Open(path, &boltinformer.Options{FailOnCorrupt: failOnCorrupt, LockTimeout: 200 * time.Millisecond})
			if err == nil {
				_ = db.Close()
			}
			done <- err
		}()
		var err error
		select {
		case err = <-done:
		case <-time.After(waitBound):
			t.Fatal("Open of a locked file hangs")
		}
		if !errors.Is(err, store.ErrLocked) || errors.Is(err, store.ErrCorrupt) {
			t.Fatalf("Open of a locked file (FailOnCorrupt=%t): %v, want ErrLocked", failOnCorrupt, err)
		}
	}
	if q, _ := crashtest.Quarantined(dir); len(q) > 0 {
		t.Fatalf("quarantined %v", q)
	}
	feed(t, h, src, 100, 200)
	a.caughtUp(t, src)
	waitFor(t, "a commit by the holder", func() bool { return a.saved() == "200" })
}
