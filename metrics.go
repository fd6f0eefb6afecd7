package boltinformer

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/boltinformer/boltinformer/store"
)

const metricsNamespace = "boltinformer"

// metrics are a DB's Prometheus metrics. Commit metrics are updated by the
// commit loop; the per-informer ones are read from the informers at scrape
// time, so an informer costs nothing per event beyond an atomic add.
type metrics struct {
	db *DB

	commits      *prometheus.CounterVec // result
	commitOps    prometheus.Histogram
	commitBytes  prometheus.Histogram
	commitTime   prometheus.Histogram
	commitErrors prometheus.Counter

	objects, rvAge, size, depth, synced, events, relists, watches, watchErrors, start, undecodable, moment, catchup, partialRelists, indexErrors, refused, unpersisted *prometheus.Desc
}

func newMetrics(db *DB) *metrics {
	m := &metrics{db: db}
	m.commits = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metricsNamespace, Name: "commits_total",
		Help: "Group commits (one bbolt transaction with fsync each), by result."}, []string{"result"})
	m.commitOps = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: metricsNamespace, Name: "commit_batch_objects",
		Help: "Object mutations per group commit.", Buckets: prometheus.ExponentialBuckets(1, 4, 9)})
	m.commitBytes = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: metricsNamespace, Name: "commit_batch_bytes",
		Help: "Encoded record bytes per group commit.", Buckets: prometheus.ExponentialBuckets(1024, 4, 9)})
	m.commitTime = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: metricsNamespace, Name: "commit_duration_seconds",
		Help: "Time of a group commit, fsync included.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)})
	m.commitErrors = prometheus.NewCounter(prometheus.CounterOpts{Namespace: metricsNamespace, Name: "commit_errors_total",
		Help: "Failed group commits (disk full, fsync or write errors); the saved resourceVersion does not advance and the commit is retried."})
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(metricsNamespace+"_"+name, help, labels, nil)
	}
	m.objects = d("objects", "Objects in the informer's cache.", "informer")
	m.rvAge = d("saved_resource_version_age_seconds", "Seconds since the informer's saved resourceVersion was last committed.", "informer")
	m.size = d("db_file_size_bytes", "Size of the cache file in bytes.")
	m.depth = d("listener_pending_notifications", "Notifications buffered for a handler, not yet handled.", "informer", "handler")
	m.synced = d("synced", "1 once the informer has synced.", "informer")
	m.events = d("events_applied_total", "List and watch events applied to the cache.", "informer")
	m.relists = d("relists_total", "Lists from the server after a start or resume, by reason (expired: the watch got 410; other).", "informer", "reason")
	m.watches = d("watch_starts_total", "Watch requests started (a restart of the watch counts one).", "informer")
	m.watchErrors = d("watch_errors_total", "Failed list or watch requests and watch error events.", "informer")
	m.undecodable = d("undecodable_objects_total", "Objects of the cache file found not to decode after the load (each makes the informer relist).", "informer")
	m.indexErrors = d("index_errors_total", "Objects stored without the values of some index because an index function failed on them (stored and delivered all the same), one per write.", "informer")
	m.refused = d("refused_objects_total", "Objects the cache refused to store (not delivered to the handlers either), one per write.", "informer")
	m.unpersisted = d("unpersisted_objects", "Objects in the informer's cache that cannot be written to the file; while above 0 the informer commits nothing (normally 0).", "informer")
	m.start = d("start_info", "How the informer started: mode warm or cold, with the reason.", "informer", "mode", "reason")
	m.moment = d("start_moment_seconds", "Seconds from Run to each moment of the start that was reached: loaded (the cache serves), fresh (it equals the server's state), live (the server accepted a watch).", "informer", "moment")
	m.partialRelists = d("partial_relists_total", "Relists (after a 410) answered with only the objects that changed, read one by one, instead of a list of every object (counted in relists_total too).", "informer")
	m.catchup = d("catchup_pending_objects", "Objects a warm start's resumed watch must still bring before the cache is fresh.", "informer")
	return m
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.commits, m.commitOps, m.commitBytes, m.commitTime, m.commitErrors, m}
}

