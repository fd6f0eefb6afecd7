package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/pmezard/go-difflib/difflib"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/boltinformer/boltinformer/internal/encryptionconfig"
	"github.com/boltinformer/boltinformer/localapi"
	"github.com/boltinformer/boltinformer/store"
)

// errDiffer is diffCommand's error when the two sides differ.
var errDiffer = errors.New("differ")

// Exit statuses of diff, as diff(1)'s.
const (
	exitSame    = 0
	exitDiffer  = 1
	exitTrouble = 2
)

type diffOptions struct {
	kubeconfig        string
	socket            string
	informers         []string
	namespace         string
	selector          string
	fieldSelector     string
	brief             bool
	context           int
	showManagedFields bool
	requestTimeout    time.Duration
}

func (a *app) newDiffCommand() *cobra.Command {
	var o diffOptions
	var p *printFlags
	cmd := &cobra.Command{
		Use:   "diff FILE [FILE2 | --socket SOCKET | --kubeconfig KUBECONFIG]",
		Short: "Compare two cache files, or a file and a live agent, object by object",
		Long: `diff compares the objects of FILE with those of FILE2, or with what a live
API serves: a running agent's local API (--socket, its Unix socket; or
--kubeconfig, the kubeconfig it wrote), or any Kubernetes API server (then
select what the informer caches with -n, -l and --field-selector, which
apply to both sides). Informers are paired by name between two files; with a
live API each informer of FILE is compared with a list of its resource.

Objects are paired by key (NAMESPACE/NAME). One only on one side was deleted
or added; one whose uid differs was deleted and created again (replaced);
one whose content differs changed: a unified diff of its YAML, the way get
prints it (managedFields left out unless --show-managed-fields). An object
that is encrypted without --key-file, or of a type this inspect does not
know, is compared by uid and resourceVersion only, and says so. Informers'
saved states are compared too (resourceVersion, synced, identity).

--brief prints one line per difference instead; -o json|yaml the
differences as data. The exit status is diff(1)'s: 0 no difference, 1
differences, 2 trouble (a file that does not open or is damaged, a live
API that does not answer or does not serve a resource).`,
		Example: `  inspect diff cache.db cache.db.corrupt-20260105T030405
  inspect diff backup.db --socket /run/edge-agent/api.sock --brief
  inspect diff cache.db --kubeconfig ~/.kube/config -n edge pods`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			err := a.diffCommand(cmd, args, &o, p)
			var ee *exitError
			switch {
			case err == nil:
			case errors.Is(err, errDiffer):
				err = &exitError{code: exitDiffer} // no message, as diff(1)
			case !errors.As(err, &ee) || ee.code == exitFailure:
				// Trouble is 2 for diff, as for diff(1): 1 means "differ".
				err = &exitError{code: exitTrouble, msg: err.Error(), err: err}
			}
			return err
		},
		ValidArgsFunction: func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			return nil, cobra.ShellCompDirectiveDefault
		},
	}
	cmd.Flags().StringVar(&o.socket, "socket", "", "compare with the local API on this Unix socket (a running agent's)")
	cmd.Flags().StringVar(&o.kubeconfig, "kubeconfig", "", "compare with the API server of this kubeconfig (an agent's local API, or a cluster)")
	cmd.Flags().StringArrayVar(&o.informers, "informer", nil, "compare only this informer (repeat for several)")
	cmd.Flags().StringVarP(&o.namespace, "namespace", "n", "", "compare only the objects of this namespace")
	cmd.Flags().StringVarP(&o.selector, "selector", "l", "", "compare only the objects with these labels")
	cmd.Flags().StringVar(&o.fieldSelector, "field-selector", "", "compare only the objects with these fields (any field by its path)")
	cmd.Flags().BoolVarP(&o.brief, "brief", "q", false, "one line per difference, no diffs of content")
	cmd.Flags().IntVarP(&o.context, "unified", "U", 3, "lines of context in the unified diffs")
	cmd.Flags().DurationVar(&o.requestTimeout, "request-timeout", 30*time.Second, "bound of each request to a live API")
	addManagedFieldsFlag(cmd, &o.showManagedFields)
	p = addPrintFlags(cmd, formatTable, formatJSON, formatYAML)
	a.registerDiffCompletions(cmd)
	return cmd
}

// diffReport is what diff found; -o json|yaml prints it.
type diffReport struct {
	From      string         `json:"from"`
	To        string         `json:"to"`
	Same      bool           `json:"same"`
	Informers []diffInformer `json:"informers"`
}

