package limiter

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// Decision is the answer to one Take.
type Decision struct {
	Allowed    bool          // the request may proceed
	Reason     store.Reason  // why not (ReasonNone when allowed)
	Remaining  int64         // local tokens left plus what L2 had at the last lease (for headers)
	RetryAfter time.Duration // when rejected: when tokens are expected again
	LocalHit   bool          // admitted from local tokens without waiting on the Store
	Limit      int64         // the app's burst (for headers)
	Minted     bool          // admitted without leased tokens (Store unavailable): see Settle
}

// appPolicy is an AppPolicy with the figures the hot path needs precomputed.
type appPolicy struct {
	store.AppPolicy
	burst int64 // floor(Burst), >= 1
}

func newAppPolicy(p store.AppPolicy) *appPolicy {
	return &appPolicy{AppPolicy: p, burst: max(1, int64(p.Burst))}
}

// App is one local (L3) bucket: a configured app, the shared bucket of unknown apps ("*"), or an
// isolated unknown app. All methods are safe for concurrent use.
//
// The local balance is one signed counter: positive = tokens leased from L2 and not yet spent,
// negative = local debt (settlement of an underestimate, a request costing more than the burst,
// or one admitted on credit while a lease was slow), which the next lease pays first because
// grants are simply added to it.
type App struct {
	l     *Limiter
	id    string    // the id the Store knows the bucket by
	label string    // metric label: configured id or "*"
	own   *appStats // an isolated bucket's own counters (tenants.go); nil: not isolated
	pol   atomic.Pointer[appPolicy]
	stats *appStats // shared by all unknown apps

	// Written by every admitted request, so kept on one cache line (with what a take reads):
	// requests of one app on several cores then move one line between them, not four.
	balance  atomic.Int64 // local tokens; negative = debt
	consumed atomic.Int64 // see Conservation below
	requests atomic.Int64 // admitted requests (reported as statistics)
	// settledCost is the actual cost of the settled requests (Settle): L1's usage window.
	settledCost atomic.Int64
	refillAt    atomic.Int64 // background refill when the balance falls below this
	l2Left      atomic.Int64 // L2's remaining tokens at the last lease

	retryUntil atomic.Int64 // unix ns: until then, shortfalls are rejected without a Store call
	refusal    atomic.Uint32
	listed     atomic.Bool   // on the sync loop's list (active.go)
	lastUse    atomic.Int64  // unix ns of the last take (isolated apps only)
	lastLease  atomic.Int64  // unix ns of the last grant (lease TTL)
	answered   atomic.Bool   // the app's last lease call succeeded (storeAway)
	l2Debt     atomic.Uint64 // L2's debt at the last lease (float64 bits)
	l2Borrowed atomic.Uint64 // L2's borrowed at the last lease (float64 bits)

	// Conservation:
	// leased + minted = consumed + returned + dropped + balance.
	// minted counts tokens admitted without a lease (rescue / fail-open modes); dropped counts
	// tokens given up by a Return that failed (see returnTokens).
	leased, minted, returned, dropped atomic.Int64

	// Statistics delivery (appstats.go): requests in a batch so far, and the batches.
	sentReqs atomic.Int64
	statsMu  sync.Mutex
	st       appStatsState

	// Owned by the sync loop (tickMu): the settled cost in a report so far, the consumption rate.
	costSent  int64
	lastCons  atomic.Int64 // consumed at the last rate update
	rate      float64      // moving average of consumed cost per second
	rateTgt   atomic.Int64 // rate × horizon()
	short     atomic.Bool  // the last lease got less than it asked for: L2 is near empty
	retiredAt time.Time

	waiting atomic.Int64 // Σ need of the requests waiting on a lease (sizes that lease)

	sig    atomic.Pointer[appSignals] // the backend's answers (signals.go); nil before the first
	pacing atomic.Pointer[pacer]      // spaces takes at the quota under a learned capacity (pace.go); nil: none

	mu     sync.Mutex
	call   *leaseCall // the lease in flight (single-flight)
	rescue rescueBucket
}

// leaseCall is one Store lease shared by every request waiting for it.
type leaseCall struct {
	done chan struct{}
	res  store.Lease
	err  error
}

// doneCall stands for a lease that has already finished successfully.
var doneCall = func() *leaseCall {
	c := &leaseCall{done: make(chan struct{})}
	close(c.done)
	return c
}()

