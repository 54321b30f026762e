package metrics

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/tierbucket/caddy-tierbucket/connlimit"
	"github.com/tierbucket/caddy-tierbucket/limiter"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// Namespace prefixes every series of the rate limiter.
const Namespace = "caddy_rate_limit_"

// WildcardApp is the app label of every app id without its own policy.
const WildcardApp = "*"

// Cluster is one cluster's state as the collector reads it.
type Cluster interface {
	// ID is the cluster id (the cluster label).
	ID() string
	// Limiter holds the per-app statistics and L1's last known state.
	Limiter() *limiter.Limiter
	// Connections holds the in-flight counts.
	Connections() *connlimit.Counter
	// PreAppRejections are the decisions taken before there is an app, shown under "*".
	PreAppRejections() (invalidAppID, unknownApp int64)
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(Namespace+name, help, labels, nil)
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
	descCapacity    = desc("capacity_tokens", "L1's capacity in force, cost tokens/s: source config (the configured one), adaptive (learned from the backend's answers) or override (pinned through the admin API). Absent without capacity.", "cluster", "source")
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

// Collector reports every cluster that clusters lists, and the Store series.
type Collector struct {
	clusters func() []Cluster
}

// NewCollector returns the collector of the clusters that clusters lists at each scrape.
func NewCollector(clusters func() []Cluster) *Collector {
	return &Collector{clusters: clusters}
}

// Register registers c on reg (nil: no registry). Every handler of a config registers a
// collector of the same descriptors; like reverse_proxy, the duplicate is tolerated.
func Register(reg *prometheus.Registry, c prometheus.Collector, logger *zap.Logger) {
	if reg == nil {
		return
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			logger.Error("registering rate_limit metrics", zap.Error(err))
		}
	}
}

// Describe sends every descriptor.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{
		descRequests, descCost, descLocalHits, descLocalTokens,
		descBorrowed, descDebt, descLeases, descLeaseTokens, descLevel, descEmergency, descUsage, descCapacity, descLatency, descConns,
		descConnsPeak, descConnsRej, descConnsLeak, descClConns, descClConnsPeak, descClConnsRej, descChanges, descFlushes,
	} {
		ch <- d
	}
	storeLatency.Describe(ch)
	storeErrors.Describe(ch)
}

// Collect reads the counters of every live cluster. During a reload that moves a cluster id to
// another Store both states are live; the first listed is reported.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	seen := map[string]bool{}
	for _, cl := range c.clusters() {
		if seen[cl.ID()] {
			continue
		}
		seen[cl.ID()] = true
		collectCluster(ch, cl)
	}
	storeLatency.Collect(ch)
	storeErrors.Collect(ch)
}

func collectCluster(ch chan<- prometheus.Metric, c Cluster) {
	cl := c.ID()
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	lim := c.Limiter()
	for _, st := range appStats(c) {
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
	state := lim.State()
	gauge(descLevel, float64(lim.Level()), cl)
	emergency := 0.0
	if state.Emergency {
		emergency = 1
	}
	gauge(descEmergency, emergency, cl)
	gauge(descUsage, state.Usage, cl)
	if capacity, source := lim.Capacity(); capacity > 0 {
		gauge(descCapacity, capacity, cl, source)
	}
	gauge(descLatency, lim.Latency().Seconds(), cl)
	counter(descChanges, lim.ConfigChanges(), cl)
	counter(descFlushes, lim.StatsFlushes(), cl)
	for _, cc := range c.Connections().Snapshot() {
		if cc.App == "" {
			gauge(descClConns, float64(cc.Current), cl)
			gauge(descClConnsPeak, float64(cc.Peak), cl)
			counter(descClConnsRej, cc.Rejected, cl)
			continue
		}
		gauge(descConns, float64(cc.Current), cl, cc.App)
		gauge(descConnsPeak, float64(cc.Peak), cl, cc.App)
		counter(descConnsRej, cc.Rejected, cl, cc.App)
		counter(descConnsLeak, cc.Leaked, cl, cc.App)
	}
}

// appStats is the limiter's per-app statistics with the decisions taken before there is an
// app added to "*" (which appears even when unknown apps are rejected).
func appStats(c Cluster) []limiter.AppStats {
	stats := c.Limiter().Stats()
	star := -1
	for i := range stats {
		if stats[i].Label == WildcardApp {
			star = i
		}
	}
	if star < 0 {
		stats = append(stats, limiter.AppStats{Label: WildcardApp})
		star = len(stats) - 1
	}
	invalid, unknown := c.PreAppRejections()
	stats[star].Requests[store.ReasonInvalidAppID] += invalid
	stats[star].Requests[store.ReasonUnknownApp] += unknown
	return stats
}