type diffInformer struct {
	Name string `json:"name"`
	// Only is "from" or "to" for an informer on one side only.
	Only string `json:"only,omitempty"`
	// State lists the differences of the informers' saved states.
	State   []string     `json:"state,omitempty"`
	Objects []diffObject `json:"objects,omitempty"`
	// Trouble says why the informer could not be compared.
	Trouble string `json:"trouble,omitempty"`
}

type diffObject struct {
	Key string `json:"key"`
	// Change is deleted (only in from), added (only in to), replaced
	// (another uid) or changed.
	Change string    `json:"change"`
	From   *diffSide `json:"from,omitempty"`
	To     *diffSide `json:"to,omitempty"`
	// Note says what was not compared, or what is odd (the same
	// resourceVersion with other content).
	Note string `json:"note,omitempty"`
	// diff is the unified diff of the YAML (not in -o json|yaml).
	diff string
}

type diffSide struct {
	UID             string `json:"uid"`
	ResourceVersion string `json:"resourceVersion"`
}

// entry is one object of one side.
type entry struct {
	uid, rv string
	u       *unstructured.Unstructured
	// opaque says why the content cannot be compared ("": it can).
	opaque string
}

// snapshot is one informer's objects on one side.
type snapshot struct {
	st      *store.State // nil for a live API
	rv      string
	entries map[string]*entry
}

// diffSource is one side: a cache file or a live API.
type diffSource interface {
	name() string
	informers() []string
	// snapshot reads inf, described by the other side's state (for a live
	// API: which resource to list).
	snapshot(inf string, like *store.State) (*snapshot, error)
}

func (a *app) diffCommand(cmd *cobra.Command, args []string, o *diffOptions, p *printFlags) error {
	if err := p.validate(); err != nil {
		return err
	}
	live := o.socket != "" || o.kubeconfig != ""
	switch {
	case len(args) == 2 && live:
		return errors.New("give FILE2, --socket or --kubeconfig, not several")
	case o.socket != "" && o.kubeconfig != "":
		return errors.New("give --socket or --kubeconfig, not both")
	case len(args) == 1 && !live:
		return errors.New("give FILE2, --socket SOCKET or --kubeconfig KUBECONFIG to compare FILE with")
	}
	sel, err := newObjectSelector(o.selector, o.fieldSelector)
	if err != nil {
		return err
	}
	keys, err := readKeyFile(a.keyFile)
	if err != nil {
		return err
	}
	from, err := a.openDiffFile(args[0], keys)
	if err != nil {
		return err
	}
	defer from.close()
	var to diffSource
	if len(args) == 2 {
		f, err := a.openDiffFile(args[1], keys)
		if err != nil {
			return err
		}
		defer f.close()
		to = f
	} else {
		l, err := newLiveSource(o)
		if err != nil {
			return err
		}
		to = l
	}
	rep, err := compareSources(from, to, o, sel)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	switch {
	case p.output != formatTable:
		err = writeValue(out, p.output, rep)
	case o.brief:
		err = printBrief(out, rep, p.noHeaders)
	default:
		err = printUnified(out, rep)
	}
	if err != nil {
		return err
	}
	trouble := 0
	for _, inf := range rep.Informers {
		if inf.Trouble != "" {
			trouble++
			fmt.Fprintf(cmd.ErrOrStderr(), "inspect: informer %q: %s\n", inf.Name, inf.Trouble)
		}
	}
	switch {
	case trouble > 0:
		return &exitError{code: exitTrouble, msg: fmt.Sprintf("diff: %d informer(s) could not be compared", trouble)}
	case !rep.Same:
		return errDiffer
	}
	return nil
}

