package memstore

import (
	"context"
	"sync"
	"time"

	"github.com/tierbucket/caddy-tierbucket/clock"
	"github.com/tierbucket/caddy-tierbucket/store"
)

// Where the Store semantics is silent or ambiguous, the memory store does the following, and the
// Redis store (redislua) must do the same (the shared suite store/storetest and the
// differential test check it):
//
//   - Lease: "avail >= need and need > 0 → avail" plus "Need = 0: grant min(want, avail)" is
//     simply "avail >= need → avail" (avail is never negative).
//   - retry_after_us = min(2^53, ceil((need - tokens) / rate * 1e6)), evaluated in that order;
//     debt is not included (literal spec); 1 s when rate = guaranteed × factor is 0.
//   - Return does not refill (this supersedes the Store semantics' "refill at factor 1"): it only
//     does tokens = min(burst, tokens + Tokens) and leaves ts alone, so the time before the
//     return is refilled later at the factor of the next lease. A refill at factor 1 would hand
//     a throttled app (factor < 1, e.g. in an emergency) tokens at the full rate; since
//     min(B, m + a) = min(B, t + n + a) for m = min(B, t + n), deferring the refill changes
//     nothing else.
//     An absent bucket is created full (ts = now), as for a lease.
//   - Return with Tokens <= 0 does nothing at all: no write, no new record.
//   - A Report for an app without a bucket creates a statistics-only record (Redis: HINCRBY on
//     an absent hash); the first lease still finds a full bucket. Its idle lifetime is the one
//     set by the app's last lease/return, or 60 s.
//   - Idle lifetime: ceil(max(60 s, 2 × burst / guaranteed, warmup)) in µs, at most 30 days;
//     a record is gone once now - last write >= lifetime.
//   - Warm-up (AppPolicy.Warmup): see memBucket.warm and memBucket.lease. Every grant records
//     its time (last_grant), with or without a warm-up; a Return or Report never does, so a
//     record they created is cold at its first lease.
//   - In-flight per app: an (app, instance) entry counts while the last report that carried
//     the app is at most InstanceTTL old (see memLedger.recordInFlight).
//   - RemoteInFlight omits apps whose remote sum is 0 and is nil when none is left.
//   - Leaving the automatic emergency clears its reason; EmergencyReason is "" outside an
//     emergency. The automatic emergency reports EmergencySource "auto", reason "auto" and no
//     EmergencyUntil.
//   - The operator emergency (SetEmergency) is kept per cluster ledger beside the automatic
//     one (Redis: fields op_active, op_reason, op_until_us of the :l1 hash; until in whole µs,
//     0 = until deactivated). It ends at the first Report or SetEmergency whose now >= until
//     (an active one set with until <= now is not set). While in force every Report answers
//     Emergency, EmergencySource "operator", its reason and until, and factors = the ratios,
//     with or without L1; the automatic state is still updated underneath.
//   - Report.Seq (idempotent reports): an instance's last applied Seq is kept per cluster
//     ledger (Redis: field "seq:<instance>" of the :l1 hash, written even without L1) and per
//     app record (field "seq:<instance>" of the :l2 hash), with the time of the instance's last
//     numbered report, and dropped at a report once that time is more than ReportSeqTTL old
//     (see memSeqs). A report whose Seq is not above the kept one adds cost 0 to the window
//     and 0 requests, and otherwise runs as usual (heartbeat, in-flight, a stats write).
//   - Borrowing (LeaseRequest.Unallocated): the pool and L1's per-app records live in the
//     cluster ledger (Redis: fields pool, pool_ts, "borrowed:<app>" of the :l1 hash, renewed
//     like it); see memLedger.borrow and memBucket.credit. Only the exact shortfall is
//     borrowed, all or nothing, and never during a warm-up ramp.
//   - Report.Leaving: after the report is applied and answered, the instance's heartbeat,
//     cluster in-flight count and cluster-scope slot holding are removed, and its in-flight
//     count and slot holding of each app of the report (see memLedger.leave); nothing else of
//     it (Seqs, other apps' entries, other scopes' holdings, heard_since) changes. (Redis gives
//     its nodes entry an expired time, which every reader prunes first: the same.)
//   - Invalid calls are errors, never stored: guaranteed must be > 0, guaranteed <= burst
//     <= 2^53, factor finite and >= 0, want/need/counts/costs >= 0, capacity finite and >= 0,
//     and a report needs an instance id.

