package main

import (
	"fmt"
	"sort"
	"strconv"

	"github.com/spf13/cobra"
	bolt "go.etcd.io/bbolt"

	"github.com/boltinformer/boltinformer/store"
)

func (a *app) newStatsCommand() *cobra.Command {
	var p *printFlags
	cmd := &cobra.Command{
		Use:   "stats FILE",
		Short: "Print bbolt statistics: pages by type, free pages, bucket sizes",
		Long: `stats walks the file like bbolt's own stats: the pages up to the high-water
mark by type (meta, freelist, branch, leaf, their overflow pages, free), and
for every bucket its keys, B+tree depth, pages and the bytes allocated and in
use. Each bucket row counts the bucket with everything nested in it; the
informer's own row is "." in BUCKET. It runs bbolt's consistency check on
the way (which also loads the freelist of a read-only file).`,
		Example: `  inspect stats cache.db
  inspect stats cache.db -o wide`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := p.validate(); err != nil {
				return err
			}
			return a.stats(cmd, args[0], p)
		},
	}
	p = addPrintFlags(cmd, formatTable, formatWide, formatJSON, formatYAML)
	return cmd
}

type fileStats struct {
	File     string `json:"file"`
	Size     int64  `json:"size"`
	PageSize int    `json:"pageSize"`
	// Pages is the high-water mark: the pages in use or free; the file may
	// be longer (bbolt grows it ahead).
	Pages          int            `json:"pages"`
	PageTypes      map[string]int `json:"pageTypes"`
	BranchOverflow int            `json:"branchOverflowPages"`
	LeafOverflow   int            `json:"leafOverflowPages"`
	FreelistFree   int            `json:"freelistFreePages"`
	CheckErrors    []string       `json:"checkErrors"`
	Buckets        []bucketStats  `json:"buckets"`
}

type bucketStats struct {
	Informer string           `json:"informer,omitempty"`
	Bucket   string           `json:"bucket"`
	Inline   bool             `json:"inline"`
	Stats    bolt.BucketStats `json:"stats"`
}

func (a *app) stats(cmd *cobra.Command, path string, p *printFlags) error {
	db, err := a.open(path)
	if err != nil {
		return err
	}
	defer db.Close()
	fs := &fileStats{File: path, PageTypes: map[string]int{}, CheckErrors: []string{}, Buckets: []bucketStats{}}
	if fs.Size, err = db.Size(); err != nil {
		return err
	}
	err = db.Bolt(func(bdb *bolt.DB) error {
		return bdb.View(func(tx *bolt.Tx) error {
			for err := range tx.Check() { // loads the freelist: Page and Stats need it
				fs.CheckErrors = append(fs.CheckErrors, err.Error())
			}
			fs.FreelistFree = bdb.Stats().FreePageN
			fs.PageSize = bdb.Info().PageSize
			fs.Pages = int(tx.Size() / int64(fs.PageSize))
			for id := 0; id < fs.Pages; {
				pi, err := tx.Page(id)
				if err != nil {
					return err
				}
				if pi == nil {
					break
				}
				fs.PageTypes[pi.Type]++
				id++
				if pi.Type != "free" {
					id += pi.OverflowCount
					switch pi.Type {
					case "branch":
						fs.BranchOverflow += pi.OverflowCount
					case "leaf":
						fs.LeafOverflow += pi.OverflowCount
					}
				}
			}
			return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
				fs.Buckets = append(fs.Buckets, bucketStats{Bucket: string(name), Inline: b.Root() == 0, Stats: b.Stats()})
				if string(name) != string(bucketInformers) {
					return nil
				}
				return b.ForEachBucket(func(inf []byte) error {
					walkBuckets(fs, string(inf), ".", b.Bucket(inf))
					return nil
				})
			})
		})
	})
	if err != nil {
		return fmt.Errorf("stats of %s: %w", path, err)
	}
	out := cmd.OutOrStdout()
	if p.table() {
		printStats(cmd, fs, p)
	} else if err := writeValue(out, p.output, fs); err != nil {
		return err
	}
	if len(fs.CheckErrors) > 0 {
		return &exitError{code: exitCorrupt, err: store.ErrCorrupt, msg: fmt.Sprintf("bbolt check found %d error(s) in %s; run inspect check", len(fs.CheckErrors), path)}
	}
	return nil
}

