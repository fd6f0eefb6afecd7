package store_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/boltinformer/boltinformer/store"
)

// TestReaderGet checks that Reader.Get answers what GetRaw answers for
// every order of asking: ascending runs with gaps of every size (stepping
// and seeking), descending, repeated and random keys, keys absent
// between, before and after the stored ones, keys stored escaped, and
// an informer without objects.
func TestReaderGet(t *testing.T) {
	path := tempPath(t)
	db := openT(t, path, &store.Options{NoSync: true})
	defer db.Close()
	// Every other Pod, so that absent keys lie between stored ones.
	b := podBatch(t, "pods", 0, 0, "1")
	for i := 0; i < 600; i += 2 {
		key, r := podRecord(t, i, "1")
		b.Ops = append(b.Ops, store.Op{Key: key, Record: r})
	}
	// Keys stored escaped (by a hash, not where they sort).
	escaped := []string{strings.Repeat("k", 20000), "ns-1/nul\x00", "\xffmark"}
	for i, key := range escaped {
		_, r := podRecord(t, 1000+i, "1")
		b.Ops = append(b.Ops, store.Op{Key: key, Record: r})
	}
	if err := db.Commit(b); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for i := range 601 {
		keys = append(keys, fmt.Sprintf("ns-%d/pod-%06d", i%3, i))
	}
	keys = append(keys, "", "a", "ns-0/", "ns-9/pod-000000", "zzz", strings.Repeat("k", 20001))
	keys = append(keys, escaped...)
	slices.Sort(keys)
	rng := rand.New(rand.NewPCG(1, 2))
	orders := map[string][]string{
		"ascending":  keys,
		"descending": reversed(keys),
		"repeated":   {keys[5], keys[5], keys[4], keys[5], keys[300], keys[300]},
	}
	for gap := 1; gap <= 40; gap += 3 {
		var run []string
		for i := 0; i < len(keys); i += gap {
			run = append(run, keys[i])
		}
		orders[fmt.Sprintf("gap=%d", gap)] = run
	}
	random := slices.Clone(keys)
	rng.Shuffle(len(random), func(i, j int) { random[i], random[j] = random[j], random[i] })
	orders["random"] = random
	for name, order := range orders {
		t.Run(name, func(t *testing.T) {
			err := db.View(func(tx *store.Tx) error {
				rd := tx.Reader("pods")
				found := 0
				for _, k := range order {
					if got, want := rd.Get(k), tx.GetRaw("pods", k); !bytes.Equal(got, want) || (got == nil) != (want == nil) {
						t.Fatalf("Get(%q): %d bytes (nil %t), GetRaw %d bytes (nil %t)", k, len(got), got == nil, len(want), want == nil)
					}
					if rd.Get(k) != nil {
						found++
					}
				}
				if name == "ascending" && found != 300+len(escaped) {
					t.Fatalf("found %d records, want %d", found, 300+len(escaped))
				}
				if got := tx.Reader("absent").Get(keys[0]); got != nil {
					t.Fatalf("an informer without objects: %d bytes", len(got))
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

func reversed(s []string) []string {
	out := slices.Clone(s)
	slices.Reverse(out)
	return out
}
