package tierbucket

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tierbucket/caddy-tierbucket/limiter"
)

// storeLatency is caddy_rate_limit_store_latency_seconds (DESIGN §12). Store calls are batched
// (leases, returns, periodic reports), never one per request, so observing each one is cheap.
var storeLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
	Name:    metricsNS + "store_latency_seconds",
	Help:    "Latency of the Store's calls (lease, return, report), errors included.",
	Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
}, []string{"cluster", "op"})

// timedStore wraps a Store and observes the latency of every call.
type timedStore struct {
	limiter.Store
	lease, ret, report prometheus.Observer
}

func newTimedStore(st limiter.Store, cluster string) *timedStore {
	return &timedStore{
		Store:  st,
		lease:  storeLatency.WithLabelValues(cluster, "lease"),
		ret:    storeLatency.WithLabelValues(cluster, "return"),
		report: storeLatency.WithLabelValues(cluster, "report"),
	}
}

// Lease times the Store's Lease.
func (s *timedStore) Lease(ctx context.Context, req limiter.LeaseRequest) (limiter.Lease, error) {
	start := time.Now()
	l, err := s.Store.Lease(ctx, req)
	s.lease.Observe(time.Since(start).Seconds())
	return l, err
}

// Return times the Store's Return.
func (s *timedStore) Return(ctx context.Context, ret limiter.Return) error {
	start := time.Now()
	err := s.Store.Return(ctx, ret)
	s.ret.Observe(time.Since(start).Seconds())
	return err
}

// Report times the Store's Report.
func (s *timedStore) Report(ctx context.Context, rep limiter.Report) (limiter.ClusterState, error) {
	start := time.Now()
	st, err := s.Store.Report(ctx, rep)
	s.report.Observe(time.Since(start).Seconds())
	return st, err
}

var _ limiter.Store = (*timedStore)(nil)
