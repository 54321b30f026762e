package tierbucket

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// storeLatency is caddy_rate_limit_store_latency_seconds. Store calls are batched
// (leases, returns, periodic reports), never one per request, so observing each one is cheap.
var storeLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
	Name:    metricsNS + "store_latency_seconds",
	Help:    "Latency of the Store's calls (lease, return, report), errors included.",
	Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
}, []string{"cluster", "op"})

// storeErrors is caddy_rate_limit_store_errors_total: every failed Store call, by operation,
// permanent errors (credentials, permissions, certificates) and faults alike.
var storeErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: metricsNS + "store_errors_total",
	Help: "Failed Store calls, by operation (faults and permanent errors such as a refused password, a missing ACL permission or an untrusted certificate).",
}, []string{"cluster", "op"})

// timedStore wraps a Store, observes the latency of every call and counts the failed ones.
type timedStore struct {
	store.Store
	lease, ret, report                         prometheus.Observer
	leaseErr, retErr, reportErr                prometheus.Counter
	emergencyErr, overridesErr, setOverrideErr prometheus.Counter
}

func newTimedStore(st store.Store, cluster string) *timedStore {
	return &timedStore{
		Store:          st,
		lease:          storeLatency.WithLabelValues(cluster, "lease"),
		ret:            storeLatency.WithLabelValues(cluster, "return"),
		report:         storeLatency.WithLabelValues(cluster, "report"),
		leaseErr:       storeErrors.WithLabelValues(cluster, "lease"),
		retErr:         storeErrors.WithLabelValues(cluster, "return"),
		reportErr:      storeErrors.WithLabelValues(cluster, "report"),
		emergencyErr:   storeErrors.WithLabelValues(cluster, "set_emergency"),
		overridesErr:   storeErrors.WithLabelValues(cluster, "overrides"),
		setOverrideErr: storeErrors.WithLabelValues(cluster, "set_override"),
	}
}

func count(c prometheus.Counter, err error) {
	if err != nil {
		c.Inc()
	}
}

// Lease times the Store's Lease.
func (s *timedStore) Lease(ctx context.Context, req store.LeaseRequest) (store.Lease, error) {
	start := time.Now()
	l, err := s.Store.Lease(ctx, req)
	s.lease.Observe(time.Since(start).Seconds())
	count(s.leaseErr, err)
	return l, err
}

// Return times the Store's Return.
func (s *timedStore) Return(ctx context.Context, ret store.Return) error {
	start := time.Now()
	err := s.Store.Return(ctx, ret)
	s.ret.Observe(time.Since(start).Seconds())
	count(s.retErr, err)
	return err
}

// Report times the Store's Report.
func (s *timedStore) Report(ctx context.Context, rep store.Report) (store.ClusterState, error) {
	start := time.Now()
	st, err := s.Store.Report(ctx, rep)
	s.report.Observe(time.Since(start).Seconds())
	count(s.reportErr, err)
	return st, err
}

// SetEmergency counts the Store's SetEmergency errors.
func (s *timedStore) SetEmergency(ctx context.Context, c store.ClusterPolicy, e store.Emergency) error {
	err := s.Store.SetEmergency(ctx, c, e)
	count(s.emergencyErr, err)
	return err
}

// Overrides counts the Store's Overrides errors.
func (s *timedStore) Overrides(ctx context.Context, cluster string) (store.Overrides, error) {
	o, err := s.Store.Overrides(ctx, cluster)
	count(s.overridesErr, err)
	return o, err
}

// SetOverride counts the Store's SetOverride errors (a version conflict is an answer, not an
// error of the Store).
func (s *timedStore) SetOverride(ctx context.Context, cluster string, ch store.OverrideChange) (uint64, error) {
	v, err := s.Store.SetOverride(ctx, cluster, ch)
	if err != nil && !errors.Is(err, store.ErrVersionConflict) && !errors.Is(err, store.ErrTooManyOverrides) {
		s.setOverrideErr.Inc()
	}
	return v, err
}

var _ store.Store = (*timedStore)(nil)
