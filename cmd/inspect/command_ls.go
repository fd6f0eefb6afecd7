package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	bolt "go.etcd.io/bbolt"

	"github.com/boltinformer/boltinformer/store"
)

// The bucket names of store/schema.go that statistics are reported for.
var (
	bucketInformers = []byte("informers")
	bucketObjects   = []byte("objects")
)

func (a *app) newLsCommand() *cobra.Command {
	var p *printFlags
	cmd := &cobra.Command{
		Use:   "ls FILE",
		Short: "List the informers in the file",
		Long: `ls lists every informer in the file: the objects it holds, the resourceVersion
it resumes from, when it last completed a list, the cluster it came from, its
index buckets and the bytes its buckets take on disk (bbolt pages).`,
		Example: `  inspect ls /var/lib/agent/cache.db
  inspect ls /var/lib/agent/cache.db -o wide`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := p.validate(); err != nil {
				return err
			}
			return a.ls(cmd, args[0], p)
		},
	}
	p = addPrintFlags(cmd, formatTable, formatWide, formatName, formatJSON, formatYAML)
	return cmd
}

// informerInfo is one informer as ls reports it.
type informerInfo struct {
	Name            string     `json:"name"`
	Resource        string     `json:"resource,omitempty"`
	Kind            string     `json:"kind,omitempty"`
	Objects         int        `json:"objects"`
	ResourceVersion string     `json:"resourceVersion"`
	Synced          bool       `json:"synced"`
	ClusterID       string     `json:"clusterID,omitempty"`
	ListOptions     string     `json:"listOptions,omitempty"`
	Indexes         []string   `json:"indexes"`
	Codec           string     `json:"codec,omitempty"`
	Created         *time.Time `json:"created,omitempty"`
	LastCommit      *time.Time `json:"lastCommit,omitempty"`
	LastSync        *time.Time `json:"lastSync,omitempty"`
	Bytes           int64      `json:"bytes"`
	StateError      string     `json:"stateError,omitempty"`
}

// fileInfo is the file as ls reports it.
type fileInfo struct {
	File          string         `json:"file"`
	FormatVersion uint32         `json:"formatVersion"`
	Created       time.Time      `json:"created"`
	Size          int64          `json:"size"`
	Informers     []informerInfo `json:"informers"`
}

func (a *app) ls(cmd *cobra.Command, path string, p *printFlags) error {
	var fi fileInfo
	var damaged int
	err := a.view(path, func(db *store.DB, tx *store.Tx) error {
		size, err := db.Size()
		if err != nil {
			return err
		}
		fi = fileInfo{File: path, FormatVersion: store.FormatVersion, Created: db.Created(), Size: size, Informers: []informerInfo{}}
		for _, name := range tx.Informers() {
			info := describeInformer(tx, name)
			if info.StateError != "" {
				damaged++
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s\n", info.StateError)
			}
			fi.Informers = append(fi.Informers, info)
		}
		return nil
	})
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	switch p.output {
	case formatJSON, formatYAML:
		err = writeValue(out, p.output, fi)
	case formatName:
		for _, inf := range fi.Informers {
			fmt.Fprintln(out, inf.Name)
		}
	default:
		err = lsTable(fi.Informers, p.wide(), a.now()).print(out, p.noHeaders)
	}
	if err == nil && damaged > 0 {
		err = &exitError{code: exitCorrupt, msg: fmt.Sprintf("%d informer(s) have a damaged state record; run inspect check %s", damaged, path)}
	}
	return err
}

func describeInformer(tx *store.Tx, name string) informerInfo {
	info := informerInfo{Name: name, Indexes: append([]string{}, tx.Indexes(name)...)}
	st, err := tx.State(name)
	if err != nil {
		info.StateError = err.Error()
	}
	if st != nil {
		info.Resource, info.Kind, info.ClusterID, info.ListOptions = st.Resource, st.Kind, st.ClusterID, st.ListOptions
		info.ResourceVersion, info.Synced = st.ResourceVersion, st.Synced
		info.Created, info.LastCommit, info.LastSync = timePtr(st.Created), timePtr(st.LastCommit), timePtr(st.LastSync)
	}
	if b := informerBucket(tx, name); b != nil {
		s := b.Stats()
		info.Bytes = int64(s.BranchAlloc + s.LeafAlloc)
		if b.Root() == 0 {
			info.Bytes = int64(s.InlineBucketInuse)
		}
		if objs := b.Bucket(bucketObjects); objs != nil {
			info.Objects = objs.Stats().KeyN
			if k, v := objs.Cursor().First(); v != nil {
				if r, err := store.DecodeRecord(string(k), v); err == nil {
					info.Codec = codecName(r)
				}
			}
		}
	}
	return info
}

// informerBucket is the bbolt bucket of an informer (store/schema.go).
func informerBucket(tx *store.Tx, name string) *bolt.Bucket {
	root := tx.Bolt().Bucket(bucketInformers)
	if root == nil {
		return nil
	}
	return root.Bucket([]byte(name))
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func lsTable(infs []informerInfo, wide bool, now time.Time) *table {
	t := &table{headers: []string{"NAME", "OBJECTS", "RESOURCEVERSION", "LAST-SYNC", "CLUSTER", "INDEXES", "SIZE"}}
	if wide {
		t.headers = append(t.headers, "SYNCED", "KIND", "CODEC", "LAST-COMMIT", "CREATED")
	}
	for _, inf := range infs {
		lastSync := "<never>"
		if inf.LastSync != nil {
			lastSync = age(now, *inf.LastSync)
		}
		row := []string{inf.Name, strconv.Itoa(inf.Objects), orNone(inf.ResourceVersion), lastSync, orNone(inf.ClusterID),
			orNone(strings.Join(inf.Indexes, ",")), formatBytes(inf.Bytes)}
		if wide {
			row = append(row, strconv.FormatBool(inf.Synced), orNone(inf.Kind), orNone(inf.Codec), timestampPtr(inf.LastCommit), timestampPtr(inf.Created))
		}
		t.add(row...)
	}
	return t
}

func timestampPtr(t *time.Time) string {
	if t == nil {
		return "<none>"
	}
	return timestamp(*t)
}
