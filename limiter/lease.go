package limiter

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/tierbucket/caddy-tierbucket/store"
)

// startLease returns the lease in flight, starting one if there is none (single-flight).
// need > 0 is the cost of the request waiting for it; 0 is a background refill. It returns
// nil when a lease that finished meanwhile already covers need (grants are added before the
// call is cleared, so checking under the lock cannot miss one).
func (a *App) startLease(need int64) *leaseCall {
	a.mu.Lock()
	if c := a.call; c != nil {
		a.mu.Unlock()
		return c
	}
	if need > 0 && a.balance.Load() >= need {
		a.mu.Unlock()
		return nil
	}
	c := &leaseCall{done: make(chan struct{})}
	a.call = c
	a.mu.Unlock()
	a.l.spawn(func() { a.runLease(c, need) })
	return c
}

// refill starts a background lease after a take left the balance low, unless one is in flight,
// the Store refused recently, or is unavailable to this app (storeAway).
func (a *App) refill() {
	l := a.l
	if a.storeAway() || l.closed.Load() {
		return
	}
	a.mu.Lock()
	busy := a.call != nil
	a.mu.Unlock()
	if busy || l.clock.Now().UnixNano() < a.retryUntil.Load() {
		return
	}
	a.startLease(0)
}

// runLease makes one Store lease and adds the grant to the local balance.
func (a *App) runLease(c *leaseCall, need int64) {
	l := a.l
	s := l.snap()
	p := a.pol.Load()
	st := l.state.Load()
	b := a.balance.Load()
	// The Store grants a lease only when L2 holds its Need (then up to Want). Need is what the
	// request lacks beyond the local tokens, leaving out local debt, which Want carries and
	// the grant pays first. A Need that included the debt would wait for L2 to hold debt and
	// cost at once, which it never does while a peer keeps taking small leases, and an
	// indebted instance would starve. Every grant pays part of the debt, and the request is
	// admitted once it is paid.
	short := min(max(need-max(b, 0), 0), p.burst)
	req := store.LeaseRequest{
		Cluster:  s.cfg.Cluster,
		App:      a.id,
		Policy:   p.AppPolicy,
		Factor:   s.adaptiveFactor(st, p.AppPolicy),
		Want:     a.want(short, max(-b, 0), p, st, s),
		Need:     short,
		Instance: s.cfg.Instance,
		// Borrowing: the pool's rate from the capacity in force; none in an emergency.
		Unallocated: s.unallocatedNow(st),
		NoBorrow:    st.Emergency,
		// The app's statistics of the requests after this lease may wait this long.
		StatsInterval: s.cfg.StatsInterval,
	}
	// Every request waiting on this lease shares it: after an idle period the rate-based
	// target is a single token, and 32 waiters sharing one token would each lease in turn.
	req.Want = max(req.Want, min(a.waiting.Load()-b, p.burst))
	stats := a.takeStats() // the app's statistics travel with its lease
	req.Stats = store.StatsBatch{Seq: stats.seq, Requests: stats.requests}
	start := l.clock.Now()
	err := l.callStore(context.Background(), func(ctx context.Context) (err error) {
		c.res, err = l.store.Lease(ctx, req)
		return err
	})
	now := l.clock.Now()
	l.deg.observe(now.Sub(start), err, false)
	a.answered.Store(err == nil)
	if err == nil {
		a.statsDelivered(stats, c.res.PrevSeq, start, now)
		a.applyLease(req, c.res, now)
	} else {
		a.statsFailed(stats)
	}
	c.err = err
	a.mu.Lock()
	a.call = nil
	a.mu.Unlock()
	a.list() // its tokens, or statistics left to send after a failure
	close(c.done)
}