// Store is the in-process Store: the embedded default when no Redis is configured. It runs
// the L1/L2 rules of the Redis store in Go (the semantics are spelled out in this package's
// files, step by step, so the Redis Lua can be checked against them line by line).
//
// It keeps per-instance records (heartbeats, in-flight counts) exactly as Redis does, so several
// limiters in one process may share one Store to simulate a fleet. It is safe for
// concurrent use; one mutex is enough because it is called per lease and per report, never per
// request.
type Store struct {
	clock clock.Clock

	mu        sync.Mutex
	apps      map[memAppKey]*memBucket
	clusters  map[string]*memLedger
	lastSweep int64 // µs; when expired app records were last dropped

	overrides map[string]*memOverrides // by cluster id
	audit     map[string][][]byte      // by cluster id, oldest first
	watchers  map[string]memWatchers   // by cluster id
	lastWatch int
}

// memAppKey names one app's L2 record (Redis: <prefix>:{<cluster>/<app>}:l2).
type memAppKey struct{ cluster, app string }

// New returns an empty Store that reads the time from clk (nil: the system clock).
func New(clk clock.Clock) *Store {
	return &Store{
		clock:     clock.Or(clk),
		apps:      make(map[memAppKey]*memBucket),
		clusters:  make(map[string]*memLedger),
		overrides: make(map[string]*memOverrides),
		audit:     make(map[string][][]byte),
		watchers:  make(map[string]memWatchers),
	}
}

// nowUS is the store's time in microseconds since the Unix epoch (the semantics' now_us).
func (m *Store) nowUS() int64 { return m.clock.Now().UnixMicro() }