func (l *Limiter) newApp(id, label string, p store.AppPolicy, st *appStats, isolated bool, cfg *Config) *App {
	a := &App{l: l, id: id, label: label, stats: st}
	if isolated {
		a.own = new(appStats)
	}
	a.pol.Store(newAppPolicy(p))
	// Until a rate is measured, the lease target is Reserve (capped like every lease), and the
	// rate the one a Reserve-sized lease covers over LeaseHorizon, so that the target of an app
	// that never comes decays like any other.
	a.rate = float64(cfg.Reserve) / LeaseHorizon.Seconds()
	a.rateTgt.Store(cfg.Reserve)
	a.refillAt.Store(-1 << 62)
	a.st.statsAt = l.clock.Now() // a new app's first statistics wait for its leases
	a.list()
	return a
}

// setPolicy applies a new policy (a reload, an admin override). A refusal recorded under the
// old one no longer holds: its retry time was computed from the old refill rate (an override
// to 0.1 tokens/s, removed again, would otherwise keep the app refused for 20 s).
func (a *App) setPolicy(p store.AppPolicy) {
	if old := a.pol.Load(); old != nil && old.AppPolicy == p {
		return
	}
	a.pol.Store(newAppPolicy(p))
	a.retryUntil.Store(0)
	a.short.Store(false)
	a.pacing.Store(nil)
	a.list()
}

// horizon is how long a lease lasts at the app's rate: LeaseHorizon, or AtQuotaHorizon while
// L2 is near empty (the last lease came back short). An app at its quota then leases in small
// batches, so that its instances share what L2 refills fairly, and each of those calls is worth
// making; an app within its quota leases for LeaseHorizon.
func (a *App) horizon(cfg Config) time.Duration {
	if a.short.Load() {
		return AtQuotaHorizon(cfg, a.l.state.Load().LiveInstances)
	}
	return LeaseHorizon
}

// AtQuotaHorizon is how long a lease lasts for an app at its quota on live instances: three sync
// intervals, or live × AtQuotaSpacing in a larger fleet, at most LeaseHorizon, so that the
// fleet's calls for the app stay bounded.
func AtQuotaHorizon(cfg Config, live int) time.Duration {
	return min(max(3*cfg.SyncInterval, time.Duration(max(live, 1))*AtQuotaSpacing), LeaseHorizon)
}

// paced reports whether the instances of an app at its quota pace themselves (docs/design.md,
// "Lease sizes"): after a short lease, each asks for its share of what L2 refills and waits
// until that share has covered what it got. A lone instance has no one to share with. Without
// pacing, a small fleet's instances asked as soon as what one lacked had refilled at the app's
// whole rate, up to ten times a second each: three to four times the calls, and no fairer.
func paced(live int) bool { return live > 1 }

// contestedEarly reports whether L2 counts as contested already when a lease left it below a
// quarter of the burst, before any lease came back short: in a fleet whose live ×
// AtQuotaSpacing exceeds three sync intervals, where the instances served first would
// otherwise keep being served. A smaller fleet leaves a burst first come, first served until
// L2 is empty.
func contestedEarly(cfg Config, live int) bool {
	return time.Duration(live)*AtQuotaSpacing > 3*cfg.SyncInterval
}

// Label returns the metric label: the configured id, or "*" for unknown apps.
func (a *App) Label() string { return a.label }

// ID returns the id the bucket is known by in the Store ("*" for the shared unknown bucket).
func (a *App) ID() string { return a.id }

// Policy returns the app's current policy.
func (a *App) Policy() store.AppPolicy { return a.pol.Load().AppPolicy }

// Tokens returns the local tokens (never negative) and the local debt.
func (a *App) Tokens() (tokens, debt int64) {
	b := a.balance.Load()
	return max(b, 0), max(-b, 0)
}

// Remaining is what the app may still spend as this instance knows it: its local tokens and
// what L2 held at its last lease (the headers' remaining).
func (a *App) Remaining() int64 { return max(a.balance.Load(), 0) + a.l2Left.Load() }

// Borrowing returns the app's L2 borrowed and debt as the last lease from this instance saw
// them (after that lease's refill and borrow); 0 before any lease.
func (a *App) Borrowing() (borrowed, debt float64) {
	return math.Float64frombits(a.l2Borrowed.Load()), math.Float64frombits(a.l2Debt.Load())
}