func (m *metrics) onCommit(info store.CommitInfo) {
	if info.Err != nil {
		m.commits.WithLabelValues("error").Inc()
		m.commitErrors.Inc()
		return
	}
	m.commits.WithLabelValues("ok").Inc()
	m.commitOps.Observe(float64(info.Ops))
	m.commitBytes.Observe(float64(info.Bytes))
	m.commitTime.Observe(info.Duration.Seconds())
}

// Describe implements prometheus.Collector for the scrape-time metrics.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.objects, m.rvAge, m.size, m.depth, m.synced, m.events, m.relists, m.watches, m.watchErrors, m.start, m.undecodable, m.moment, m.catchup, m.partialRelists, m.indexErrors, m.refused, m.unpersisted} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: values read from the informers.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	if n, err := m.db.store.Size(); err == nil {
		gauge(m.size, float64(n))
	}
	for _, inf := range m.db.snapshotInformers() {
		gauge(m.objects, float64(inf.indexer.Len()), inf.name)
		if st := inf.indexer.SavedState(); !st.LastCommit.IsZero() {
			gauge(m.rvAge, m.db.clock.Since(st.LastCommit).Seconds(), inf.name)
		}
		gauge(m.synced, boolFloat(inf.HasSynced()), inf.name)
		for handler, n := range inf.listenerDepths() {
			gauge(m.depth, float64(n), inf.name, handler)
		}
		counter(m.events, float64(inf.counters.events.Load()), inf.name)
		counter(m.relists, float64(inf.counters.relistsExpired.Load()), inf.name, "expired")
		counter(m.relists, float64(inf.counters.relistsOther.Load()), inf.name, "other")
		counter(m.partialRelists, float64(inf.counters.partialRelists.Load()), inf.name)
		counter(m.undecodable, float64(inf.counters.undecodable.Load()), inf.name)
		counter(m.indexErrors, float64(inf.counters.indexErrors.Load()), inf.name)
		counter(m.refused, float64(inf.counters.refused.Load()), inf.name)
		n, _ := inf.indexer.Unpersisted()
		gauge(m.unpersisted, float64(n), inf.name)
		ws := inf.WatchStats()
		counter(m.watches, float64(ws.Watches), inf.name)
		counter(m.watchErrors, float64(ws.Errors), inf.name)
		mode := "cold"
		if inf.decision.Warm {
			mode = "warm"
		}
		gauge(m.start, 1, inf.name, mode, inf.decision.Reason)
		if run := inf.runStarted.Load(); run != 0 {
			for _, mo := range []struct {
				name string
				at   int64
			}{{"loaded", inf.loaded.at.Load()}, {"fresh", atNano(inf.fr.Status())}, {"live", inf.live.at.Load()}} {
				if mo.at != 0 {
					gauge(m.moment, time.Duration(mo.at-run).Seconds(), inf.name, mo.name)
				}
			}
		}
		gauge(m.catchup, float64(inf.fr.Status().Pending), inf.name)
	}
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// informerCounters are an informer's own counts, read by metrics and
// health.
type informerCounters struct {
	events         atomic.Int64
	relistsExpired atomic.Int64
	relistsOther   atomic.Int64
	undecodable    atomic.Int64
	// otherTimeline counts metadata lists older than the cache (a
	// restored or replaced cluster), each answered by a relist.
	otherTimeline atomic.Int64
	// partialRelists counts relists answered with only what changed.
	partialRelists atomic.Int64
	// indexErrors counts objects stored without the values of some index
	// (an index function failed on them), one per write; refused the
	// objects the cache refused (not stored, not delivered).
	indexErrors atomic.Int64
	refused     atomic.Int64
}