// want is the lease target (docs/design.md, "Lease sizes"): about the app's rate × its horizon
// (or, when more, what was consumed since the last tick, so that leases grow geometrically),
// × the degradation multiplier, at most burst / (2 × live instances), less the local balance, so
// that no instance hoards a small quota, at least 1; plus any local debt, which the grant pays first;
// and at least the need (a waiter's shortfall, which already includes the debt).
func (a *App) want(need, debt int64, p *appPolicy, st *store.ClusterState, s *snapshot) int64 {
	m := leaseMultiplier(a.l.Level())
	t := max(a.rateTgt.Load(), a.consumed.Load()-a.lastCons.Load()) * m
	live := int64(max(st.LiveInstances, 1))
	if a.short.Load() && paced(int(live)) {
		// At the quota in a fleet, this instance's share of what L2 refills over the horizon.
		// Sized by the instance's own admitted rate instead, the instance that got most would
		// keep getting most, and one that was refused would ask for ever smaller leases.
		// The refill factor is the one the lease asks L2 to refill at (with a learned
		// capacity, the priority's share of it and the elastic share).
		share := p.Guaranteed * s.adaptiveFactor(st, p.AppPolicy) / float64(live)
		t = int64(math.Ceil(share*AtQuotaHorizon(s.cfg, int(live)).Seconds())) * m
	}
	// The cap bounds what the instance holds, the lease included: a refill that started with
	// tokens left would otherwise overshoot it, and the next tick return the overshoot
	// (returnExcess), one Store call per lease of a hot app.
	t = min(t, int64(p.Burst/float64(2*live))-max(a.balance.Load(), 0))
	return max(max(t, 1)+debt, need)
}

// applyLease books a grant and, for a refused or short lease, when to ask again.
func (a *App) applyLease(req store.LeaseRequest, res store.Lease, now time.Time) {
	if res.Granted > 0 {
		a.balance.Add(res.Granted)
		a.leased.Add(res.Granted)
		a.stats.leases.Add(1)
		a.stats.leaseTokens.Add(res.Granted)
		a.lastLease.Store(now.UnixNano())
	}
	a.l2Left.Store(max(res.Remaining, 0))
	cfg := a.l.snap().cfg
	live := max(a.l.state.Load().LiveInstances, 1)
	early := contestedEarly(cfg, live)
	// L2 is contested when the lease came back short or, in a large fleet, left L2 below a
	// quarter of the burst. Within the quota L2 stays above that: leases hold at most half the
	// burst (the fairness cap), and L2 refills faster than the app spends.
	contested := res.Granted < req.Want || (early && float64(res.Remaining) < a.pol.Load().Burst/4)
	a.short.Store(contested)
	a.pace(req, res, contested, live)
	if contested && early {
		// What is left in L2 is the other instances' share: a cheaper request must not lease
		// it before this instance's share has refilled (see refused).
		a.l2Left.Store(0)
	}
	a.l2Borrowed.Store(math.Float64bits(res.Borrowed))
	a.l2Debt.Store(math.Float64bits(res.Debt))
	a.refillAt.Store(a.refillPoint(req.Want, cfg))
	// On a contested L2, ask again when the Store expects the need, but not before what this
	// lease lacks has refilled at the app's rate, and in a fleet not before this instance's
	// share of the refill (rate / live instances) has also covered what it got: sooner would
	// take other instances' share or be refused again. At most one at-quota horizon. An app
	// far over its quota then costs the Store no more calls than one within it.
	var retry time.Duration
	// An app that may borrow is gated by refusals only: a lease that met its need (or asked
	// for none, so the Store did not try to borrow) leaves the next request free to borrow its
	// shortfall. Borrowing is bounded by max_borrow, and its refusal gates like any other.
	borrower := req.BorrowingAllowed() && res.Granted >= req.Need
	if contested && !borrower {
		p := a.pol.Load()
		batch := time.Second
		if rate := p.Guaranteed * req.Factor; rate > 0 {
			secs := float64(req.Want-res.Granted) / rate
			if paced(live) {
				secs += float64(res.Granted) / (rate / float64(live))
			}
			batch = min(waitFor(secs), AtQuotaHorizon(cfg, live))
		}
		retry = min(max(res.RetryAfter, batch), LongestWait)
	}
	switch until := now.Add(retry).UnixNano(); {
	case retry <= 0:
		a.retryUntil.Store(0)
	case until > a.retryUntil.Load():
		r := store.ReasonAppExhausted
		if res.Granted < req.Need && res.Reason != store.ReasonNone {
			r = res.Reason
		}
		a.refusal.Store(uint32(r))
		a.retryUntil.Store(until)
	default:
		// A short lease for a cheaper request made during a refusal (see refused) keeps the
		// refusal and its reason: L2 holds even less now than when it was refused.
	}
	if a.l.closed.Load() {
		// a grant that arrived after Close goes back to L2, even in fail_open; best effort:
		// nothing is left to retry it
		_ = a.giveBack(now, a.takeTokens(0))
	}
}