// Take asks for cost tokens. A local hit is lock-free and allocation-free; otherwise one lease
// shared by all waiting requests is made, bounded by StoreTimeout. With maxWait > 0 a rejected
// request waits (respecting ctx) up to maxWait for tokens instead of being rejected at once.
//
// A request costing more than the app's burst can never be covered by L2; it is admitted when a
// full burst's worth of tokens can be taken, and the excess becomes local debt.
//
// A disabled app (store.AppPolicy.Disabled) is refused with ReasonAppDisabled at once, without
// waiting and without touching its tokens.
func (a *App) Take(ctx context.Context, cost int64, maxWait time.Duration) Decision {
	if p := a.pol.Load(); p.Disabled {
		return Decision{Reason: store.ReasonAppDisabled, Remaining: a.Remaining(), Limit: p.burst}
	}
	d := a.take(ctx, cost)
	if d.Allowed || maxWait <= 0 {
		return d
	}
	return a.wait(ctx, cost, maxWait, d)
}

func (a *App) take(ctx context.Context, cost int64) Decision {
	cost = max(cost, 0)
	l := a.l
	p := a.pol.Load()
	st := l.state.Load()
	if st.Emergency && st.Factors[p.Priority] <= 0 {
		retry := probeInterval // L1 leaves an automatic emergency at a report, not at a known time
		if !st.EmergencyUntil.IsZero() {
			retry = st.EmergencyUntil.Sub(l.clock.Now())
		}
		return a.reject(p, st, store.ReasonEmergencyBlocked, retry)
	}
	need := min(cost, p.burst)
	pc := a.pacing.Load()
	if pc != nil && cost > 0 {
		if d, ok := a.paceTake(pc, cost, p, st); !ok {
			return d
		}
	}
	if a.tryTake(cost, need) {
		a.admitted(cost, l)
		a.stats.localHits.Add(1)
		b := a.balance.Load()
		if b < a.refillAt.Load() {
			a.refill()
		}
		return Decision{Allowed: true, Remaining: max(b, 0) + a.l2Left.Load(), LocalHit: true, Limit: p.burst}
	}
	return a.slow(ctx, cost, need, p, st, pc != nil)
}

// tryTake subtracts cost if the balance covers need (need < cost only above the burst).
func (a *App) tryTake(cost, need int64) bool {
	if cost == 0 {
		return true
	}
	for {
		b := a.balance.Load()
		if b < need {
			return false
		}
		if a.balance.CompareAndSwap(b, b-cost) {
			return true
		}
	}
}

// admitted counts an admitted take in the pending statistics.
func (a *App) admitted(cost int64, l *Limiter) {
	a.consumed.Add(cost)
	a.requests.Add(1)
	if a.own != nil { // isolated
		a.lastUse.Store(l.clock.Now().UnixNano())
	}
	a.list()
}

// storeAway reports whether the app's shortfalls go to the rescue bucket: the limiter is in
// fail_open and the app's own last lease failed (or it has not leased yet). In a partial
// outage, a Redis Cluster master down, the other apps' leases still succeed: they keep leasing
// instead of taking the rescue bucket too, which would admit them up to twice their quota (the
// report, on the cluster's slot, ends fail_open every second and the next failure resumes it).
// In a whole outage each app finds out with one lease of its own: its first shortfall waits at
// most the Redis timeout (then it is admitted on credit or by the rescue bucket), and the
// rescue bucket serves the rest.
func (a *App) storeAway() bool {
	return a.l.Level() == LevelFailOpen && !a.answered.Load()
}

