package metrics

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// storeLatency is caddy_rate_limit_store_latency_seconds. Store calls are batched (leases,
// returns, periodic reports), never one per request, so observing each one is cheap.
var storeLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
	Name:    Namespace + "store_latency_seconds",
	Help:    "Latency of the Store's calls, by operation, errors included.",
	Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
}, []string{"cluster", "op"})

// storeErrors is caddy_rate_limit_store_errors_total: every failed Store call, by operation,
// permanent errors (credentials, permissions, certificates) and faults alike.
var storeErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: Namespace + "store_errors_total",
	Help: "Failed Store calls, by operation (faults and permanent errors such as a refused password, a missing ACL permission or an untrusted certificate).",
}, []string{"cluster", "op"})

// StoreErrors is the counter of the failed calls of cluster's Store named op, for the calls
// made outside the Store interface (the start-up probe, the override subscription).
func StoreErrors(cluster, op string) prometheus.Counter {
	return storeErrors.WithLabelValues(cluster, op)
}

// ForgetStore removes the Store series of cluster, so that a cluster id no live state uses
// any more does not keep them for the life of the process.
func ForgetStore(cluster string) {
	storeLatency.DeletePartialMatch(prometheus.Labels{"cluster": cluster})
	storeErrors.DeletePartialMatch(prometheus.Labels{"cluster": cluster})
}

// An op is one Store method: its label is the method's name in snake_case.
type op uint8

const (
	opLease op = iota
	opReturn
	opReport
	opSetEmergency
	opOverrides
	opSetOverride
	opWatch
	opLeaseSlots
	opAppendAudit
	opAudit
	opClose
	numOps
)

var opNames = [numOps]string{
	"lease", "return", "report", "set_emergency", "overrides",
	"set_override", "watch", "lease_slots", "append_audit", "audit", "close",
}

// Store is a store.Store that observes the latency of every call of the Store it wraps and
// counts the failed ones. It implements each method of store.Store itself and embeds nothing,
// so a method added to the interface does not compile until it is instrumented here.
type Store struct {
	next    store.Store
	latency [numOps]prometheus.Observer
	errors  [numOps]prometheus.Counter
}

// NewStore wraps st, labelling its series with cluster.
func NewStore(st store.Store, cluster string) *Store {
	s := &Store{next: st}
	for o := range numOps {
		s.latency[o] = storeLatency.WithLabelValues(cluster, opNames[o])
		s.errors[o] = storeErrors.WithLabelValues(cluster, opNames[o])
	}
	return s
}

// timed runs call as a call of o: its latency is observed and its failure counted.
func timed[T any](s *Store, o op, call func() (T, error)) (T, error) {
	start := time.Now()
	v, err := call()
	s.done(o, start, err)
	return v, err
}

// timedErr is timed for a call that returns only an error.
func (s *Store) timedErr(o op, call func() error) error {
	_, err := timed(s, o, func() (struct{}, error) { return struct{}{}, call() })
	return err
}

// done observes a call of o that started at start and ended with err.
func (s *Store) done(o op, start time.Time, err error) {
	s.latency[o].Observe(time.Since(start).Seconds())
	if err != nil {
		s.errors[o].Inc()
	}
}

// Lease calls the Store's Lease.
func (s *Store) Lease(ctx context.Context, req store.LeaseRequest) (store.Lease, error) {
	return timed(s, opLease, func() (store.Lease, error) { return s.next.Lease(ctx, req) })
}

// Return calls the Store's Return.
func (s *Store) Return(ctx context.Context, ret store.Return) error {
	return s.timedErr(opReturn, func() error { return s.next.Return(ctx, ret) })
}

// Report calls the Store's Report.
func (s *Store) Report(ctx context.Context, rep store.Report) (store.ClusterState, error) {
	return timed(s, opReport, func() (store.ClusterState, error) { return s.next.Report(ctx, rep) })
}

// SetEmergency calls the Store's SetEmergency.
func (s *Store) SetEmergency(ctx context.Context, c store.ClusterPolicy, e store.Emergency) error {
	return s.timedErr(opSetEmergency, func() error { return s.next.SetEmergency(ctx, c, e) })
}

// Overrides calls the Store's Overrides.
func (s *Store) Overrides(ctx context.Context, cluster string) (store.Overrides, error) {
	return timed(s, opOverrides, func() (store.Overrides, error) { return s.next.Overrides(ctx, cluster) })
}

// SetOverride calls the Store's SetOverride. A version conflict and a full override table are
// answers, not failures of the Store.
func (s *Store) SetOverride(ctx context.Context, cluster string, ch store.OverrideChange) (uint64, error) {
	start := time.Now()
	v, err := s.next.SetOverride(ctx, cluster, ch)
	failed := err
	if errors.Is(err, store.ErrVersionConflict) || errors.Is(err, store.ErrTooManyOverrides) {
		failed = nil
	}
	s.done(opSetOverride, start, failed)
	return v, err
}

// Watch calls the Store's Watch; the latency is that of putting the watch in place (a refused
// subscription is counted by whoever the Store reports it to, as op "watch").
func (s *Store) Watch(cluster string, notify func()) (stop func()) {
	stop, _ = timed(s, opWatch, func() (func(), error) { return s.next.Watch(cluster, notify), nil })
	return stop
}

// LeaseSlots calls the Store's LeaseSlots.
func (s *Store) LeaseSlots(ctx context.Context, r store.SlotRequest) (store.SlotLease, error) {
	return timed(s, opLeaseSlots, func() (store.SlotLease, error) { return s.next.LeaseSlots(ctx, r) })
}

// AppendAudit calls the Store's AppendAudit.
func (s *Store) AppendAudit(ctx context.Context, cluster string, entry []byte) error {
	return s.timedErr(opAppendAudit, func() error { return s.next.AppendAudit(ctx, cluster, entry) })
}

// Audit calls the Store's Audit.
func (s *Store) Audit(ctx context.Context, cluster string, limit int) ([][]byte, error) {
	return timed(s, opAudit, func() ([][]byte, error) { return s.next.Audit(ctx, cluster, limit) })
}

// Close closes the Store.
func (s *Store) Close() error {
	return s.timedErr(opClose, s.next.Close)
}

var _ store.Store = (*Store)(nil)
