package tierbucket

import (
	"errors"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/tierbucket/caddy-tierbucket/limiter"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// The metrics are read at scrape time from the limiters' and counters' own atomic
// counters: the request path never calls into prometheus. Labels: cluster, and app = a
// configured app id or "*" (every unknown app together), so cardinality is bounded by the
// config.
const metricsNS = "caddy_rate_limit_"

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(metricsNS+name, help, labels, nil)
}

var (
	descRequests = desc("requests_total",
		"Final rate-limit decisions (decision allowed|rejected; reason empty when allowed). In shadow mode rejected counts would-be rejections.",
		"cluster", "app", "decision", "reason")
	descCost        = desc("cost_total", "Admitted cost (settled) in cost tokens.", "cluster", "app")
	descLocalHits   = desc("local_hits_total", "Requests admitted from local (L3) tokens without waiting on the Store.", "cluster", "app")
	descLocalTokens = desc("local_tokens", "Tokens held locally (leased, not yet spent).", "cluster", "app")
	descBorrowed    = desc("borrowed_tokens", "Tokens the app has borrowed from the cluster's pool and not yet repaid, as of this instance's last lease.", "cluster", "app")
	descDebt        = desc("debt_tokens", "The app's borrowing debt (borrowed tokens plus interest, repaid first from refills), as of this instance's last lease.", "cluster", "app")
	descLeases      = desc("leases_total", "Leases taken from the Store (L2).", "cluster", "app")
	descLeaseTokens = desc("lease_tokens_total", "Tokens granted by leases.", "cluster", "app")
	descLevel       = desc("degradation_level", "Store degradation level: 0 normal, 1 mild, 2 significant, 3 fail_open.", "cluster")
	descEmergency   = desc("emergency_mode", "1 while the cluster is in emergency mode.", "cluster")
	descUsage       = desc("cluster_usage_ratio", "L1 usage: fleet-wide admitted cost per second / capacity (0 without capacity).", "cluster")
	descLatency     = desc("store_latency_average_seconds", "Moving average of the Store's call latency.", "cluster")
	descConns       = desc("connections", "Requests in flight on this instance.", "cluster", "app")
	descConnsPeak   = desc("connections_peak", "Highest number of requests in flight seen on this instance.", "cluster", "app")
	descConnsRej    = desc("connections_rejected_total", "Requests rejected by an in-flight limit.", "cluster", "app")
	descConnsLeak   = desc("connections_leaked_total", "In-flight slots force-released by the leak sweep.", "cluster", "app")
	descClConns     = desc("cluster_connections", "Requests in flight on this instance, whole cluster.", "cluster")
	descClConnsPeak = desc("cluster_connections_peak", "Highest cluster-wide in-flight count seen on this instance.", "cluster")
	descClConnsRej  = desc("cluster_connections_rejected_total", "Requests rejected by the cluster's in-flight limit.", "cluster")
	descChanges     = desc("config_changes_total", "Changes made through this instance's admin API (overrides set or removed, operator emergency set or cleared).", "cluster")
	descFlushes     = desc("stats_flushes_total", "Per-app statistics batches the cluster report sent on their own (no lease or return of the app carried them within stats_interval, or their call failed, or the app was removed): one Redis call each.", "cluster")
)

// collector reports every live cluster state.
type collector struct{}

// theCollector is registered on the metrics registry of every config load.
var theCollector = collector{}

// registerMetrics registers the collector on the registry of this config load. Several handlers
// register the same collector; like reverse_proxy, the duplicate registration is tolerated.
func registerMetrics(ctx caddy.Context, logger *zap.Logger) {
	reg := ctx.GetMetricsRegistry()
	if reg == nil {
		return
	}
	if err := reg.Register(theCollector); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			logger.Error("registering rate_limit metrics", zap.Error(err))
		}
	}
}

// Describe sends every descriptor.
func (collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRequests, descCost, descLocalHits, descLocalTokens,
		descBorrowed, descDebt, descLeases, descLeaseTokens, descLevel, descEmergency, descUsage, descLatency, descConns,
		descConnsPeak, descConnsRej, descConnsLeak, descClConns, descClConnsPeak, descClConnsRej, descChanges, descFlushes} {
		ch <- d
	}
	storeLatency.Describe(ch)
	storeErrors.Describe(ch)
}

// Collect reads the counters of every live cluster.
func (collector) Collect(ch chan<- prometheus.Metric) {
	seen := map[string]bool{}
	for _, s := range liveClusters() {
		cl := s.key.cluster
		if seen[cl] {
			continue // the same cluster on two Stores during a reload: report the first
		}
		seen[cl] = true
		collectCluster(ch, s)
	}
	storeLatency.Collect(ch)
	storeErrors.Collect(ch)
}

func collectCluster(ch chan<- prometheus.Metric, s *clusterState) {
	cl := s.key.cluster
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	stats := s.lim.Stats()
	var star *limiter.AppStats
	for i := range stats {
		st := &stats[i]
		if st.Label == wildcardApp {
			star = st
		}
	}
	if star == nil {
		// unknown apps are rejected: "*" still gets its invalid/unknown decisions
		stats = append(stats, limiter.AppStats{Label: wildcardApp})
		star = &stats[len(stats)-1]
	}
	star.Requests[store.ReasonInvalidAppID] += s.invalidIDs.Load()
	star.Requests[store.ReasonUnknownApp] += s.unknownRejects.Load()
	for _, st := range stats {
		for r, n := range st.Requests {
			reason := store.Reason(r)
			if n == 0 && reason != store.ReasonNone {
				continue // keep the output small: absent = 0
			}
			dec := "rejected"
			if reason == store.ReasonNone {
				dec = "allowed"
			}
			counter(descRequests, n, cl, st.Label, dec, reason.String())
		}
		counter(descCost, st.Cost, cl, st.Label)
		counter(descLocalHits, st.LocalHits, cl, st.Label)
		gauge(descLocalTokens, float64(st.LocalTokens), cl, st.Label)
		gauge(descBorrowed, st.Borrowed, cl, st.Label)
		gauge(descDebt, st.Debt, cl, st.Label)
		counter(descLeases, st.Leases, cl, st.Label)
		counter(descLeaseTokens, st.LeaseTokens, cl, st.Label)
	}
	state := s.lim.State()
	gauge(descLevel, float64(s.lim.Level()), cl)
	emergency := 0.0
	if state.Emergency {
		emergency = 1
	}
	gauge(descEmergency, emergency, cl)
	gauge(descUsage, state.Usage, cl)
	gauge(descLatency, s.lim.Latency().Seconds(), cl)
	counter(descChanges, s.lim.ConfigChanges(), cl)
	counter(descFlushes, s.lim.StatsFlushes(), cl)
	for _, c := range s.conns.Snapshot() {
		if c.App == "" {
			gauge(descClConns, float64(c.Current), cl)
			gauge(descClConnsPeak, float64(c.Peak), cl)
			counter(descClConnsRej, c.Rejected, cl)
			continue
		}
		gauge(descConns, float64(c.Current), cl, c.App)
		gauge(descConnsPeak, float64(c.Peak), cl, c.App)
		counter(descConnsRej, c.Rejected, cl, c.App)
		counter(descConnsLeak, c.Leaked, cl, c.App)
	}
}