// walkBuckets adds the stats of b (at path within informer) and of every
// bucket nested in it.
func walkBuckets(fs *fileStats, informer, path string, b *bolt.Bucket) {
	fs.Buckets = append(fs.Buckets, bucketStats{Informer: informer, Bucket: path, Inline: b.Root() == 0, Stats: b.Stats()})
	_ = b.ForEachBucket(func(k []byte) error {
		sub := string(k)
		if path != "." {
			sub = path + "/" + sub
		}
		walkBuckets(fs, informer, sub, b.Bucket(k))
		return nil
	})
}

func printStats(cmd *cobra.Command, fs *fileStats, p *printFlags) {
	out := cmd.OutOrStdout()
	check := "ok"
	if n := len(fs.CheckErrors); n > 0 {
		check = fmt.Sprintf("%d error(s)", n)
	}
	free := fs.PageTypes["free"]
	summary := &table{}
	summary.add("FILE:", fs.File)
	summary.add("SIZE:", fmt.Sprintf("%s (%d bytes)", formatBytes(fs.Size), fs.Size))
	summary.add("PAGE SIZE:", strconv.Itoa(fs.PageSize))
	summary.add("PAGES:", fmt.Sprintf("%d to the high-water mark (%s)", fs.Pages, formatBytes(int64(fs.Pages*fs.PageSize))))
	summary.add("  META:", strconv.Itoa(fs.PageTypes["meta"]))
	summary.add("  FREELIST:", strconv.Itoa(fs.PageTypes["freelist"]))
	summary.add("  BRANCH:", fmt.Sprintf("%d (+%d overflow)", fs.PageTypes["branch"], fs.BranchOverflow))
	summary.add("  LEAF:", fmt.Sprintf("%d (+%d overflow)", fs.PageTypes["leaf"], fs.LeafOverflow))
	summary.add("  FREE:", fmt.Sprintf("%d (%s)", free, formatBytes(int64(free*fs.PageSize))))
	var other []string
	for typ := range fs.PageTypes {
		switch typ {
		case "meta", "freelist", "branch", "leaf", "free":
		default:
			other = append(other, typ)
		}
	}
	sort.Strings(other)
	for _, typ := range other {
		summary.add("  "+typ+":", strconv.Itoa(fs.PageTypes[typ]))
	}
	summary.add("BBOLT CHECK:", check)
	_ = summary.print(out, true)
	fmt.Fprintln(out)

	t := &table{headers: []string{"INFORMER", "BUCKET", "KEYS", "DEPTH", "PAGES", "ALLOC", "INUSE", "UTIL"}}
	if p.wide() {
		t.headers = append(t.headers, "BRANCH", "BRANCH-OVERFLOW", "LEAF", "LEAF-OVERFLOW", "BUCKETS", "INLINE-BUCKETS", "INLINE-BYTES")
	}
	for _, b := range fs.Buckets {
		s := b.Stats
		alloc, inuse := s.BranchAlloc+s.LeafAlloc, s.BranchInuse+s.LeafInuse
		if b.Inline {
			inuse = s.InlineBucketInuse
		}
		util := "-"
		if alloc > 0 {
			util = fmt.Sprintf("%d%%", inuse*100/alloc)
		}
		inf := b.Informer
		if inf == "" {
			inf = "-"
		}
		pages := s.BranchPageN + s.BranchOverflowN + s.LeafPageN + s.LeafOverflowN
		row := []string{inf, b.Bucket, strconv.Itoa(s.KeyN), strconv.Itoa(s.Depth), strconv.Itoa(pages),
			formatBytes(int64(alloc)), formatBytes(int64(inuse)), util}
		if p.wide() {
			row = append(row, strconv.Itoa(s.BranchPageN), strconv.Itoa(s.BranchOverflowN), strconv.Itoa(s.LeafPageN),
				strconv.Itoa(s.LeafOverflowN), strconv.Itoa(s.BucketN), strconv.Itoa(s.InlineBucketN), strconv.Itoa(s.InlineBucketInuse))
		}
		t.add(row...)
	}
	_ = t.print(out, p.noHeaders)
	for _, e := range fs.CheckErrors {
		fmt.Fprintf(out, "bbolt check: %s\n", e)
	}
}
