// Command operator is a small controller-runtime operator with a
// persistent cache: see derive for what it does and README.md for how it
// is set up. Its cache is a boltinformer file, so a restart resumes the
// watches instead of listing every ConfigMap again, and sources deleted
// while it was down are cleaned up when it starts.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"time"

	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/boltinformer/boltinformer"
	boltcr "github.com/boltinformer/boltinformer/controllerruntime"
	"github.com/boltinformer/boltinformer/examples/operator/derive"
)

func main() {
	klog.InitFlags(nil)
	cacheFile := flag.String("cache-file", "operator-cache.db", "the persistent cache file")
	namespace := flag.String("namespace", "", "watch only this namespace (default: all)")
	inMemory := flag.Bool("in-memory", false, "use controller-runtime's own in-memory cache (to compare)")
	diskLoad := flag.Bool("sync-after-disk-load", false, "at a warm start, sync as soon as the file is loaded, even with the apiserver unreachable. "+
		"Gives up: until the cache is fresh, reconciles may read the state of the last stop (sources deleted or changed while down). "+
		"Keeps: sources deleted while down are still cleaned up (their deletes are replayed), at a cost to the apiserver of "+
		"one read of one object's metadata and, without a bookmark within 5 s, one metadata list (at once for up to 1000 ConfigMaps)")
	durable := flag.Bool("durable-queue", false, "no reconcile storm at a warm start: keep the controller's queue in the cache file and reconcile only "+
		"the sources changed, created or deleted while down, the requests pending or in flight at the stop (or kill -9), and the "+
		"RequeueAfter deadlines that fell due (boltcr.NewQueue). Gives up: a derived ConfigMap changed or deleted by someone else is "+
		"no longer repaired at every restart (only when its source changes)")
	dropUnused := flag.Duration("drop-unused-after", 7*24*time.Hour, "at the stop, drop from the cache file the scopes this run did not watch (e.g. another -namespace) that went this long without a commit (0: keep them)")
	metricsAddr := flag.String("metrics-bind-address", "0", "the metrics endpoint's address (0: off)")
	probeAddr := flag.String("health-probe-bind-address", "0", "the health probes' address (0: off)")
	flag.Parse()
	ctrl.SetLogger(klog.NewKlogr())
	if *durable && *inMemory {
		fmt.Fprintln(os.Stderr, "operator: -durable-queue needs the cache file (not -in-memory)")
		os.Exit(2)
	}
	if err := run(ctrl.SetupSignalHandler(), *cacheFile, *namespace, *inMemory, *diskLoad, *durable, *dropUnused, *metricsAddr, *probeAddr); err != nil {
		fmt.Fprintln(os.Stderr, "operator:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cacheFile, namespace string, inMemory, diskLoad, durable bool, dropUnused time.Duration, metricsAddr, probeAddr string) error {
	opts := ctrl.Options{
		Metrics:                metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress: probeAddr,
	}
	if namespace != "" {
		opts.Cache = cache.Options{DefaultNamespaces: map[string]cache.Config{namespace: {}}}
	}
	var db *boltinformer.DB
	if !inMemory {
		var err error
		// The file's metrics go to the manager's /metrics.
		db, err = boltinformer.Open(cacheFile, &boltinformer.Options{Registerer: metrics.Registry})
		if err != nil {
			return err
		}
		defer func() {
			if err := db.Close(); err != nil {
				fmt.Fprintln(os.Stderr, "operator: closing the cache file:", err)
			}
		}()
		// The one option: controller-runtime's cache, persisted. Scopes
		// no longer watched (another -namespace) leave the file at the
		// stop.
		opts.NewCache = boltcr.NewCache(db, &boltcr.Options{SyncAfterDiskLoad: diskLoad, DropUnusedAfter: dropUnused})
	}
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), opts)
	if err != nil {
		return err
	}
	if db != nil {
		// Ready once every informer has synced and the last commit worked.
		if err := mgr.AddReadyzCheck("cache-file", func(*http.Request) error { return db.Healthy() }); err != nil {
			return err
		}
	}
	r := &derive.Reconciler{Client: mgr.GetClient()}
	if durable {
		// The controller's queue in the cache file: a warm start
		// reconciles only what needs work.
		r.NewQueue = boltcr.NewQueue(db, nil)
	}
	if err := r.SetupWithManager(ctx, mgr); err != nil {
		return err
	}
	return mgr.Start(ctx) // returns once the caches have stopped: then db.Close
}