// returnTokens gives all local tokens above keep back to L2. On failure they are dropped, not
// put back: the Return may have been applied all the same (a timeout after the Store ran it),
// and tokens kept locally as well would exist twice (over-admission). Dropping them can only
// under-admit, by at most what one failed Return carried, and L2 refills anyway.
//
// Nothing is returned while the limiter is in fail_open: after one failed Return, the sync
// loop's others (expired leases, excess, removed apps) would each wait a Store timeout,
// holding up the probe. The tokens stay local until the Store answers again.
func (a *App) returnTokens(now time.Time, keep int64) error {
	if a.l.Level() == LevelFailOpen {
		return nil
	}
	return a.giveBack(now, a.takeTokens(keep))
}

// giveBack returns n tokens already taken out of the balance to L2 (dropped on failure).
func (a *App) giveBack(now time.Time, n int64) error {
	if n <= 0 {
		return nil
	}
	l := a.l
	s := l.snap()
	stats := a.takeStats() // the app's statistics travel with its return too
	ret := store.Return{
		Cluster: s.cfg.Cluster, App: a.id, Policy: a.pol.Load().AppPolicy, Tokens: n,
		Instance: s.cfg.Instance, Stats: store.StatsBatch{Seq: stats.seq, Requests: stats.requests},
		StatsInterval: s.cfg.StatsInterval,
	}
	start := l.clock.Now()
	err := l.callStore(context.Background(), func(ctx context.Context) error { return l.store.Return(ctx, ret) })
	done := l.clock.Now()
	l.deg.observe(done.Sub(start), err, false)
	if err != nil {
		a.dropped.Add(n)
		a.statsFailed(stats) // pending: the next report sends them again
		return err
	}
	// A return's answer names no earlier Seq (as a lease's does), so it judges no batch lost:
	// the app's next lease or flush does.
	a.statsDelivered(stats, stats.seq, start, done)
	a.returned.Add(n)
	a.lastLease.Store(now.UnixNano())
	return nil
}

// takeTokens takes the local tokens above keep out of the balance and returns how many.
func (a *App) takeTokens(keep int64) int64 {
	for {
		b := a.balance.Load()
		n := b - max(keep, 0)
		if n <= 0 {
			return 0
		}
		if a.balance.CompareAndSwap(b, b-n) {
			return n
		}
	}
}

// callStore runs one Store call bounded by parent and the background timeout, turning a panic
// into an error.
func (l *Limiter) callStore(parent context.Context, f func(ctx context.Context) error) (err error) {
	ctx, cancel := context.WithTimeout(parent, l.bgTimeout())
	defer cancel()
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("limiter: store panicked: %v", r)
		}
	}()
	return f(ctx)
}

// bgTimeout bounds Store calls that no request waits on (reports, returns, the lease itself:
// waiters give up after StoreTimeout on their own). It is long enough to measure a slow Store.
func (l *Limiter) bgTimeout() time.Duration {
	return max(l.snap().cfg.StoreTimeout, time.Second)
}

// rescueBucket is the local bucket that bounds admissions without a lease: in fail-open
// (FailLocal) and on credit (creditTake). It is persistent: it refills lazily with the time
// elapsed since it was last used, so a new fail-open episode starts with what is left of the
// last one plus the refill, never with a fresh burst. It starts full (ts 0).
type rescueBucket struct {
	tokens float64
	ts     int64 // unix ns of the last refill; 0 = never used
}