// Lease refills the app's bucket and takes tokens from it (see memBucket.lease).
func (m *Store) Lease(ctx context.Context, req store.LeaseRequest) (store.Lease, error) {
	if err := ctx.Err(); err != nil {
		return store.Lease{}, err
	}
	if err := req.Validate(); err != nil {
		return store.Lease{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.nowUS()
	m.sweep(now)
	b := m.bucket(memAppKey{req.Cluster.ID, req.App}, req.Policy, now)
	var prev uint64
	if req.Stats.Seq != 0 { // statistics first, as lease.lua applies them
		var fresh bool
		fresh, prev = b.seqs.apply(req.Instance, req.Stats.Seq, now)
		if fresh {
			b.requests += req.Stats.Requests
		}
	}
	l, err := m.leaseBucket(req, b, now)
	l.PrevSeq = prev
	return l, err
}

// leaseBucket is Lease on the app's record b (m.mu held).
func (m *Store) leaseBucket(req store.LeaseRequest, b *memBucket, now int64) (store.Lease, error) {
	b.refill(req.Policy, req.Factor, now)
	l, short := b.lease(req.Policy, req.Factor, req.Want, req.Need, now)
	b.touch(req.Policy, req.StatsInterval, now)
	if short > 0 && req.BorrowingAllowed() {
		// Borrowing (LeaseRequest.Unallocated): the pool first, then the app, as in Redis.
		got, reason := m.ledger(req.Cluster.ID).borrow(req.App, b.borrowed, req.Policy.MaxBorrow, req.Unallocated, short, now)
		if got == 0 {
			l.Reason = reason
			return l, nil
		}
		retry := l.RetryAfter
		l = b.credit(req.Policy, got, req.Need, now)
		if l.Granted == 0 {
			l.RetryAfter = retry
		}
	}
	return l, nil
}

// BorrowState returns the app's borrowing as stored (see store.BorrowState); zero without a record.
func (m *Store) BorrowState(ctx context.Context, cluster, app string) (store.BorrowState, error) {
	if err := ctx.Err(); err != nil {
		return store.BorrowState{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var s store.BorrowState
	if b := m.lookup(memAppKey{cluster, app}, m.nowUS()); b != nil {
		s.Debt, s.Borrowed = b.debt, b.borrowed
	}
	if l := m.clusters[cluster]; l != nil {
		s.Recorded = l.borrowed[app]
	}
	return s, nil
}

// Return adds the returned tokens to the app's bucket, capped at burst, without refilling it
// (the elapsed time is refilled by the next lease, at that lease's factor), after the
// statistics it carries. Tokens <= 0 is a no-op: no write.
func (m *Store) Return(ctx context.Context, ret store.Return) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := ret.Validate(); err != nil {
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
	if ret.Stats.Seq != 0 { // statistics first, as return.lua applies them
		if fresh, _ := b.seqs.apply(ret.Instance, ret.Stats.Seq, now); fresh {
			b.requests += ret.Stats.Requests
		}
	}
	b.give(ret.Policy, ret.Tokens)
	b.touch(ret.Policy, ret.StatsInterval, now)
	return nil
}

// Report records one instance's heartbeat, in-flight counts and statistics, feeds L1's usage
// window and returns L1's state. It never changes tokens.
func (m *Store) Report(ctx context.Context, rep store.Report) (store.ClusterState, error) {
	if err := ctx.Err(); err != nil {
		return store.ClusterState{}, err
	}
	if err := rep.Validate(); err != nil {
		return store.ClusterState{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.nowUS()
	m.sweep(now)

	l := m.ledger(rep.Cluster.ID)
	l1 := rep.Cluster.Capacity > 0
	var st store.ClusterState
	// 1. heartbeat; 2. in-flight counts.
	st.LiveInstances, st.Rejoined = l.heartbeat(rep.Instance, now)
	st.RemoteClusterInFlight, st.RemoteInFlight = l.recordInFlight(rep, now)
	// 3. usage window; the cost of a Seq already applied counts as 0.
	fresh, _ := l.seqs.apply(rep.Instance, rep.Seq, now)
	if l1 {
		var cost int64
		if fresh {
			cost = rep.Cost
			for _, a := range rep.Apps {
				cost += a.Cost
			}
		}
		window := l.addUsage(cost, rep.CostSpanMicros(), now)
		// 3a. the capacity in force: learned (adaptive) or configured.
		var sig *store.Signals
		if fresh {
			sig = &rep.Signals
		}
		st.Capacity, st.CapacitySource = l.ctl.inForce(rep.Cluster, sig, window, now)
		if rep.Cluster.Adaptive.On() {
			st.Adaptive = l.ctl.last
		}
		st.Usage = window / st.Capacity
	}
	// 4. app statistics only: no token changes. Each app record keeps its own Seqs (Redis: one
	// slot per script), so a report half applied before a failure is completed by its resend.
	for _, a := range rep.Apps {
		r := m.statsRecord(memAppKey{rep.Cluster.ID, a.App}, rep.StatsInterval, now)
		seq := a.Seq
		fresh, prev := r.seqs.apply(rep.Instance, seq, now)
		if fresh {
			r.requests += a.Requests
		}
		if seq != 0 {
			if st.PrevSeq == nil {
				st.PrevSeq = make(map[string]uint64, len(rep.Apps))
			}
			st.PrevSeq[a.App] = prev
		}
	}
	// 5. automatic emergency.
	if l1 {
		learned := rep.Cluster.Adaptive.On()
		l.updateEmergency(st.Usage, rep.Cluster.EmergencyThreshold, now, learned, !learned || l.ctl.refusing())
		st.Emergency = l.emergency
		if l.emergency {
			st.EmergencySource, st.EmergencyReason = store.EmergencySourceAuto, l.reason
		}
	}
	// 5b. operator emergency: wins over the automatic one (which goes on beside it), also
	// without L1.
	if l.operator(now) {
		st.Emergency, st.EmergencySource, st.EmergencyReason = true, store.EmergencySourceOperator, l.opReason
		if l.opUntil != 0 {
			st.EmergencyUntil = time.UnixMicro(l.opUntil)
		}
	}
	// 6. factors.
	st.Factors = Factors(rep.Cluster, st.Usage, st.Emergency)
	st.ConfigVersion = m.configVersion(rep.Cluster.ID)
	// 7. a leaving instance leaves the live set once its report is applied.
	if rep.Leaving {
		l.leave(rep)
	}
	return st, nil
}

// SetEmergency sets or clears the cluster's operator emergency (see Store.SetEmergency).
func (m *Store) SetEmergency(ctx context.Context, cluster store.ClusterPolicy, e store.Emergency) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := store.ValidateEmergency(cluster, e); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.nowUS()
	m.sweep(now)
	m.ledger(cluster.ID).setOperator(e, now)
	return nil
}

// Close is a no-op: the Store holds no external resources.
func (m *Store) Close() error { return nil }

// MemoryAppState is a snapshot of one app's L2 record, for statistics and tests.
type MemoryAppState struct {
	Tokens   float64   // tokens in the bucket as of TS (no refill is applied by the snapshot)
	TS       time.Time // time of the last refill
	Debt     float64
	Borrowed float64
	Consumed int64 // total tokens granted by leases
	Requests int64 // total requests reported

	LastGrant   time.Time // last grant or warm-up start; zero: none
	WarmStart   time.Time // start of the warm-up stored; zero: none
	WarmGranted int64     // granted since WarmStart
}

// AppState returns the app's L2 record as stored, without refilling it; ok is false if the
// app has no record (or it has expired). A record created by a Report alone has statistics
// but no bucket yet: its Tokens and TS are zero.
func (m *Store) AppState(cluster, app string) (s MemoryAppState, ok bool) {
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
	if b.hasGrant {
		s.LastGrant = time.UnixMicro(b.lastGrant)
	}
	if b.warming {
		s.WarmStart, s.WarmGranted = time.UnixMicro(b.warmStart), b.warmGranted
	}
	return s, true
}

// AppRequests returns the requests reported for the app (0 if it has no record), like the
// Redis store's method of the same name.
func (m *Store) AppRequests(ctx context.Context, cluster, app string) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s, _ := m.AppState(cluster, app)
	return s.Requests, nil
}

// Interface guard.
var _ store.Store = (*Store)(nil)