// slow handles a take the local tokens cannot cover.
// placed says whether the take already has its place in the pacer's schedule.
func (a *App) slow(ctx context.Context, cost, need int64, p *appPolicy, st *store.ClusterState, placed bool) Decision {
	l := a.l
	if retry, ok := a.refused(l.clock.Now().UnixNano(), need); ok {
		return a.reject(p, st, a.refusalReason(), retry)
	}
	if l.closed.Load() {
		return a.reject(p, st, store.ReasonRedisUnavailable, probeInterval)
	}
	if a.storeAway() {
		return a.failTake(cost, need, p, st)
	}
	if ctx == nil {
		ctx = context.Background()
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(parent, l.snap().cfg.StoreTimeout)
	defer cancel()
	a.waiting.Add(need)
	defer a.waiting.Add(-need)
	for range 3 {
		c := a.startLease(need)
		if c == nil {
			c = doneCall
		}
		select {
		case <-c.done:
		case <-ctx.Done():
			if parent.Err() != nil {
				return a.reject(p, st, store.ReasonAppExhausted, a.oneToken(p, st))
			}
			// The Store is slower than StoreTimeout but has not failed: the lease is still in
			// flight and will be applied. Only a failed call switches to fail-open.
			if a.storeAway() {
				return a.failTake(cost, need, p, st)
			}
			return a.creditTake(cost, need, p, st)
		}
		if c.err != nil {
			if a.storeAway() {
				return a.failTake(cost, need, p, st)
			}
			continue // a probe succeeded since the lease failed: lease again
		}
		// The lease may have put the app on a pace: the requests that waited for it take
		// their places in the schedule too, or they would all go out at once, the burst
		// pacing is for.
		if pc := a.pacing.Load(); !placed && pc != nil && cost > 0 {
			if d, ok := a.paceTake(pc, cost, p, st); !ok {
				return d
			}
			placed = true
		}
		if a.tryTake(cost, need) {
			a.admitted(cost, l)
			return Decision{Allowed: true, Remaining: a.Remaining(), Limit: p.burst}
		}
		if retry, ok := a.refused(l.clock.Now().UnixNano(), need); ok {
			return a.reject(p, st, a.refusalReason(), retry)
		}
	}
	// Leases answered, but other waiters took what they brought. L2 said it had tokens for
	// this request: being outrun is not a refusal, so it is admitted on credit (a lease pays).
	if a.l2Left.Load() >= need {
		return a.creditTake(cost, need, p, st)
	}
	return a.reject(p, st, store.ReasonAppExhausted, a.oneToken(p, st))
}

// refused reports whether a take of need must be rejected without a Store call, and for how
// long: a refused or short lease set retryUntil, and the local balance plus what L2 held at the
// last lease cannot cover need. The refusal was about the need of the request that asked then;
// a cheaper request that L2 can still cover may lease (each lease updates l2Left, so this
// cannot loop).
func (a *App) refused(now, need int64) (time.Duration, bool) {
	ru := a.retryUntil.Load()
	if now >= ru || a.balance.Load()+a.l2Left.Load() >= need {
		return 0, false
	}
	return max(time.Duration(ru-now), a.untilCovered(now, need)), true
}

// untilCovered is how long L2's refill, at the app's rate, takes to cover what need lacks
// beyond the local balance and what L2 held at the last lease: what a refused client is told.
// The refusal itself may end sooner (this instance asks the Store again then, and a lease that
// brought the last tokens sets a short one): a client told that would retry into another
// refusal.
func (a *App) untilCovered(now, need int64) time.Duration {
	p, st := a.pol.Load(), a.l.state.Load()
	rate := p.Guaranteed * st.Factors[p.Priority]
	if !(rate > 0) {
		return 0
	}
	lacking := float64(need-a.balance.Load()-a.l2Left.Load()) - rate*float64(now-a.lastLease.Load())/1e9
	if lacking <= 0 {
		return 0
	}
	return waitFor(lacking / rate)
}

// reject builds a rejection, mapping the Store's reason through L1's state.
func (a *App) reject(p *appPolicy, st *store.ClusterState, r store.Reason, retry time.Duration) Decision {
	return Decision{
		Reason:     mapReason(st, p.Priority, r),
		Remaining:  a.Remaining(),
		RetryAfter: min(max(retry, time.Millisecond), LongestWait),
		Limit:      p.burst,
	}
}

// mapReason turns a Store refusal into the reason the client sees, given L1's last known state
// (docs/configuration.md, "Responses"): a refusal of the app's own bucket names what L1 did to
// its refill, if anything (emergency_blocked, emergency_quota_exceeded, cluster_exhausted for an
// overload), and is app_exhausted when L1 left the refill whole, as for P0 in an emergency; a
// refused borrow keeps the Store's reason (borrow_limit_exceeded, or cluster_exhausted for an
// empty pool), except in an emergency, which stops borrowing.
func mapReason(st *store.ClusterState, priority int, r store.Reason) store.Reason {
	if r == store.ReasonRedisUnavailable || r == store.ReasonEmergencyBlocked {
		return r
	}
	f := st.Factors[priority]
	switch {
	case st.Emergency && f <= 0:
		return store.ReasonEmergencyBlocked
	case st.Emergency && f < 1:
		return store.ReasonEmergencyQuotaExceeded
	case st.Emergency:
		return store.ReasonAppExhausted
	case r == store.ReasonBorrowLimitExceeded || r == store.ReasonClusterExhausted:
		return r
	case f < 1:
		return store.ReasonClusterExhausted
	}
	return store.ReasonAppExhausted
}

// oneToken is how long L2 needs to refill one token at the app's current rate.
func (a *App) oneToken(p *appPolicy, st *store.ClusterState) time.Duration {
	rate := p.Guaranteed * st.Factors[p.Priority]
	if !(rate > 0) {
		return time.Second
	}
	return waitFor(1 / rate)
}

// LongestWait bounds every wait the limiter computes or passes on (retry-after), and every
// time the response headers show: a year, which for a client means never. An app refilling a
// token per 300 years (guaranteed 1e-10) would otherwise overflow time.Duration into a
// negative wait, shown as "retry in 1 s".
const LongestWait = 365 * 24 * time.Hour

// waitFor is s seconds rounded up to the nanosecond, at most LongestWait.
func waitFor(s float64) time.Duration {
	if !(s < LongestWait.Seconds()) {
		return LongestWait
	}
	return time.Duration(math.Ceil(s * 1e9))
}

// Settle books an admitted request's actual cost once it is known; est is the cost Take
// charged. The difference is settled on the bucket: an underestimate is charged (Charge), an
// overestimate or a rollback (actual 0) refunded (Refund). A request admitted without leased
// tokens (d.Minted) gives its refund back to where it came from (the rescue allowance), never
// to the local balance: that would turn tokens nobody leased into real ones.
//
// The actual cost is what L1's usage window counts, from here: an estimate counted at
// admission would let one request declaring an absurd body size (a Content-Length of 10^18,
// estimated at the cost model's max) push the cluster into its automatic emergency, fleet-wide,
// without sending a byte. Every admitted request must be settled exactly once.
func (a *App) Settle(d Decision, est, actual int64) {
	delta := actual - est
	switch {
	case delta > 0:
		a.Charge(delta)
	case delta < 0 && d.Minted:
		a.unmint(-delta)
	case delta < 0:
		a.Refund(-delta)
	}
	a.settledCost.Add(max(actual, 0))
	a.list() // its cost for the next report
}

// Refund gives n leased tokens back to the local bucket: the rollback of a request rejected
// later in the chain, or the settlement of an overestimate. It restores the balance exactly.
func (a *App) Refund(n int64) {
	if n <= 0 {
		return
	}
	a.balance.Add(n)
	a.consumed.Add(-n)
	a.list()
}

// Charge takes n more tokens: the settlement of an underestimate. What the local tokens cannot
// cover becomes local debt, paid first by the next lease; the request is never rejected.
func (a *App) Charge(n int64) {
	if n <= 0 {
		return
	}
	a.balance.Add(-n)
	a.consumed.Add(n)
	a.list()
}

// wait retries a rejected take until it is admitted, maxWait has passed, or ctx is done.
func (a *App) wait(ctx context.Context, cost int64, maxWait time.Duration, d Decision) Decision {
	for left := maxWait; !d.Allowed && left > 0 && waitable(d.Reason); {
		w := min(max(d.RetryAfter, time.Millisecond), left)
		if !a.l.clock.Sleep(ctx, w) {
			return d
		}
		left -= w
		d = a.take(ctx, cost)
	}
	return d
}

// refusalReason is the reason of the refusal in force.
func (a *App) refusalReason() store.Reason {
	return store.Reason(a.refusal.Load()) //nolint:gosec // refusal only ever holds a store.Reason (lease.go)
}

// waitable reasons are the ones that tokens arriving later can cure.
func waitable(r store.Reason) bool {
	switch r {
	case store.ReasonAppExhausted, store.ReasonClusterExhausted, store.ReasonEmergencyQuotaExceeded, store.ReasonBorrowLimitExceeded:
		return true
	default:
		return false
	}
}