// compareSources compares every informer of from (or those of
// --informer) with to's.
func compareSources(from, to diffSource, o *diffOptions, sel *objectSelector) (*diffReport, error) {
	rep := &diffReport{From: from.name(), To: to.name(), Same: true, Informers: []diffInformer{}}
	names := from.informers()
	if len(o.informers) > 0 {
		ff, ok := from.(*fileSource)
		if !ok {
			return nil, errors.New("--informer: FILE is not a cache file")
		}
		names = nil
		for _, arg := range o.informers {
			inf, err := ff.resolve(arg)
			if err != nil {
				return nil, err
			}
			names = append(names, inf)
		}
	}
	inFrom := map[string]bool{}
	for _, n := range names {
		inFrom[n] = true
	}
	var all []string
	all = append(all, names...)
	if _, live := to.(*liveSource); !live && len(o.informers) == 0 {
		for _, n := range to.informers() {
			if !inFrom[n] {
				all = append(all, n)
			}
		}
	}
	sort.Strings(all)
	toHas := map[string]bool{}
	for _, n := range to.informers() {
		toHas[n] = true
	}
	_, live := to.(*liveSource)
	for _, inf := range all {
		di := diffInformer{Name: inf}
		switch {
		case !inFrom[inf]:
			di.Only = "to"
		case !live && !toHas[inf]:
			di.Only = "from"
		}
		if di.Only != "" {
			rep.Same = false
			rep.Informers = append(rep.Informers, di)
			continue
		}
		a, err := from.snapshot(inf, nil)
		if err != nil {
			di.Trouble = err.Error()
			rep.Informers = append(rep.Informers, di)
			continue
		}
		b, err := to.snapshot(inf, a.st)
		if err != nil {
			di.Trouble = err.Error()
			rep.Informers = append(rep.Informers, di)
			continue
		}
		di.State = compareStates(a, b)
		di.Objects = compareObjects(a, b, from.name()+" "+inf, to.name()+" "+inf, o, sel)
		if len(di.State) > 0 || len(di.Objects) > 0 {
			rep.Same = false
		}
		rep.Informers = append(rep.Informers, di)
	}
	return rep, nil
}

// compareStates lists the differences of two informers' saved states.
func compareStates(a, b *snapshot) []string {
	var out []string
	if a.rv != b.rv {
		out = append(out, fmt.Sprintf("resourceVersion %s -> %s", orNone(a.rv), orNone(b.rv)))
	}
	if a.st == nil || b.st == nil {
		return out
	}
	for _, f := range []struct{ name, x, y string }{
		{"synced", fmt.Sprint(a.st.Synced), fmt.Sprint(b.st.Synced)},
		{"cluster", a.st.ClusterID, b.st.ClusterID},
		{"resource", a.st.Resource, b.st.Resource},
		{"list options", a.st.ListOptions, b.st.ListOptions},
		{"transform", a.st.Transform, b.st.Transform},
		{"indexes", strings.Join(a.st.Indexes, ","), strings.Join(b.st.Indexes, ",")},
	} {
		if f.x != f.y {
			out = append(out, fmt.Sprintf("%s %s -> %s", f.name, orNone(f.x), orNone(f.y)))
		}
	}
	return out
}

// compareObjects pairs the objects by key; the unified diffs name them
// after fromName and toName.
func compareObjects(a, b *snapshot, fromName, toName string, o *diffOptions, sel *objectSelector) []diffObject {
	keys := map[string]bool{}
	for k := range a.entries {
		keys[k] = true
	}
	for k := range b.entries {
		keys[k] = true
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		if o.namespace != "" && !strings.HasPrefix(k, o.namespace+"/") {
			continue
		}
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	var out []diffObject
	for _, k := range sorted {
		x, y := a.entries[k], b.entries[k]
		if !sel.empty() && !selected(sel, x) && !selected(sel, y) {
			continue
		}
		d := diffObject{Key: k}
		if x != nil {
			d.From = &diffSide{UID: x.uid, ResourceVersion: x.rv}
		}
		if y != nil {
			d.To = &diffSide{UID: y.uid, ResourceVersion: y.rv}
		}
		switch {
		case y == nil:
			d.Change = "deleted"
		case x == nil:
			d.Change = "added"
		case x.uid != y.uid:
			d.Change = "replaced"
			d.Note = "another uid: deleted and created again"
		case x.opaque != "" || y.opaque != "":
			if x.rv == y.rv {
				continue
			}
			d.Change = "changed"
			d.Note = "content not compared: " + firstOf(x.opaque, y.opaque)
		default:
			if sameContent(x, y, o.showManagedFields) {
				continue
			}
			d.Change = "changed"
			if x.rv == y.rv {
				d.Note = "the same resourceVersion with other content"
			}
		}
		if !o.brief {
			d.diff = unifiedDiff(fromName+" "+k, x, toName+" "+k, y, o)
		}
		out = append(out, d)
	}
	return out
}

func selected(sel *objectSelector, e *entry) bool {
	if e == nil {
		return false
	}
	o := &object{u: e.u}
	if e.opaque == "" {
		o.obj = e.u
	}
	match, _ := sel.matches(o)
	return match
}

func firstOf(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}

func sameContent(x, y *entry, showManagedFields bool) bool {
	return yamlOf(x, showManagedFields) == yamlOf(y, showManagedFields)
}

// yamlOf is e's YAML as get -o yaml prints it ("" for no object).
func yamlOf(e *entry, showManagedFields bool) string {
	if e == nil {
		return ""
	}
	u := e.u.DeepCopy()
	if !showManagedFields {
		u.SetManagedFields(nil)
	}
	if e.opaque != "" {
		// An envelope: its payload (sealed with a random nonce, or of an
		// unknown type) says nothing a diff can show.
		delete(u.Object, "payload")
	}
	b, err := yaml.Marshal(u.Object)
	if err != nil {
		return fmt.Sprintf("# %v\n", err)
	}
	return string(b)
}

// unifiedDiff is the unified diff (go-difflib's) of the YAML of x and y
// (either nil: no lines), labelled with their names and resourceVersions.
func unifiedDiff(fromName string, x *entry, toName string, y *entry, o *diffOptions) string {
	label := func(e *entry) string {
		if e == nil {
			return "(none)"
		}
		return "resourceVersion " + orNone(e.rv)
	}
	lines := func(e *entry) []string {
		if e == nil {
			return nil
		}
		return difflib.SplitLines(strings.TrimSuffix(yamlOf(e, o.showManagedFields), "\n"))
	}
	text, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: lines(x), FromFile: fromName, FromDate: label(x),
		B: lines(y), ToFile: toName, ToDate: label(y),
		Context: o.context,
	})
	if err != nil {
		return fmt.Sprintf("# %v\n", err)
	}
	return text
}