// rescueTake takes cost from the rescue bucket (rate guaranteed × RescueRatio / live
// instances, burst the same share of the app's burst) if it holds need (capped at its burst).
// It returns what is left, or when it will hold need.
func (a *App) rescueTake(cost, need int64, p *appPolicy, st *store.ClusterState) (ok bool, left int64, retry time.Duration) {
	l := a.l
	s := l.snap()
	share := s.cfg.RescueRatio / float64(max(st.LiveInstances, 1))
	// under a learned capacity, the last one known: an app's priority share of it bounds its rate
	share *= s.capacityShare(st, p.Priority)
	rate, burst := p.Guaranteed*share, max(p.Burst*share, 1)
	if rate <= 0 {
		return false, 0, probeInterval // nothing of the last learned capacity is left for this priority
	}
	now := l.clock.Now().UnixNano()
	a.mu.Lock()
	defer a.mu.Unlock()
	r := &a.rescue
	switch {
	case r.ts == 0:
		r.tokens, r.ts = burst, now
	case now > r.ts:
		r.tokens = min(burst, r.tokens+float64(now-r.ts)/1e9*rate)
		r.ts = now
	default:
		r.tokens = min(burst, r.tokens) // the burst may have shrunk (more live instances)
	}
	fneed := float64(min(need, int64(burst)))
	if r.tokens < fneed {
		return false, 0, waitFor((fneed - r.tokens) / rate)
	}
	r.tokens -= float64(cost)
	return true, int64(max(r.tokens, 0)), 0
}

// failTake decides a take the local tokens cannot cover while the Store is unavailable
// (LevelFailOpen). Tokens admitted this way are counted as minted (they were never leased).
func (a *App) failTake(cost, need int64, p *appPolicy, st *store.ClusterState) Decision {
	switch a.l.snap().cfg.OnStoreFailure {
	case FailOpen:
		a.mint(cost)
		return Decision{Allowed: true, Limit: p.burst, Minted: true}
	case FailClosed:
		a.l.deg.rescue.rejects.Add(1)
		return a.reject(p, st, store.ReasonRedisUnavailable, probeInterval)
	default: // FailLocal: the rescue bucket
	}
	ok, left, retry := a.rescueTake(cost, need, p, st)
	if !ok {
		a.l.deg.rescue.rejects.Add(1)
		return a.reject(p, st, store.ReasonAppExhausted, retry)
	}
	a.mint(cost)
	return Decision{Allowed: true, Remaining: left, Limit: p.burst, Minted: true}
}

// creditTake decides a take whose request gave up waiting (StoreTimeout) for a lease that is
// still in flight: the Store is slow, not known to have failed. It is admitted on credit if
// the rescue bucket allows it (in every failure mode: the same bound as fail-open) and its
// cost becomes local debt, which the lease in flight (or the next one) pays. Nothing is
// minted, so L2 stays the one source of tokens. Otherwise it is rejected with a retry-after of
// StoreTimeout, about when the lease should have answered.
func (a *App) creditTake(cost, need int64, p *appPolicy, st *store.ClusterState) Decision {
	ok, left, _ := a.rescueTake(cost, need, p, st)
	if !ok {
		return a.reject(p, st, store.ReasonAppExhausted, a.l.snap().cfg.StoreTimeout)
	}
	a.balance.Add(-cost)
	a.admitted(cost, a.l)
	return Decision{Allowed: true, Remaining: left, Limit: p.burst}
}

// mint admits cost tokens that were never leased (rescue or fail-open).
func (a *App) mint(cost int64) {
	a.minted.Add(cost)
	a.l.deg.rescue.reqs.Add(1)
	a.l.deg.rescue.cost.Add(cost)
	a.admitted(cost, a.l)
}

// unmint gives back n tokens of a minted admission: the settlement of an overestimate. They
// return to the rescue bucket they came from (which caps them at its burst on its next use).
func (a *App) unmint(n int64) {
	a.minted.Add(-n)
	a.consumed.Add(-n)
	a.l.deg.rescue.cost.Add(-n)
	a.mu.Lock()
	if a.rescue.ts != 0 {
		a.rescue.tokens += float64(n)
	}
	a.mu.Unlock()
	a.list()
}

// refillPoint is the balance below which a take starts a background refill: the configured share
// of the lease target, raised so that at the app's current rate the local tokens outlast two
// measured Store round trips (the refill then lands before the balance runs dry and requests do
// not wait on it), but never above half the target.
func (a *App) refillPoint(want int64, cfg Config) int64 {
	at := cfg.RefillThreshold * float64(want)
	rate := float64(a.rateTgt.Load()) / a.horizon(cfg).Seconds() // tokens per second
	inFlight := rate * 2 * a.l.Latency().Seconds()
	return int64(max(at, min(inFlight, float64(want)/2)))
}
