package limiter

import (
	"context"
	"sync"
	"time"
)

// MemoryStore is the in-process Store: the embedded default when no Redis is configured. It runs
// the L1/L2 rules of the Redis store in Go (the semantics are spelled out in the memstore_*.go
// files, step by step, so the Redis Lua can be checked against them line by line).
//
// It keeps per-instance records (heartbeats, in-flight counts) exactly as Redis does, so several
// limiters in one process may share one MemoryStore to simulate a fleet. It is safe for
// concurrent use; one mutex is enough because it is called per lease and per report, never per
// request.
type MemoryStore struct {
	now func() time.Time

	mu        sync.Mutex
	apps      map[memAppKey]*memBucket
	clusters  map[string]*memLedger
	lastSweep int64 // µs; when expired app records were last dropped
}

// memAppKey names one app's L2 record (Redis: <prefix>:{<cluster>/<app>}:l2).
type memAppKey struct{ cluster, app string }

// NewMemoryStore returns an empty MemoryStore that reads the time from now (nil: time.Now).
func NewMemoryStore(now func() time.Time) *MemoryStore {
	if now == nil {
		now = time.Now
	}
	return &MemoryStore{
		now:      now,
		apps:     make(map[memAppKey]*memBucket),
		clusters: make(map[string]*memLedger),
	}
}

// nowUS is the store's time in microseconds since the Unix epoch (the semantics' now_us).
func (m *MemoryStore) nowUS() int64 { return m.now().UnixMicro() }

// Lease refills the app's bucket and takes tokens from it (see memBucket.lease).
func (m *MemoryStore) Lease(ctx context.Context, req LeaseRequest) (Lease, error) {
	if err := ctx.Err(); err != nil {
		return Lease{}, err
	}
	if err := memCheckLease(req); err != nil {
		return Lease{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.nowUS()
	m.sweep(now)
	b := m.bucket(memAppKey{req.Cluster.ID, req.App}, req.Policy, now)
	b.refill(req.Policy, req.Factor, now)
	l := b.lease(req.Policy, req.Factor, req.Want, req.Need)
	b.touch(req.Policy, now)
	return l, nil
}

// Return refills the app's bucket at factor 1 and adds the returned tokens, capped at burst.
// Tokens <= 0 is a no-op: no refill, no write.
func (m *MemoryStore) Return(ctx context.Context, ret Return) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := memCheckReturn(ret); err != nil {
		return err
	}
	if ret.Tokens <= 0 {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.nowUS()
	m.sweep(now)
	b := m.bucket(memAppKey{ret.Cluster.ID, ret.App}, ret.Policy, now)
	b.refill(ret.Policy, 1, now)
	b.give(ret.Policy, ret.Tokens)
	b.touch(ret.Policy, now)
	return nil
}

// Report records one instance's heartbeat, in-flight counts and statistics, feeds L1's usage
// window and returns L1's state. It never changes tokens.
func (m *MemoryStore) Report(ctx context.Context, rep Report) (ClusterState, error) {
	if err := ctx.Err(); err != nil {
		return ClusterState{}, err
	}
	if err := memCheckReport(rep); err != nil {
		return ClusterState{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.nowUS()
	m.sweep(now)

	l := m.ledger(rep.Cluster.ID)
	var st ClusterState
	st.LiveInstances = l.heartbeat(rep.Instance, now)                        // step 1
	st.RemoteClusterInFlight, st.RemoteInFlight = l.recordInFlight(rep, now) // step 2
	var cost int64
	for _, a := range rep.Apps {
		cost += a.Cost
	}
	if rep.Cluster.Capacity > 0 {
		st.Usage = l.addUsage(cost, rep.Cluster.Capacity, now) // step 3
	}
	for _, a := range rep.Apps { // step 4: statistics only, no token change
		m.statsRecord(memAppKey{rep.Cluster.ID, a.App}, now).requests += a.Requests
	}
	if rep.Cluster.Capacity > 0 {
		l.updateEmergency(st.Usage, rep.Cluster.EmergencyThreshold, now) // step 5
		st.Emergency = l.emergency
		if l.emergency {
			st.EmergencyReason = l.reason
		}
	}
	st.Factors = Factors(rep.Cluster, st.Usage, st.Emergency) // step 6
	return st, nil
}

// Close is a no-op: the MemoryStore holds no external resources.
func (m *MemoryStore) Close() error { return nil }

// MemoryAppState is a snapshot of one app's L2 record, for statistics and tests.
type MemoryAppState struct {
	Tokens   float64   // tokens in the bucket as of TS (no refill is applied by the snapshot)
	TS       time.Time // time of the last refill
	Debt     float64
	Borrowed float64
	Consumed int64 // total tokens granted by leases
	Requests int64 // total requests reported
}

// AppState returns the app's L2 record as stored, without refilling it; ok is false if the
// app has no record (or it has expired). A record created by a Report alone has statistics
// but no bucket yet: its Tokens and TS are zero.
func (m *MemoryStore) AppState(cluster, app string) (s MemoryAppState, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b := m.lookup(memAppKey{cluster, app}, m.nowUS())
	if b == nil {
		return MemoryAppState{}, false
	}
	s = MemoryAppState{Debt: b.debt, Borrowed: b.borrowed, Consumed: b.consumed, Requests: b.requests}
	if b.hasBucket {
		s.Tokens, s.TS = b.tokens, time.UnixMicro(b.ts)
	}
	return s, true
}

// Interface guard.
var _ Store = (*MemoryStore)(nil)