// printUnified prints diff -u's form: per informer a header, then per
// object the unified diff of its YAML (against nothing for one that is
// on one side only).
func printUnified(w io.Writer, rep *diffReport) error {
	for _, inf := range rep.Informers {
		switch inf.Only {
		case "from":
			fmt.Fprintf(w, "Only in %s: informer %s\n", rep.From, inf.Name)
			continue
		case "to":
			fmt.Fprintf(w, "Only in %s: informer %s\n", rep.To, inf.Name)
			continue
		}
		if inf.Trouble != "" || (len(inf.State) == 0 && len(inf.Objects) == 0) {
			continue
		}
		fmt.Fprintf(w, "informer %s", inf.Name)
		if len(inf.State) > 0 {
			fmt.Fprintf(w, ": %s", strings.Join(inf.State, ", "))
		}
		fmt.Fprintln(w)
		for _, d := range inf.Objects {
			fmt.Fprintf(w, "diff %s %s: %s\n", inf.Name, d.Key, d.Change)
			if d.Note != "" {
				fmt.Fprintf(w, "# %s\n", d.Note)
			}
			if _, err := io.WriteString(w, d.diff); err != nil {
				return err
			}
		}
	}
	return nil
}

// printBrief prints a line per difference.
func printBrief(w io.Writer, rep *diffReport, noHeaders bool) error {
	t := &table{headers: []string{"INFORMER", "OBJECT", "CHANGE", "RESOURCEVERSION", "NOTE"}}
	side := func(s *diffSide) string {
		if s == nil {
			return "-"
		}
		return orNone(s.ResourceVersion)
	}
	for _, inf := range rep.Informers {
		switch {
		case inf.Only == "from":
			t.add(inf.Name, "-", "informer deleted", "-", "only in "+rep.From)
		case inf.Only == "to":
			t.add(inf.Name, "-", "informer added", "-", "only in "+rep.To)
		case inf.Trouble != "":
		default:
			for _, s := range inf.State {
				t.add(inf.Name, "-", "state", "-", s)
			}
			for _, d := range inf.Objects {
				t.add(inf.Name, d.Key, d.Change, side(d.From)+" -> "+side(d.To), orDash(d.Note))
			}
		}
	}
	if len(t.rows) == 0 {
		return nil
	}
	return t.print(w, noHeaders)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// fileSource is a cache file, open read-only for the whole diff.
type fileSource struct {
	path string
	db   *store.DB
	keys *encryptionconfig.Config
}

func (a *app) openDiffFile(path string, keys *encryptionconfig.Config) (*fileSource, error) {
	db, err := a.open(path)
	if err != nil {
		return nil, err
	}
	return &fileSource{path: path, db: db, keys: keys}, nil
}

func (f *fileSource) close() { _ = f.db.Close() }

func (f *fileSource) name() string { return f.path }

func (f *fileSource) informers() []string {
	var names []string
	_ = f.db.View(func(tx *store.Tx) error {
		names = tx.Informers()
		return nil
	})
	return names
}

func (f *fileSource) resolve(arg string) (string, error) {
	var inf string
	err := f.db.View(func(tx *store.Tx) error {
		var err error
		inf, err = resolveInformer(tx, arg)
		return err
	})
	return inf, err
}

func (f *fileSource) snapshot(inf string, _ *store.State) (*snapshot, error) {
	s := &snapshot{entries: map[string]*entry{}}
	err := f.db.View(func(tx *store.Tx) error {
		st, err := tx.State(inf)
		if err != nil {
			return err
		}
		s.st = st
		if st != nil {
			s.rv = st.ResourceVersion
		}
		d := newDecoder(inf, st, f.keys)
		var failed []string
		_, err = scanObjects(tx, inf, nil, d, func(string) bool { return true }, func(o *object) error {
			e := &entry{uid: o.rec.UID, rv: o.rec.ResourceVersion, u: o.printable()}
			switch {
			case o.keyErr != nil && f.keys != nil:
				return o.keyErr
			case o.failed:
				failed = append(failed, o.key)
			case o.obj == nil:
				e.opaque = o.reason
			}
			s.entries[o.key] = e
			return nil
		})
		if err == nil && len(failed) > 0 {
			err = fmt.Errorf("%s: %d payload(s) do not decode (%s); run inspect check %s", f.path, len(failed), strings.Join(failed, ", "), f.path)
		}
		return err
	})
	return s, err
}

// liveSource is a live Kubernetes API: an agent's local API, or a
// cluster's.
type liveSource struct {
	label   string
	client  dynamic.Interface
	timeout time.Duration
	o       *diffOptions
}

func newLiveSource(o *diffOptions) (*liveSource, error) {
	var cfg *rest.Config
	var label string
	if o.socket != "" {
		cfg, label = localapi.UnixConfig(o.socket), "unix:"+o.socket
	} else {
		var err error
		if cfg, err = clientcmd.BuildConfigFromFlags("", o.kubeconfig); err != nil {
			return nil, fmt.Errorf("--kubeconfig: %w", err)
		}
		label = cfg.Host
	}
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = o.requestTimeout
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &liveSource{label: label, client: dc, timeout: o.requestTimeout, o: o}, nil
}

func (l *liveSource) name() string        { return l.label }
func (l *liveSource) informers() []string { return nil }

func (l *liveSource) snapshot(inf string, like *store.State) (*snapshot, error) {
	gvr, err := informerGVR(inf, like)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
	defer cancel()
	ri := l.client.Resource(gvr).Namespace(l.o.namespace)
	s := &snapshot{entries: map[string]*entry{}}
	opts := metav1.ListOptions{Limit: 500}
	for {
		list, err := ri.List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("list %s from %s: %w", gvr, l.label, err)
		}
		if s.rv == "" {
			s.rv = list.GetResourceVersion()
		}
		for i := range list.Items {
			u := &list.Items[i]
			key := u.GetName()
			if ns := u.GetNamespace(); ns != "" {
				key = ns + "/" + key
			}
			s.entries[key] = &entry{uid: string(u.GetUID()), rv: u.GetResourceVersion(), u: u}
		}
		if list.GetContinue() == "" {
			return s, nil
		}
		opts.Continue = list.GetContinue()
	}
}

// informerGVR is the resource of an informer's objects: its state's
// Resource (a Factory's GroupVersionResource), the plural of its kind, or
// its name ("v1/pods", "apps/v1/deployments", "dynamic/g/v/r").
func informerGVR(inf string, st *store.State) (schema.GroupVersionResource, error) {
	if st != nil {
		if gv, r, ok := strings.Cut(st.Resource, ", Resource="); ok && r != "" {
			if g, err := schema.ParseGroupVersion(strings.TrimPrefix(gv, "/")); err == nil && g.Version != "" {
				return g.WithResource(r), nil
			}
		}
	}
	if gvk := informerKind(st); gvk.Kind != "" {
		plural, _ := meta.UnsafeGuessKindToResource(gvk)
		return plural, nil
	}
	parts := strings.Split(strings.TrimPrefix(inf, "dynamic/"), "/")
	switch len(parts) {
	case 2:
		return schema.GroupVersionResource{Version: parts[0], Resource: parts[1]}, nil
	case 3:
		return schema.GroupVersionResource{Group: parts[0], Version: parts[1], Resource: parts[2]}, nil
	}
	return schema.GroupVersionResource{}, fmt.Errorf("its resource is not known (its state names none, and its name is not group/version/resource)")
}
