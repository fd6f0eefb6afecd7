package store_test

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/boltinformer/boltinformer/store"
)

// mustCheck fails the test unless Check finds the file consistent.
func mustCheck(t *testing.T, db *store.DB) {
	t.Helper()
	probs, err := db.Check(nil)
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	for _, p := range probs {
		t.Errorf("Check: %v", p)
	}
}

func state(t *testing.T, db *store.DB, inf string) *store.State {
	t.Helper()
	var st *store.State
	if err := db.View(func(tx *store.Tx) (err error) {
		st, err = tx.State(inf)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return st
}

func keys(t *testing.T, db *store.DB, inf string) []string {
	t.Helper()
	var out []string
	if err := db.View(func(tx *store.Tx) error {
		return tx.ForEach(inf, func(key string, _ *store.Record) error {
			out = append(out, key)
			return nil
		})
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func indexKeys(t *testing.T, db *store.DB, inf, index, value string) []string {
	t.Helper()
	var out []string
	_ = db.View(func(tx *store.Tx) error {
		out = tx.IndexKeys(inf, index, value)
		return nil
	})
	return out
}

func TestCommitRoundTrip(t *testing.T) {
	clk := fakeClock()
	db := openT(t, tempPath(t), &store.Options{NoSync: true, Clock: clk})
	b := podBatch(t, "pods", 0, 6, "100")
	want := map[string]*store.Record{}
	for _, op := range b.Ops {
		cp := *op.Record
		want[op.Key] = &cp
	}
	clk.Step(time.Minute)
	if err := db.Commit(b); err != nil {
		t.Fatal(err)
	}
	// The store fills in the state it wrote.
	if b.State.Objects != 6 || !b.State.LastCommit.Equal(epoch.Add(time.Minute)) || !b.State.Created.Equal(b.State.LastCommit) {
		t.Fatalf("batch state after commit: %+v", b.State)
	}
	err := db.View(func(tx *store.Tx) error {
		if got := tx.Informers(); !reflect.DeepEqual(got, []string{"pods"}) {
			t.Errorf("Informers %v", got)
		}
		for k, w := range want {
			r, err := tx.Get("pods", k)
			if err != nil {
				return err
			}
			if _, err := store.EncodeRecord(k, w); err != nil { // sets w.Checksum
				return err
			}
			if !reflect.DeepEqual(r, w) {
				t.Errorf("%s: got %+v\nwant %+v", k, r, w)
			}
			if raw := tx.GetRaw("pods", k); raw == nil {
				t.Errorf("GetRaw(%s) = nil", k)
			}
		}
		if r, err := tx.Get("pods", "ns-0/absent"); r != nil || err != nil {
			t.Errorf("Get(absent) = %v, %v", r, err)
		}
		if r, err := tx.Get("nope", "ns-0/pod-000000"); r != nil || err != nil {
			t.Errorf("Get(absent informer) = %v, %v", r, err)
		}
		if got := tx.Indexes("pods"); !reflect.DeepEqual(got, []string{"namespace", "node"}) {
			t.Errorf("Indexes %v", got)
		}
		if !tx.HasIndex("pods", "node") || tx.HasIndex("pods", "zone") || tx.HasIndex("nope", "node") {
			t.Error("HasIndex")
		}
		if got := tx.IndexKeys("pods", "node", "node-1"); !reflect.DeepEqual(got, []string{"ns-0/pod-000003", "ns-1/pod-000001", "ns-2/pod-000005"}) {
			t.Errorf("IndexKeys node-1: %v", got)
		}
		if got := tx.IndexKeys("pods", "node", "node-"); got != nil {
			t.Errorf("IndexKeys of a prefix of a value: %v", got)
		}
		vals, err := tx.IndexValues("pods", "namespace")
		if err != nil || !reflect.DeepEqual(vals, map[string]int{"ns-0": 2, "ns-1": 2, "ns-2": 2}) {
			t.Errorf("IndexValues %v %v", vals, err)
		}
		st, err := tx.State("pods")
		if err != nil {
			return err
		}
		wantSt := &store.State{
			ResourceVersion: "100", Synced: true, ClusterID: "cluster-1", Resource: "/v1, Resource=pods",
			Indexes: []string{"namespace", "node"}, Objects: 6,
		}
		// msgpack decodes times in the local zone: compare instants. A synced
		// state written with a zero LastSync is stamped with the commit time.
		if !st.Created.Equal(epoch.Add(time.Minute)) || !st.LastCommit.Equal(epoch.Add(time.Minute)) || !st.LastSync.Equal(epoch.Add(time.Minute)) {
			t.Errorf("state times %v %v %v", st.Created, st.LastCommit, st.LastSync)
		}
		st.Created, st.LastCommit, st.LastSync = time.Time{}, time.Time{}, time.Time{}
		if !reflect.DeepEqual(st, wantSt) {
			t.Errorf("state %+v\nwant %+v", st, wantSt)
		}
		if st, err := tx.State("nope"); st != nil || err != nil {
			t.Errorf("State(absent) = %v, %v", st, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := keys(t, db, "pods"); !sort.StringsAreSorted(got) || len(got) != 6 {
		t.Errorf("ForEach order %v", got)
	}
	mustCheck(t, db)

	// Update: a pod moves to another node, another is deleted; the state's
	// count follows and Created is kept.
	clk.Step(time.Minute)
	key, r := podRecord(t, 3, "101")
	r.SetIndexed(map[string][]string{"namespace": {"ns-0"}, "node": {"node-9"}})
	b2 := &store.Batch{Informer: "pods", Ops: []store.Op{
		{Key: key, Record: r},
		{Key: "ns-1/pod-000001"},
		{Key: "ns-1/never-existed"},
	}, State: &store.State{ResourceVersion: "101", Indexes: []string{"node", "namespace"}}}
	if err := db.Commit(b2); err != nil {
		t.Fatal(err)
	}
	if got := indexKeys(t, db, "pods", "node", "node-1"); !reflect.DeepEqual(got, []string{"ns-2/pod-000005"}) {
		t.Errorf("node-1 after update: %v", got)
	}
	if got := indexKeys(t, db, "pods", "node", "node-9"); !reflect.DeepEqual(got, []string{key}) {
		t.Errorf("node-9 after update: %v", got)
	}
	st := state(t, db, "pods")
	if st.Objects != 5 || st.ResourceVersion != "101" || !st.Created.Equal(epoch.Add(time.Minute)) || !st.LastCommit.Equal(epoch.Add(2*time.Minute)) {
		t.Errorf("state after update: %+v", st)
	}
	mustCheck(t, db)
}

func TestCommitSeveralInformersAtomically(t *testing.T) {
	db := openT(t, tempPath(t), nil)
	bad := podBatch(t, "b", 0, 1, "1")
	bad.Ops = append(bad.Ops, store.Op{Key: "ns/unencodable", Err: errors.New("no encoding")})
	err := db.Commit(podBatch(t, "a", 0, 2, "1"), bad)
	var be *store.BatchError
	if !errors.As(err, &be) || be.Informer != "b" || be.Key != "ns/unencodable" {
		t.Fatalf("Commit with an op its source could not encode: %v", err)
	}
	if got := keys(t, db, "a"); len(got) != 0 {
		t.Fatalf("a batch was written although its transaction failed: %v", got)
	}
	if err := db.Commit(podBatch(t, "a", 0, 2, "1"), podBatch(t, "b", 2, 5, "9")); err != nil {
		t.Fatal(err)
	}
	if state(t, db, "a").Objects != 2 || state(t, db, "b").Objects != 3 {
		t.Fatal("counts")
	}
	mustCheck(t, db)
}

// TestAnyKeyIsStored: every object key and index value is stored (format
// version 4): those bbolt cannot hold as they are under a hash, with the
// real key in the record. Reads, index lookups, Check, the envelope
// snapshot and RepairIndexes see the real keys and values.
func TestAnyKeyIsStored(t *testing.T) {
	db := openT(t, tempPath(t), nil)
	_, r := podRecord(t, 1, "1")
	long := strings.Repeat("k", 16<<10+1)
	longValue := strings.Repeat("v", 16<<10)
	all := []string{"", "a\x00b", "\x00", long, "\xffraw", "\xff", "ns/plain", strings.Repeat("m", 16<<10)}
	var ops []store.Op
	for i, key := range all {
		rec := *r
		rec.UID = fmt.Sprint("uid-", i)
		vals := []string{fmt.Sprint("v", i%2)}
		if i%3 == 0 {
			vals = append(vals, longValue+fmt.Sprint(i), "\xffv")
		}
		rec.Indexed = nil // not r's
		rec.SetIndexed(map[string][]string{"x": vals})
		ops = append(ops, store.Op{Key: key, Record: &rec})
	}
	b := &store.Batch{Informer: "pods", Ops: ops, State: &store.State{ResourceVersion: "1", Indexes: []string{"x"}}}
	if err := db.Commit(b); err != nil {
		t.Fatal(err)
	}
	mustCheck(t, db)
	got := keys(t, db, "pods")
	want := append([]string(nil), all...)
	sort.Strings(want)
	sort.Strings(got)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("keys %.40q, want %.40q", got, want)
	}
	err := db.View(func(tx *store.Tx) error {
		for i, key := range all {
			rec, err := tx.Get("pods", key)
			if err != nil || rec == nil || rec.UID != fmt.Sprint("uid-", i) {
				t.Errorf("Get(%.20q) = %+v, %v", key, rec, err)
			}
		}
		if got := tx.IndexKeys("pods", "x", longValue+"0"); !reflect.DeepEqual(got, []string{""}) {
			t.Errorf("IndexKeys(long value) = %.20q", got)
		}
		if got := tx.IndexKeys("pods", "x", "\xffv"); len(got) != 3 {
			t.Errorf("IndexKeys(\\xffv) = %.20q", got)
		}
		vals, err := tx.IndexValues("pods", "x")
		if err != nil || vals["v0"] != 4 || vals["v1"] != 4 || vals["\xffv"] != 3 || vals[longValue+"3"] != 1 {
			t.Errorf("IndexValues: %d values, %v", len(vals), err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Updates and deletes find the escaped records and their entries.
	up := *r
	up.UID, up.Indexed = "uid-0", nil
	up.SetIndexed(map[string][]string{"x": {"moved"}})
	if err := db.Commit(&store.Batch{Informer: "pods", Ops: []store.Op{{Key: ""}, {Key: long, Record: &up}}, State: &store.State{ResourceVersion: "2", Indexes: []string{"x"}}}); err != nil {
		t.Fatal(err)
	}
	mustCheck(t, db)
	if got := indexKeys(t, db, "pods", "x", "moved"); !reflect.DeepEqual(got, []string{long}) {
		t.Errorf("moved: %.20q", got)
	}
	if got := indexKeys(t, db, "pods", "x", longValue+"0"); len(got) != 0 {
		t.Errorf("the deleted key's long value still has entries: %.20q", got)
	}
	if err := db.WriteSnapshot("pods"); err != nil {
		t.Fatal(err)
	}
	mustCheck(t, db)
	err = db.View(func(tx *store.Tx) error {
		sn, err := tx.Snapshot("pods")
		if err != nil {
			return err
		}
		if len(sn.Keys) != len(all)-1 {
			t.Errorf("snapshot of %d keys", len(sn.Keys))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.RepairIndexes("pods"); err != nil {
		t.Fatal(err)
	}
	mustCheck(t, db)
}

func TestInvalidNames(t *testing.T) {
	db := openT(t, tempPath(t), nil)
	_, r := podRecord(t, 1, "1")
	for _, name := range []string{"", "a\x00b", strings.Repeat("n", 1025)} {
		if err := db.Commit(&store.Batch{Informer: name}); !errors.Is(err, store.ErrInvalidName) {
			t.Errorf("informer %.20q: %v", name, err)
		}
		bad := *r
		bad.Indexed = []store.IndexValues{{Index: name, Values: []string{"v"}}}
		if err := db.Commit(&store.Batch{Informer: "pods", Ops: []store.Op{{Key: "k", Record: &bad}}}); !errors.Is(err, store.ErrInvalidName) {
			t.Errorf("index %.20q: %v", name, err)
		}
	}
	if got := keys(t, db, "pods"); len(got) != 0 {
		t.Fatalf("rejected commits left %v", got)
	}
	// An index value may hold NUL bytes: entries split at the last one.
	odd := *r
	odd.Indexed = []store.IndexValues{{Index: "x", Values: []string{"a\x00b", "a"}}}
	if err := db.Commit(&store.Batch{Informer: "pods", Ops: []store.Op{{Key: "k", Record: &odd}, {Key: "k2", Record: r}}}); err != nil {
		t.Fatal(err)
	}
	if got := indexKeys(t, db, "pods", "x", "a\x00b"); !reflect.DeepEqual(got, []string{"k"}) {
		t.Errorf("value with NUL: %v", got)
	}
	if got := indexKeys(t, db, "pods", "x", "a"); !reflect.DeepEqual(got, []string{"k"}) {
		t.Errorf("value a: %v", got)
	}
	mustCheck(t, db)
}

func TestReset(t *testing.T) {
	clk := fakeClock()
	db := openT(t, tempPath(t), &store.Options{NoSync: true, Clock: clk})
	if err := db.Commit(podBatch(t, "pods", 0, 5, "10")); err != nil {
		t.Fatal(err)
	}
	created := state(t, db, "pods").Created
	clk.Step(time.Hour)
	b := podBatch(t, "pods", 3, 7, "20")
	b.Reset = true
	for i := range b.Ops {
		b.Ops[i].Record.SetIndexed(map[string][]string{"zone": {"z"}})
	}
	b.State.Indexes = []string{"zone"}
	if err := db.Commit(b); err != nil {
		t.Fatal(err)
	}
	if got := keys(t, db, "pods"); len(got) != 4 {
		t.Fatalf("after Reset: %v", got)
	}
	st := state(t, db, "pods")
	if st.Objects != 4 || st.ResourceVersion != "20" || !st.Created.Equal(created) {
		t.Fatalf("state after Reset: %+v (created %v)", st, created)
	}
	_ = db.View(func(tx *store.Tx) error {
		if got := tx.Indexes("pods"); !reflect.DeepEqual(got, []string{"zone"}) {
			t.Errorf("indexes after Reset: %v", got)
		}
		return nil
	})
	mustCheck(t, db)
	// Reset of an informer that has nothing yet.
	if err := db.Commit(&store.Batch{Informer: "fresh", Reset: true, State: &store.State{}}); err != nil {
		t.Fatal(err)
	}
	if st := state(t, db, "fresh"); st == nil || st.Objects != 0 {
		t.Fatalf("fresh: %+v", st)
	}
}

func TestDropIndexes(t *testing.T) {
	db := openT(t, tempPath(t), nil)
	if err := db.Commit(podBatch(t, "pods", 0, 4, "1")); err != nil {
		t.Fatal(err)
	}
	b := &store.Batch{Informer: "pods", DropIndexes: []string{"node", "never-existed"},
		State: &store.State{ResourceVersion: "2", Indexes: []string{"namespace"}}}
	if err := db.Commit(b); err != nil {
		t.Fatal(err)
	}
	_ = db.View(func(tx *store.Tx) error {
		if got := tx.Indexes("pods"); !reflect.DeepEqual(got, []string{"namespace"}) {
			t.Errorf("indexes %v", got)
		}
		return nil
	})
	// The records still name the dropped index: Check tolerates it (stale
	// values, removed on the next write), and the next write of a record
	// does not recreate the bucket from the old values.
	mustCheck(t, db)
	key, r := podRecord(t, 1, "3")
	r.SetIndexed(map[string][]string{"namespace": {"ns-1"}})
	if err := db.Commit(&store.Batch{Informer: "pods", Ops: []store.Op{{Key: key, Record: r}}}); err != nil {
		t.Fatal(err)
	}
	_ = db.View(func(tx *store.Tx) error {
		if tx.HasIndex("pods", "node") {
			t.Error("dropped index bucket recreated")
		}
		return nil
	})
	mustCheck(t, db)
}

func TestIndexOnly(t *testing.T) {
	db := openT(t, tempPath(t), nil)
	if err := db.Commit(podBatch(t, "pods", 0, 3, "1")); err != nil {
		t.Fatal(err)
	}
	var before *store.Record
	_ = db.View(func(tx *store.Tx) (err error) {
		before, err = tx.Get("pods", "ns-1/pod-000001")
		return err
	})
	// A backfill: new index values, no payload.
	ops := []store.Op{
		{Key: "ns-1/pod-000001", IndexOnly: true, Record: &store.Record{Indexed: []store.IndexValues{
			{Index: "namespace", Values: []string{"ns-1"}}, {Index: "phase", Values: []string{"Running"}}}}},
		{Key: "ns-9/absent", IndexOnly: true, Record: &store.Record{Indexed: []store.IndexValues{{Index: "phase", Values: []string{"x"}}}}},
		{Key: "ns-0/pod-000000", IndexOnly: true}, // no record: nothing to do
	}
	if err := db.Commit(&store.Batch{Informer: "pods", Ops: ops, State: &store.State{ResourceVersion: "1", Indexes: []string{"namespace", "node", "phase"}}}); err != nil {
		t.Fatal(err)
	}
	var after *store.Record
	_ = db.View(func(tx *store.Tx) (err error) {
		after, err = tx.Get("pods", "ns-1/pod-000001")
		return err
	})
	if string(after.Payload) != string(before.Payload) || after.ResourceVersion != before.ResourceVersion || after.UID != before.UID || after.Codec != before.Codec {
		t.Fatal("IndexOnly changed the payload or metadata")
	}
	if got := after.Values("phase"); !reflect.DeepEqual(got, []string{"Running"}) {
		t.Errorf("phase values %v", got)
	}
	if got := after.Values("node"); got != nil {
		t.Errorf("node values kept: %v", got)
	}
	if got := indexKeys(t, db, "pods", "node", "node-1"); len(got) != 0 {
		t.Errorf("node entries of the reindexed object left: %v", got)
	}
	if got := indexKeys(t, db, "pods", "phase", "Running"); !reflect.DeepEqual(got, []string{"ns-1/pod-000001"}) {
		t.Errorf("phase entries %v", got)
	}
	if got := keys(t, db, "pods"); len(got) != 3 {
		t.Errorf("IndexOnly on an absent key created it: %v", got)
	}
	if st := state(t, db, "pods"); st.Objects != 3 {
		t.Errorf("count %d", st.Objects)
	}
	mustCheck(t, db)
}

// TestCountWithoutState: batches without a state record still change the
// number of objects; the next state record must count them.
func TestCountWithoutState(t *testing.T) {
	db := openT(t, tempPath(t), nil)
	if err := db.Commit(podBatch(t, "pods", 0, 3, "1")); err != nil {
		t.Fatal(err)
	}
	b := podBatch(t, "pods", 3, 5, "2")
	b.State = nil
	if err := db.Commit(b); err != nil {
		t.Fatal(err)
	}
	mustCheck(t, db)
	if err := db.Commit(podBatch(t, "pods", 5, 6, "3")); err != nil {
		t.Fatal(err)
	}
	if st := state(t, db, "pods"); st.Objects != 6 {
		t.Errorf("count %d, want 6", st.Objects)
	}
	mustCheck(t, db)
}

// TestDamagedRecordOverwritten: a record that no longer decodes is replaced
// by a put, and its index entries are scrubbed.
func TestDamagedRecordOverwritten(t *testing.T) {
	db := openT(t, tempPath(t), nil)
	if err := db.Commit(podBatch(t, "pods", 0, 3, "1")); err != nil {
		t.Fatal(err)
	}
	putRaw(t, db, "pods", "ns-1/pod-000001", []byte("garbage"))
	key, r := podRecord(t, 1, "2")
	r.SetIndexed(map[string][]string{"node": {"node-7"}})
	if err := db.Commit(&store.Batch{Informer: "pods", Ops: []store.Op{{Key: key, Record: r}}, State: &store.State{ResourceVersion: "2", Indexes: []string{"namespace", "node"}}}); err != nil {
		t.Fatal(err)
	}
	if got := indexKeys(t, db, "pods", "node", "node-1"); len(got) != 0 {
		t.Errorf("stale entries %v", got)
	}
	if got := indexKeys(t, db, "pods", "namespace", "ns-1"); len(got) != 0 {
		t.Errorf("stale entries %v", got)
	}
	if st := state(t, db, "pods"); st.Objects != 3 {
		t.Errorf("count %d", st.Objects)
	}
	mustCheck(t, db)
	// And a delete of a damaged record works as well.
	putRaw(t, db, "pods", "ns-2/pod-000002", []byte{0xc1})
	if err := db.Commit(&store.Batch{Informer: "pods", Ops: []store.Op{{Key: "ns-2/pod-000002"}}, State: &store.State{ResourceVersion: "3", Indexes: []string{"namespace", "node"}}}); err != nil {
		t.Fatal(err)
	}
	if st := state(t, db, "pods"); st.Objects != 2 {
		t.Errorf("count %d", st.Objects)
	}
	mustCheck(t, db)
}

// TestDamagedEscapedRecord: a damaged record under an escaped bucket key
// is overwritten by its key's next write (not taken for another key's),
// and one whose own key cannot be read is found under its bucket key
// (Tx.ForEachRaw) and deleted by that name.
func TestDamagedEscapedRecord(t *testing.T) {
	db := openT(t, tempPath(t), nil)
	long := strings.Repeat("k", 17<<10)
	_, r := podRecord(t, 1, "1")
	other := *r
	st := &store.State{ResourceVersion: "1", Indexes: []string{"namespace", "node"}}
	if err := db.Commit(&store.Batch{Informer: "pods", Ops: []store.Op{{Key: long, Record: r}, {Key: "", Record: &other}}, State: st}); err != nil {
		t.Fatal(err)
	}
	bk := bucketKeyOf(long)
	good := rawAt(t, db, "pods", bk)
	// A flipped byte in the Key field: the layout reads, the key does not
	// hash to the bucket key, the checksum fails.
	bad := bytes.Clone(good)
	i := bytes.Index(bad, []byte(long))
	bad[i+5] ^= 0x01
	putRaw(t, db, "pods", string(bk), bad)
	var found []string
	_ = db.View(func(tx *store.Tx) error {
		return tx.ForEachRaw("pods", func(key string, _ []byte) error {
			found = append(found, key)
			return nil
		})
	})
	if !slices.Contains(found, string(bk)) {
		t.Fatalf("ForEachRaw did not pass the damaged record under its bucket key: %.40q", found)
	}
	if probs, _ := db.Check(nil); len(probs) == 0 {
		t.Fatal("Check found nothing")
	}
	// Rewritten by its key.
	if err := db.Commit(&store.Batch{Informer: "pods", Ops: []store.Op{{Key: long, Record: r}}, State: &store.State{ResourceVersion: "2", Indexes: st.Indexes}}); err != nil {
		t.Fatal(err)
	}
	mustCheck(t, db)
	// Damaged again, then deleted by its bucket key's name.
	putRaw(t, db, "pods", string(bk), bad)
	if err := db.Commit(&store.Batch{Informer: "pods", Ops: []store.Op{{Key: string(bk)}}, State: &store.State{ResourceVersion: "3", Indexes: st.Indexes}}); err != nil {
		t.Fatal(err)
	}
	mustCheck(t, db)
	if got := keys(t, db, "pods"); len(got) != 1 || got[0] != "" {
		t.Fatalf("keys after the delete: %.40q", got)
	}
}

// rawAt is the value stored under the bucket key bk.
func rawAt(t *testing.T, db *store.DB, inf string, bk []byte) []byte {
	t.Helper()
	var out []byte
	_ = db.View(func(tx *store.Tx) error {
		out = bytes.Clone(tx.Bolt().Bucket([]byte("informers")).Bucket([]byte(inf)).Bucket([]byte("objects")).Get(bk))
		return nil
	})
	if out == nil {
		t.Fatalf("nothing under %q", bk)
	}
	return out
}

func TestDeleteInformer(t *testing.T) {
	db := openT(t, tempPath(t), nil)
	if err := db.Commit(podBatch(t, "a", 0, 2, "1"), podBatch(t, "b", 0, 2, "1")); err != nil {
		t.Fatal(err)
	}
	if err := db.DeleteInformer("a"); err != nil {
		t.Fatal(err)
	}
	if err := db.DeleteInformer("absent"); err != nil {
		t.Fatal(err)
	}
	_ = db.View(func(tx *store.Tx) error {
		if got := tx.Informers(); !reflect.DeepEqual(got, []string{"b"}) {
			t.Errorf("Informers %v", got)
		}
		return nil
	})
	// Several in one transaction: a name the file lacks removes nothing.
	if err := db.Commit(podBatch(t, "c", 0, 2, "1")); err != nil {
		t.Fatal(err)
	}
	if err := db.DeleteInformers("b", "absent", "c"); !errors.Is(err, store.ErrNoInformer) {
		t.Fatalf("DeleteInformers with an absent name: %v, want ErrNoInformer", err)
	}
	if err := db.DeleteInformers("b", "c"); err != nil {
		t.Fatal(err)
	}
	_ = db.View(func(tx *store.Tx) error {
		if got := tx.Informers(); len(got) != 0 {
			t.Errorf("Informers %v, want none", got)
		}
		return nil
	})
	if probs, err := db.Check(nil); err != nil || len(probs) > 0 {
		t.Fatalf("check: %v %v", err, probs)
	}
}

func TestBeforeCommitHook(t *testing.T) {
	fail := errors.New("failpoint")
	var calls int
	hookErr := fail
	db := openT(t, tempPath(t), &store.Options{NoSync: true, BeforeCommit: func() error { calls++; return hookErr }})
	if err := db.Commit(podBatch(t, "pods", 0, 2, "1")); !errors.Is(err, fail) {
		t.Fatalf("Commit: %v", err)
	}
	if st := state(t, db, "pods"); st != nil {
		t.Fatalf("an aborted commit left state %+v", st)
	}
	hookErr = nil
	if err := db.Commit(podBatch(t, "pods", 0, 2, "1")); err != nil {
		t.Fatal(err)
	}
	if calls != 2 {
		t.Fatalf("hook called %d times", calls)
	}
	if st := state(t, db, "pods"); st == nil || st.Objects != 2 {
		t.Fatalf("state %+v", st)
	}
}

// TestRawOp: a source may encode records itself (Op.Raw).
func TestRawOp(t *testing.T) {
	db := openT(t, tempPath(t), nil)
	key, r := podRecord(t, 4, "5")
	raw, err := store.EncodeRecord(key, r)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Commit(&store.Batch{Informer: "pods", Ops: []store.Op{{Key: key, Record: r, Raw: raw}}}); err != nil {
		t.Fatal(err)
	}
	_ = db.View(func(tx *store.Tx) error {
		if got := tx.GetRaw("pods", key); string(got) != string(raw) {
			t.Error("raw record differs")
		}
		return nil
	})
}

func TestConcurrentReadersAndWriter(t *testing.T) {
	db := openT(t, tempPath(t), nil)
	done := make(chan error)
	for w := 0; w < 4; w++ {
		go func() {
			var err error
			for i := 0; i < 50 && err == nil; i++ {
				err = db.View(func(tx *store.Tx) error {
					st, err := tx.State("pods")
					if err != nil || st == nil {
						return err
					}
					var n int64
					if err := tx.ForEachRaw("pods", func(string, []byte) error { n++; return nil }); err != nil {
						return err
					}
					if n != st.Objects {
						return fmt.Errorf("state counts %d, transaction sees %d", st.Objects, n)
					}
					return nil
				})
			}
			done <- err
		}()
	}
	for i := 0; i < 20; i++ {
		if err := db.Commit(podBatch(t, "pods", i, i+3, fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	for w := 0; w < 4; w++ {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// putRaw writes bytes straight into an informer's objects bucket.
func putRaw(t *testing.T, db *store.DB, inf, key string, v []byte) {
	t.Helper()
	err := db.Bolt(func(b *bolt.DB) error {
		return b.Update(func(tx *bolt.Tx) error {
			return tx.Bucket([]byte("informers")).Bucket([]byte(inf)).Bucket([]byte("objects")).Put([]byte(key), v)
		})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// lateEncoding hands a batch's records over one op at a time, from another
// goroutine: ready[i] is closed once Ops[i] is final.
type lateEncoding struct {
	ready []chan struct{}
	done  chan struct{}
}

func (e *lateEncoding) Ready(i int) { <-e.ready[i] }
func (e *lateEncoding) Wait()       { <-e.done }

// encodeLate returns b with its records withheld, filled in by a goroutine
// (every third op failed, when fail) while b is committed.
func encodeLate(b *store.Batch, fail bool) (failed []string) {
	recs := make([]*store.Record, len(b.Ops))
	e := &lateEncoding{ready: make([]chan struct{}, len(b.Ops)), done: make(chan struct{})}
	for i := range b.Ops {
		recs[i], b.Ops[i].Record = b.Ops[i].Record, nil
		e.ready[i] = make(chan struct{})
		if fail && i%3 == 1 {
			failed = append(failed, b.Ops[i].Key)
		}
	}
	b.Encoding = e
	go func() {
		defer close(e.done)
		for i := range b.Ops {
			time.Sleep(time.Millisecond / 10)
			if fail && i%3 == 1 {
				b.Ops[i].Err = errors.New("no encoding")
			} else {
				b.Ops[i].Record = recs[i]
			}
			close(e.ready[i])
		}
	}()
	return failed
}

// TestCommitWaitsForEncoding: Commit applies a batch whose records are
// encoded meanwhile (Batch.Encoding) as they become ready; an op its
// source could not encode fails the batch (nothing is written).
func TestCommitWaitsForEncoding(t *testing.T) {
	db := openT(t, tempPath(t), nil)
	b := podBatch(t, "pods", 0, 30, "7")
	encodeLate(b, false)
	if err := db.Commit(b); err != nil {
		t.Fatal(err)
	}
	if got := keys(t, db, "pods"); len(got) != 30 {
		t.Fatalf("%d objects, want 30", len(got))
	}
	b = podBatch(t, "pods", 30, 60, "8")
	failed := encodeLate(b, true)
	var be *store.BatchError
	if err := db.Commit(b); !errors.As(err, &be) || be.Key != failed[0] {
		t.Fatalf("Commit with failed ops %v: %v", failed, err)
	}
	b.Encoding.Wait()
	if got := keys(t, db, "pods"); len(got) != 30 {
		t.Fatalf("%d objects after the failed batch, want 30", len(got))
	}
	if st := state(t, db, "pods"); st.Objects != 30 || st.ResourceVersion != "7" {
		t.Fatalf("state after the failed batch: %+v", st)
	}
	mustCheck(t, db)
}
